"""Output and shared arguments of the ``starflow`` commands.

Human output is aligned tables on stdout; ``--json`` gives stable keys
instead. Timestamps are ISO-8601 UTC.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from ..clock import parse_age

__all__ = [
    "age_arg",
    "cell",
    "human_duration",
    "iso",
    "json_flag",
    "render_table",
    "run_args",
    "write",
    "write_json",
]


def age_arg(text: str) -> timedelta:
    """An argparse type for an age such as ``90s``, ``30m``, ``2h``, ``3d``, ``1w``
    (``--older-than``, ``--after``): a usage error naming the text otherwise."""
    try:
        age = parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if age is None:
        raise argparse.ArgumentTypeError(f"not an age like 90s, 30m, 2h, 3d, 1w: {text!r}")
    return age


def iso(ts: datetime | None) -> str | None:
    """ISO-8601 UTC with milliseconds and a ``Z`` (None stays None)."""
    if ts is None:
        return None
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def human_duration(seconds: float) -> str:
    """``0.250s``, ``12.0s``, ``4m05s``, ``2h03m``, ``3d04h``."""
    if seconds < 10:
        return f"{seconds:.3f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def cell(value: Any, width: int | None = None) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, datetime):
        text = iso(value) or "-"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, int | float | bool):
        text = str(value)
    else:
        text = msgspec.json.encode(value).decode()
    text = " ".join(text.split())  # one line per row, whatever the value holds
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
                 max_width: int = 60) -> str:
    """Rows as left-aligned columns under upper-case headers, one line each."""
    cells = [[cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def write(text: str) -> None:
    sys.stdout.write(text)


def write_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="machine-readable JSON on stdout (stable keys)")


def _run_id_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID")


def run_args(parser: argparse.ArgumentParser) -> None:
    _run_id_arg(parser)
    json_flag(parser)
