"""Retention: prune ended runs after 30 days, keeping their histories as files.

Three orders run to the end and one waits for an approval. Forty days later
(a fake clock) a dry run says what would go, then ``sf.prune`` exports the
three ended runs' histories to a directory (JSON lines, the format of
``starflow runs export``) and deletes them with every row they had. The
paused run stays: active runs are never pruned. The exported histories replay
against this code, as ``starflow replay FILE --app examples.retention`` would.

In production set ``StarflowConfig(retention=timedelta(days=30))`` and let
maintenance prune every ``prune_interval``, or run
``starflow runs prune --older-than 30d --export /backups/runs`` from cron.

    python examples/retention.py
"""

from __future__ import annotations

import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import anyio
import msgspec

from starflow import Starflow, StarflowConfig, step, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow.admin.replayer import Replayer
from starflow_testing import FakeClock


@step
async def charge(order: str) -> str:
    return f"charged {order}"


@workflow(name="retention-order", version=1)
async def order(order_id: str, needs_approval: bool = False) -> str:
    if needs_approval:
        await wait_for("approved")
    return await charge(order_id)


async def main() -> None:
    workdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    clock = FakeClock()
    adapter = adapter_from_url(f"sqlite:///{workdir / 'retention.db'}")
    config = StarflowConfig(retention=timedelta(days=30))
    async with Starflow(adapter, clock=clock, config=config, maintenance=False) as sf:
        done = [await sf.run(order, f"o-{i}") for i in range(3)]
        waiting = await sf.run(order, "o-big", needs_approval=True)
        print("statuses:", [h.status for h in done], waiting.status)

        await clock.advance(timedelta(days=40))
        dry = await sf.prune(dry_run=True)  # older_than: config.retention
        print("a dry run would prune", dry.runs, "runs")

        report = await sf.prune(export_dir=workdir / "exports")
        print("pruned", report.runs, "runs; rows:", dict(sorted(report.rows.items())))
        print("paused run kept:", (await sf.get_run(waiting.run_id)).status)

    replayer = Replayer()
    for path in report.files:
        for line in (await anyio.Path(path).read_bytes()).splitlines():
            result = await replayer.replay_history(msgspec.json.decode(line))
            print("replayed", result.workflow, "ok" if result.ok else result.error)


if __name__ == "__main__":
    anyio.run(main)
