"""``starflow replay``: replay exported histories against this code (a
pre-deploy determinism check), with :class:`starflow.admin.replayer.Replayer`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

import anyio
import msgspec

from ._base import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    app_args,
    command,
    load_app_object,
    load_codec,
)
from ._format import json_flag, render_table, write, write_json

#: Statuses of runs that never replay again (an error run does: ``runs retry``).
ENDED = frozenset({"success", "cancelled"})

__all__: list[str] = []


def _replay_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help="an export from `starflow runs export` or `starflow runs "
                             "prune --export` (- for stdin)")
    parser.add_argument("--codec", metavar="MODULE:ATTR", default=None,
                        help="the payload codec the runs were written with (default: the "
                             "--app Starflow's, else $STARFLOW_CODEC)")
    json_flag(parser)


def _histories(document: Any, source: str) -> list[Mapping[str, Any]]:
    items = document if isinstance(document, list) else [document]
    if not items or not all(isinstance(i, dict) for i in items):
        raise CommandError(f"{source}: not a run history export (expected a JSON object or an "
                           "array of them, as `starflow runs export` writes)")
    return items


def _decode(raw: bytes | str) -> Any:
    """One JSON document (``starflow runs export``), or JSON lines, one history per
    line (``starflow runs prune --export``): then the list of them."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        text = raw.decode() if isinstance(raw, bytes) else raw
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise
        return [msgspec.json.decode(line) for line in lines]


@command("replay",
         help="replay exported histories against this code; exit 1 if any would fail "
              "(a pre-deploy determinism check)",
         args=[app_args], configure=_replay_args)
async def _replay(ns: argparse.Namespace) -> int:
    if not ns.app:
        raise CommandError("starflow replay needs --app MODULE[:ATTR]: the module that "
                           "defines the workflows to check", EXIT_USAGE)
    from ..admin.history import load_history
    from ..admin.replayer import Replayer
    from ..errors import SerializationError

    if ns.file == "-":
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    else:
        try:
            raw = await anyio.Path(ns.file).read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {ns.file}: {exc.strerror or exc} (give a file "
                               "written by starflow runs export)",
                               EXIT_USAGE) from exc
    try:
        document = _decode(raw)
    except msgspec.DecodeError as exc:
        raise CommandError(f"{ns.file}: not valid JSON ({exc}); export it with "
                           "starflow runs export") from exc
    except RecursionError:  # the decoder recurses once per level of nesting
        raise CommandError(f"{ns.file}: nested too deep to be a run history export; "
                           "export it with starflow runs export") from None
    app = load_app_object(ns.app)  # registers the workflows the replayer looks up
    codec = load_codec(ns)
    if codec is None and app is not None:
        codec = getattr(app, "codec", None)  # an --app Starflow opened with a codec
    replayer = Replayer(codec=codec)
    results = []
    statuses: list[str] = []
    for history in _histories(document, ns.file):
        try:
            parsed = load_history(history)
            statuses.append(parsed.run.status)
            results.append(await replayer.replay_history(parsed))
        except SerializationError as exc:
            raise CommandError(f"{ns.file}: {exc}") from exc
    # A run that succeeded or was cancelled never replays again: a deploy cannot break
    # it, so its result is reported apart and does not fail the check. Every other
    # run (queued, running, paused, or in error, which `runs retry` replays) can.
    ended = [s in ENDED for s in statuses]
    failed = [r for r, done in zip(results, ended, strict=True) if not r.ok and not done]
    ended_failed = [r for r, done in zip(results, ended, strict=True) if not r.ok and done]
    if ns.json:
        write_json([{"run_id": r.run_id, "workflow": r.workflow, "status": status,
                     "ended": done, "ok": r.ok, "outcome": r.outcome,
                     "error": str(r.error) if r.error else None}
                    for r, status, done in zip(results, statuses, ended, strict=True)])
    else:
        write(render_table(["run", "workflow", "status", "outcome", "ok"],
                           [(r.run_id, r.workflow, status, r.outcome,
                             "yes" if r.ok else ("no (ended)" if done else "NO"))
                            for r, status, done in zip(results, statuses, ended, strict=True)]))
        for r in failed:
            write(f"{r.run_id}: {type(r.error).__name__}: {r.error}\n")
    live = len(results) - sum(ended)
    if ended_failed:
        sys.stderr.write(
            f"{len(ended_failed)} ended run(s) (success or cancelled) would not replay on "
            "this code; they never replay again, so they do not fail the check\n")
    if failed:
        nondeterministic = sum(r.outcome == "nondeterminism" for r in failed)
        raise CommandError(
            f"{len(failed)} of {live} run(s) that can still replay would fail on this code "
            f"({nondeterministic} non-deterministic): keep the old workflow version "
            "registered for them, or fix the change before deploying", EXIT_FAILURE)
    sys.stderr.write(f"{live} run(s) that can still replay replay cleanly"
                     + (f" ({sum(ended)} ended run(s) checked apart)" if any(ended) else "")
                     + "\n")
    return EXIT_OK
