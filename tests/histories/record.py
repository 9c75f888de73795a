"""Write ``tests/histories/<scenario>.json`` from the current code: re-record on purpose.

    python -m tests.histories.record              # every scenario
    python -m tests.histories.record update sleep # some of them

Each file is what ``starflow runs export`` writes for the scenario's runs (a
JSON array, indented for review; tracebacks name files relative to the
checkout). Re-record only when a change to the stored history format is
intended, and say so in the commit and the CHANGELOG: the old files are what
databases written by released versions hold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from .scenarios import SCENARIOS, record

HERE = Path(__file__).resolve().parent
#: The checkout's root: stripped from the tracebacks stored in failures, so the files
#: do not name the directory they were recorded in (nothing reads those paths).
ROOT = HERE.parent.parent


def path_of(name: str) -> Path:
    """The golden file of scenario ``name``."""
    return HERE / f"{name}.json"


def dump(histories: list[dict[str, object]]) -> str:
    """The file's text: key order as exported, two-space indent, final newline, and
    the checkout's path made relative in tracebacks."""
    text = json.dumps(histories, indent=2, ensure_ascii=False) + "\n"
    return text.replace(json.dumps(f"{ROOT}/")[1:-1], "")


async def _main(names: list[str]) -> None:
    for name in names:
        histories = await record(name)
        path_of(name).write_text(dump(histories), encoding="utf-8")
        print(f"wrote {path_of(name).relative_to(ROOT)} "
              f"({len(histories)} run(s))")


def main(argv: list[str]) -> int:
    unknown = [n for n in argv if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}: choose from {sorted(SCENARIOS)}",
              file=sys.stderr)
        return 2
    anyio.run(_main, argv or list(SCENARIOS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
