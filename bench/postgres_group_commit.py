"""Group commit vs per-unit transactions on PostgreSQL (issue #4).

Runs N concurrent units against the PostgreSQL adapter two ways:

* ``per-unit``: the shipped adapter — each unit is its own transaction on a
  pooled connection (PostgreSQL merges the WAL flushes of concurrent commits).
* ``group``: the SQLite adapter's leader/follower writer transplanted onto one
  dedicated connection — units queued while a batch commits are merged into
  the next transaction, each inside its own SAVEPOINT.

Usage::

    python bench/postgres_group_commit.py [postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from starflow.adapters.postgres import PostgresWorkflowStateAdapter, _run_statement
from starflow.adapters.units import Guard, InsertEvent, Unit, UpdateRun
from starflow.workflow.context import WorkflowContext

URL = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/test"
CONCURRENCY = 50
ROUNDS = 100


class _Item:
    def __init__(self, unit: Unit, plan: Any) -> None:
        self.unit, self.plan = unit, plan
        self.event = anyio.Event()
        self.result = False
        self.error: BaseException | None = None


class GroupCommitPostgres(PostgresWorkflowStateAdapter):
    """The per-unit adapter with ``execute`` replaced by a one-connection group commit."""

    async def open(self) -> None:
        await super().open()
        assert self._pool is not None
        self._writer = await self._pool.acquire()
        self._queue: list[_Item] = []
        self._writing = False

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.release(self._writer)
        await super().close()

    async def execute(self, unit: Unit) -> bool:
        item = _Item(unit, self._plan(unit))
        self._queue.append(item)
        if self._writing:
            await item.event.wait()
        else:
            self._writing = True
            try:
                with anyio.CancelScope(shield=True):
                    while self._queue:
                        batch, self._queue = self._queue, []
                        try:
                            await self._apply_batch(batch)
                        except BaseException as exc:
                            for w in batch:
                                w.error = w.error or exc
                        finally:
                            for w in batch:
                                w.event.set()
            finally:
                self._writing = False
        if item.error is not None:
            raise item.error
        return item.result

    async def _apply_batch(self, batch: list[_Item]) -> None:
        conn = self._writer
        durable = any(w.unit.durable for w in batch)
        begin = "BEGIN" if durable else "BEGIN; SET LOCAL synchronous_commit TO off"
        await conn.execute(begin + "; SAVEPOINT u")
        for i, w in enumerate(batch):
            if i:
                await conn.execute("RELEASE SAVEPOINT u; SAVEPOINT u")
            try:
                g = w.unit.guard
                held = g is None or await self._check_guard(conn, g)
                if held:
                    for st in w.plan:
                        await _run_statement(conn, st)
                else:
                    await conn.execute("ROLLBACK TO SAVEPOINT u")
                w.result = held
            except Exception as exc:
                await conn.execute("ROLLBACK TO SAVEPOINT u")
                w.error = exc
        await conn.execute("COMMIT")


async def bench(adapter: PostgresWorkflowStateAdapter, label: str) -> None:
    now = datetime.now(UTC)
    runs = [str(uuid.uuid4()) for _ in range(CONCURRENCY)]
    for rid in runs:
        await adapter.on_run_start(rid, WorkflowContext(run_id=rid, workflow="bench"), now=now)
        await adapter.write_lease(rid, "runner", now + timedelta(minutes=5), now=now)

    def guarded(rid: str, n: int) -> Unit:  # a step completing under the lease
        return Unit(guard=Guard(run_id=rid, leased_by="runner"), ops=[
            InsertEvent(method="on_node_complete", run_id=rid, event_type="node_complete",
                        node_id=f"step:s#{n}", payload={"n": n}, created_at=now),
        ])

    def heartbeat(rid: str, n: int) -> Unit:  # a lone unguarded durable op
        return Unit(ops=[UpdateRun(method="refresh_lease", run_id=rid,
                                   values={"last_heartbeat": now})])

    def node_start(rid: str, n: int) -> Unit:  # non-durable
        return Unit(durable=False, guard=Guard(run_id=rid, leased_by="runner"), ops=[
            InsertEvent(method="on_node_start", run_id=rid, event_type="node_start",
                        node_id=f"step:s#{n}", payload=None, created_at=now),
        ])

    for name, make in (("guarded node_complete", guarded), ("unguarded heartbeat", heartbeat),
                       ("non-durable node_start", node_start)):
        start = time.perf_counter()
        for r in range(ROUNDS):
            async with anyio.create_task_group() as tg:
                for rid in runs:
                    tg.start_soon(adapter.execute, make(rid, r))
        elapsed = time.perf_counter() - start
        total = ROUNDS * CONCURRENCY
        print(f"{label:10} {name:24} {total / elapsed:8.0f} units/s "
              f"({elapsed / ROUNDS * 1000:6.2f} ms per {CONCURRENCY} concurrent units)")


async def main() -> None:
    for label, cls in (("per-unit", PostgresWorkflowStateAdapter),
                       ("group", GroupCommitPostgres),
                       ("per-unit", PostgresWorkflowStateAdapter),
                       ("group", GroupCommitPostgres)):
        adapter = cls(URL, workspace_id=f"bench-{uuid.uuid4().hex[:8]}", max_size=10)
        await adapter.open()
        try:
            await bench(adapter, label)
        finally:
            await adapter.close()


if __name__ == "__main__":
    anyio.run(main)
