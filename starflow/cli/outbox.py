"""``starflow outbox status``: the warm tier's mirror outbox."""

from __future__ import annotations

import argparse

from ._base import EXIT_OK, app_args, command, db_args, open_app
from ._format import human_duration, json_flag, render_table, write, write_json

__all__: list[str] = []


@command("status", group="outbox",
         help="the mirror outbox's lag: pending rows by age, and the level (ok/warn/page)",
         args=[app_args, db_args], configure=json_flag)
async def _outbox_status(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        status = await sf.outbox_status()
    if ns.json:
        write_json({"pending": status.pending,
                     "oldest_age_seconds": round(status.oldest_age_seconds, 3),
                     "level": status.level, "buckets": status.buckets, "warm": status.warm})
        return EXIT_OK
    write(f"outbox: {status.pending} pending, oldest "
           f"{human_duration(status.oldest_age_seconds)}, level {status.level}"
           f"{f', warm tier {status.warm}' if status.warm else ''}\n")
    write(render_table(["age", "rows"],
                        [(_bucket_label(k), v) for k, v in status.buckets.items()]))
    return EXIT_OK


def _bucket_label(key: str) -> str:
    """``lt_1s`` → ``< 1s``, ``1s_5s`` → ``1s-5s``, ``gt_5m`` → ``> 5m``."""
    if key.startswith("lt_"):
        return "< " + key[3:]
    if key.startswith(("gt_", "ge_")):
        return "> " + key[3:]
    return key.replace("_", "-")
