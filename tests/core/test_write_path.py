"""The write path's cost model (issue #6): counted, never timed.

* at most one flush per durable transition: SQLite commits are traced and the
  ``synchronous`` level in force at each is checked; on PostgreSQL each engine
  unit is one statement, non-durable ones turn ``synchronous_commit`` off for
  their own transaction only, and prepared statements are reused;
* group commit releases each awaiting boundary only once its own batch committed;
* resuming a run replays its journal from one query, in O(steps).
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import pytest

import starflow
from starflow import Starflow, StarflowConfig, step, workflow
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.sqlite import LocalWorkflowStateAdapter
from starflow.adapters.units import Guard
from starflow.records import StartOptions
from starflow.workflow.context import WorkflowContext
from tests.conftest import POSTGRES_URL, require_postgres

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
STARFLOW_DIR = str(Path(starflow.__file__).resolve().parent)


@step
async def add_one(x: int) -> int:
    return x + 1


@workflow(name="write-path-three-steps")
async def three_steps(x: int) -> int:
    return await add_one(await add_one(await add_one(x)))


@workflow(name="write-path-long")
async def long_run(n: int) -> int:
    x = 0
    for _ in range(n):
        x = await add_one(x)
    await starflow.wait_for("go")
    return x


class _CountingAdapter(DelegatingAdapter):
    """Counts the reads a resume makes."""

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.list_events_calls = 0

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[Any]:
        self.list_events_calls += 1
        return await super().list_events(run_id, after_id=after_id)


async def _traced(adapter: LocalWorkflowStateAdapter) -> list[str]:
    statements: list[str] = []

    def install(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(statements.append)

    await adapter._call(install)
    return statements


class TestSqliteFlushes:
    """A three-step run commits five times with a flush and three times (node_start) without;
    fused (the default), four times, each flushed, and once (the first node_start) without."""

    @pytest.mark.parametrize("fused", [False, True])
    async def test_commits_and_sync_levels(self, tmp_path: Path, fused: bool) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "w.db"), workspace_id="flushes")
        config = StarflowConfig(fused_boundaries=fused)
        async with Starflow(adapter, maintenance=False, config=config) as sf:
            await sf.run(three_steps, 0)  # definition row, warm caches
            statements = await _traced(adapter)
            handle = await sf.run(three_steps, 1)
            assert handle.status == "success" and handle.result == 4
            await adapter._call(lambda conn: conn.set_trace_callback(None))
        # PRAGMA synchronous is per connection, not per transaction: replay the
        # trace to know the level each COMMIT ran under.
        level = adapter.synchronous
        transactions: list[tuple[str, list[str]]] = []
        current: list[str] = []
        for sql in statements:
            text = sql.strip().upper()
            if text.startswith("PRAGMA SYNCHRONOUS"):
                level = text.split("=")[1].strip()
            elif text.startswith("INSERT") or text.startswith("UPDATE") or text.startswith(
                    "DELETE"):
                current.append(text.split("(")[0].split(" SET ")[0])
            elif text == "COMMIT":
                transactions.append((level, current))
                current = []
        flushed = [t for t in transactions if t[0] in ("FULL", "EXTRA", "NORMAL")]
        unflushed = [t for t in transactions if t[0] == "OFF"]
        if fused:
            # the start with the first node_start; each node_complete with the next
            # node_start or the end: four commits, each flushed.
            assert len(flushed) == 4, transactions
            assert len(unflushed) == 0, transactions
            assert [len(ops) for _, ops in flushed[1:3]] == [2, 2]  # two events each
        else:
            # start, three node_complete, end: one flush each; three node_start: none.
            assert len(flushed) == 5, transactions
            assert len(unflushed) == 3, transactions
        assert all(len(ops) == 1 for _, ops in unflushed)
        assert adapter.synchronous == "FULL"  # fully durable by default

    async def test_configurable_level(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'n.db'}"
        async with Starflow.open(url, config=StarflowConfig(sqlite_synchronous="NORMAL"),
                                 maintenance=False) as sf:
            adapter = sf.adapter
            while isinstance(adapter, DelegatingAdapter):
                adapter = adapter.inner
            assert isinstance(adapter, LocalWorkflowStateAdapter)
            assert adapter.synchronous == "NORMAL"
            assert adapter.inline_commits
        async with Starflow.open(url, config=StarflowConfig(sqlite_inline_commits=False),
                                 maintenance=False) as sf:
            adapter = sf.adapter
            while isinstance(adapter, DelegatingAdapter):
                adapter = adapter.inner
            assert isinstance(adapter, LocalWorkflowStateAdapter)
            assert not adapter.inline_commits
        assert StarflowConfig().sqlite_synchronous == "FULL"
        assert StarflowConfig().postgres_synchronous_commit == "on"


async def _started_runs(adapter: LocalWorkflowStateAdapter, n: int) -> list[str]:
    """``n`` runs started in ``adapter`` (workspace "group"), their ids."""
    ids = [str(uuid.uuid4()) for _ in range(n)]
    for rid in ids:
        ctx = WorkflowContext(run_id=rid, workflow="w", version=1, workspace_id="group",
                              env="prod")
        await adapter.on_run_start(rid, ctx, StartOptions(), now=T0)
    return ids


async def _complete_a_step(adapter: LocalWorkflowStateAdapter, rid: str) -> None:
    """One guarded ``node_complete`` boundary of run ``rid``."""
    async with adapter.unit(guard=Guard(run_id=rid)) as unit:
        await adapter.on_node_complete(rid, "step:a#1", {"output": 1}, now=T0)
    assert unit.held


def _batch_sizes(adapter: LocalWorkflowStateAdapter) -> list[int]:
    """From now on, the size of every batch ``adapter`` writes, in order."""
    sizes: list[int] = []
    original = adapter._apply_batch

    def apply_batch(conn: sqlite3.Connection, batch: list[Any]) -> None:
        sizes.append(len(batch))
        original(conn, batch)

    adapter._apply_batch = apply_batch  # type: ignore[method-assign]
    return sizes


class TestGroupCommit:
    """Units queued while a batch commits go into the next one and are released after it."""

    async def test_release_after_own_commit(self, tmp_path: Path) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "g.db"), workspace_id="group")
        log: list[tuple[str, Any]] = []
        gate = threading.Event()
        original = adapter._apply_batch
        batches = 0

        def apply_batch(conn: sqlite3.Connection, batch: list[Any]) -> None:
            nonlocal batches
            batches += 1
            if batches == 1:
                assert gate.wait(10), "the test never opened the gate"
            original(conn, batch)
            # Runs on the database thread right after COMMIT returned.
            log.append(("committed", [id(w) for w in batch]))

        adapter._apply_batch = apply_batch  # type: ignore[method-assign]
        await adapter.open()
        try:
            gate.set()
            ids = await _started_runs(adapter, 8)
            batches = 0
            gate.clear()
            original_write = adapter._write_queued

            async def write_queued(item: Any) -> Any:
                result = await original_write(item)
                log.append(("released", id(item)))
                return result

            adapter._write_queued = write_queued  # type: ignore[method-assign]

            async with anyio.create_task_group() as tg:
                tg.start_soon(_complete_a_step, adapter, ids[0])
                await anyio.wait_all_tasks_blocked()  # its batch is stuck in the gate
                assert batches == 1
                for rid in ids[1:]:
                    tg.start_soon(_complete_a_step, adapter, rid)
                # Every task is parked: the first batch is stuck in the gate, the
                # other seven are queued behind it.
                await anyio.wait_all_tasks_blocked()
                assert len(adapter._queue) == len(ids) - 1
                assert not [e for e in log if e[0] == "released"]
                gate.set()
        finally:
            await adapter.close()
        committed_at: dict[int, int] = {}
        for index, (kind, value) in enumerate(log):
            if kind == "committed":
                for item in value:
                    committed_at[item] = index
        released = [(index, value) for index, (kind, value) in enumerate(log)
                    if kind == "released"]
        assert len(released) == len(ids)
        for index, item in released:
            assert committed_at[item] < index, "a boundary was released before its commit"
        assert batches == 2  # one alone, then the seven that queued behind it together
        for rid in ids:
            assert [e.event_type for e in await _events(tmp_path / "g.db", rid)] == [
                "node_complete"]


class TestReadyWritesShareABatch:
    """Writes of runs that are ready at the same moment go out as one batch."""

    async def test_one_batch(self, tmp_path: Path) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "s.db"), workspace_id="group")
        await adapter.open()
        try:
            ids = await _started_runs(adapter, 8)
            sizes = _batch_sizes(adapter)
            async with anyio.create_task_group() as tg:
                for rid in ids:
                    tg.start_soon(_complete_a_step, adapter, rid)
        finally:
            await adapter.close()
        # The first writer leads and gives the loop one turn before taking the
        # queue: the seven others are in it by then (not a lone commit first).
        assert sizes == [8]


class TestAFailingUnitInABatch:
    """A unit that raises inside a shared batch loses only its own writes."""

    async def test_only_the_failing_unit_is_rolled_back(self, tmp_path: Path) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "f.db"), workspace_id="group")
        await adapter.open()
        try:
            ids = await _started_runs(adapter, 8)
            sizes = _batch_sizes(adapter)
            outcomes: dict[str, object] = {}

            async def write(rid: str, fail: bool) -> None:
                def fn(conn: sqlite3.Connection) -> str:
                    conn.execute("INSERT INTO workflow_run_events (run_id, event_type) "
                                 "VALUES (?, 'marker')", (rid,))
                    if fail:
                        raise ValueError(f"unit of {rid} fails after writing")
                    return rid

                try:
                    outcomes[rid] = await adapter._write(fn, run=rid)
                except ValueError as exc:
                    outcomes[rid] = exc

            async with anyio.create_task_group() as tg:
                for index, rid in enumerate(ids):
                    tg.start_soon(write, rid, index == 2)
        finally:
            await adapter.close()
        assert sizes == [8]  # one shared batch, not eight commits
        for index, rid in enumerate(ids):
            markers = [e.event_type for e in await _events(tmp_path / "f.db", rid)]
            if index == 2:
                assert isinstance(outcomes[rid], ValueError)
                assert markers == []  # its own write was rolled back
            else:
                assert outcomes[rid] == rid
                assert markers == ["marker"]  # the others' writes committed


class TestInlineCommits:
    """A run writing alone commits on the event loop's thread (no hop to the database
    thread); runs writing concurrently still share commits; another process's write
    lock never stalls the loop."""

    @staticmethod
    def _spy(adapter: LocalWorkflowStateAdapter) -> list[tuple[bool, int, bool]]:
        """(on the loop's thread, batch size, any durable) for every batch written."""
        loop_thread = threading.get_ident()
        seen: list[tuple[bool, int, bool]] = []
        original = adapter._apply_batch

        def apply_batch(conn: sqlite3.Connection, batch: list[Any]) -> None:
            seen.append((threading.get_ident() == loop_thread, len(batch),
                         any(w.durable for w in batch)))
            original(conn, batch)

        adapter._apply_batch = apply_batch  # type: ignore[method-assign]
        return seen

    async def test_alone_commits_on_the_loop(self, tmp_path: Path) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "i.db"), workspace_id="inline")
        seen = self._spy(adapter)
        async with Starflow(adapter, maintenance=False) as sf:
            await sf.run(three_steps, 0)
            seen.clear()
            handle = await sf.run(three_steps, 1)
        assert handle.status == "success" and handle.result == 4
        # the start with the first node_start, then each node_complete with the next
        # node_start or the end (fused_boundaries): each alone, on the loop.
        assert seen == [(True, 1, True)] * 4

    async def test_switched_off(self, tmp_path: Path) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "o.db"), workspace_id="inline",
                                            inline_commits=False)
        seen = self._spy(adapter)
        async with Starflow(adapter, maintenance=False) as sf:
            await sf.run(three_steps, 0)
            seen.clear()
            await sf.run(three_steps, 1)
        # Durable commits go to the database thread; node_start (no flush) stays inline.
        assert [on_loop for on_loop, _, durable in seen if durable] == [False] * 4
        assert [on_loop for on_loop, _, durable in seen if not durable] == []

    async def test_concurrent_runs_share_commits(self, tmp_path: Path) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "c.db"), workspace_id="inline")
        seen = self._spy(adapter)
        async with Starflow(adapter, maintenance=False) as sf:
            await sf.run(three_steps, 0)
            seen.clear()
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(sf.run, three_steps, i)
        durable = [(on_loop, size) for on_loop, size, d in seen if d]
        assert max(size for _, size in durable) >= 10, durable  # group commit at work
        # At most the first write of a burst commits on the loop before the others
        # queue behind it: never one flush per unit of 20 runs (100 durable units).
        assert sum(1 for on_loop, _ in durable if on_loop) <= 3, durable
        assert len(durable) <= 30, durable

    async def test_another_writer_does_not_block_the_loop(self, tmp_path: Path) -> None:
        path = tmp_path / "l.db"
        # A loop stuck in an inline attempt would wait out this busy timeout and
        # only then notice the fail_after below: slow, but failing.
        adapter = LocalWorkflowStateAdapter(str(path), workspace_id="inline",
                                            busy_timeout_ms=60_000)
        await adapter.open()
        other = sqlite3.connect(path, isolation_level=None)
        try:
            rid = str(uuid.uuid4())
            ctx = WorkflowContext(run_id=rid, workflow="w", version=1, workspace_id="inline",
                                  env="prod")
            await adapter.on_run_start(rid, ctx, StartOptions(), now=T0)
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            done = anyio.Event()

            async def node_start() -> None:
                async with adapter.unit(guard=Guard(run_id=rid), durable=False) as unit:
                    await adapter.on_node_start(rid, "step:a#1", {"args": []}, now=T0)
                assert unit.held
                done.set()

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(node_start)
                    # Returns only if the loop is free: an inline attempt waiting for the
                    # lock would hold it for the whole busy timeout.
                    await anyio.wait_all_tasks_blocked()
                    assert not done.is_set()
                    other.execute("COMMIT")
            assert done.is_set()
            assert [e.event_type for e in await adapter.list_events(rid)][-1] == "node_start"
        finally:
            other.close()
            await adapter.close()


@asynccontextmanager
async def _finished_run(path: Path) -> AsyncIterator[tuple[LocalWorkflowStateAdapter, str]]:
    """An open SQLite adapter holding one finished three-step run, and its run id."""
    adapter = LocalWorkflowStateAdapter(str(path), workspace_id="reads")
    async with Starflow(adapter, maintenance=False) as sf:
        handle = await sf.run(three_steps, 1)
        assert handle.status == "success"
        yield adapter, handle.run_id


class TestInlineLookups:
    """Point reads (a run row, a signal, a definition) skip the database thread when
    the connection is free; journals and listings always use it."""

    async def test_point_reads_on_the_loop(self, tmp_path: Path) -> None:
        async with _finished_run(tmp_path / "r.db") as (adapter, run_id):
            hops: list[str] = []
            original = adapter._call

            async def call(fn: Any) -> Any:
                hops.append(getattr(fn, "__qualname__", "?"))
                return await original(fn)

            adapter._call = call  # type: ignore[method-assign]
            run = await adapter.get_run(run_id)
            assert run is not None and run.status == "success"
            assert await adapter.find_signal(run_id, "nothing") is None
            assert hops == []
            assert len(await adapter.list_events(run_id)) == 6  # 3 x start, complete
            assert len(hops) == 1  # the journal: unbounded, so on the database thread

    async def test_a_read_still_yields(self, tmp_path: Path) -> None:
        """A caller polling a row in a loop lets the other tasks run."""
        async with _finished_run(tmp_path / "y.db") as (adapter, run_id):
            ran: list[bool] = []

            async def other() -> None:
                ran.append(True)

            reads = 0
            async with anyio.create_task_group() as tg:
                tg.start_soon(other)
                while not ran and reads < 100:
                    await adapter.get_run(run_id)
                    reads += 1
            assert reads < 100, "reads never let the other task run"

    async def test_busy_connection_falls_back_without_blocking(self, tmp_path: Path) -> None:
        async with _finished_run(tmp_path / "b.db") as (adapter, run_id):
            got: list[Any] = []

            async def read() -> None:
                got.append(await adapter.get_run(run_id))

            adapter._lock.acquire()  # as if the database thread were using the connection
            released = False
            try:
                with anyio.fail_after(30):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(read)
                        await anyio.wait_all_tasks_blocked()  # the loop is free meanwhile
                        assert got == []
                        adapter._lock.release()
                        released = True
            finally:
                if not released:
                    adapter._lock.release()
            assert got[0] is not None and got[0].status == "success"


async def _events(path: Path, run_id: str) -> list[Any]:
    async with LocalWorkflowStateAdapter(str(path), workspace_id="group") as adapter:
        return await adapter.list_events(run_id)


def _count_lines(fn: Any) -> Any:
    """Run ``fn()`` (a coroutine function) counting lines executed in starflow's package."""
    counter = [0]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            counter[0] += 1
        return local

    def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename.startswith(STARFLOW_DIR):
            return local
        return None

    async def run() -> Any:
        sys.settrace(global_trace)
        threading.settrace(global_trace)
        try:
            return await fn()
        finally:
            sys.settrace(None)
            threading.settrace(None)

    return run, counter


@pytest.mark.slow  # times resumes of growing histories
class TestResumeScaling:
    """Resuming a run with 10,000 recorded steps costs ten times one with 1,000, not 100."""

    @pytest.fixture
    async def app(self) -> AsyncIterator[tuple[Starflow, _CountingAdapter]]:
        counting = _CountingAdapter(LocalWorkflowStateAdapter(":memory:", workspace_id="scale"))
        async with Starflow(counting, maintenance=False) as sf:
            yield sf, counting

    async def _resume_cost(self, sf: Starflow, counting: _CountingAdapter, n: int) -> int:
        handle = await sf.run(long_run, n)
        assert handle.status == "paused"
        counting.list_events_calls = 0
        run, counter = _count_lines(lambda: sf.signal(handle.run_id, "go"))
        resumed = await run()
        assert resumed.status == "success" and resumed.result == n
        assert counting.list_events_calls == 1  # the whole journal in one query
        return int(counter[0])

    async def test_linear(self, app: tuple[Starflow, _CountingAdapter]) -> None:
        sf, counting = app
        small = await self._resume_cost(sf, counting, 1_000)
        large = await self._resume_cost(sf, counting, 10_000)
        # O(steps): ~10x; O(steps^2) would be ~100x.
        assert large / small < 13, (small, large)


@pytest.mark.postgres
class TestPostgresRoundTrips:
    """Each engine unit is one statement; node_start's turns synchronous_commit off locally."""

    @pytest.fixture
    async def pg(self, workspace_id: str) -> AsyncIterator[Any]:
        require_postgres()
        from starflow.adapters.postgres import PostgresWorkflowStateAdapter

        adapter = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=workspace_id,
                                               min_size=1, max_size=1)
        await adapter.open()
        try:
            yield adapter
        finally:
            await adapter.close()

    async def test_one_statement_per_unit(self, pg: Any, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
        import asyncpg

        sent: list[str] = []
        for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
            original = getattr(asyncpg.Connection, name)

            def spy(self: Any, query: str, *args: Any, _original: Any = original,
                    **kwargs: Any) -> Any:
                sent.append(query)
                return _original(self, query, *args, **kwargs)

            monkeypatch.setattr(asyncpg.Connection, name, spy)
        for fused in (False, True):
            config = StarflowConfig(fused_boundaries=fused)
            async with Starflow(pg, maintenance=False, config=config) as sf:
                await sf.run(three_steps, 0)
                sent.clear()
                handle = await sf.run(three_steps, 1)
                n = len(sent)
                events = [(e.event_type, e.node_id) for e in await sf.events(handle.run_id)]
            del sent[n:]
            assert handle.status == "success"
            # The seed's events in the seed's order, however they were committed.
            assert events == [(t, f"step:add_one#{i}") for i in (1, 2, 3)
                              for t in ("node_start", "node_complete")]
            off = [q for q in sent if "set_config('synchronous_commit', 'off', true)" in q]
            if fused:
                # the start (its own statement: fuses_run_start is False here), the
                # first node_start, each node_complete with the next node_start (its
                # two events one multi-row insert) or with the end
                assert len(sent) == 5, sent
                assert len(off) == 1  # the first node_start, and only it
                assert sum("ORDER BY o" in q for q in sent) == 2
            else:
                # start, 3 x (node_start, node_complete), end
                assert len(sent) == 8, sent
                assert len(off) == 3  # the three node_start units, and only they
            assert not any(q.strip().upper() in ("BEGIN", "COMMIT") for q in sent)

    async def test_local_setting_does_not_leak(self, pg: Any) -> None:
        async with pg._pool.acquire() as conn:
            inside = await conn.fetchval(
                "WITH c AS (SELECT set_config('synchronous_commit', 'off', true) AS v) "
                "SELECT current_setting('synchronous_commit') FROM c")
            after = await conn.fetchval("SHOW synchronous_commit")
        assert (inside, after) == ("off", "on")

    async def test_prepared_statements_reused(self, pg: Any) -> None:
        async with Starflow(pg, maintenance=False) as sf:
            for i in range(3):
                await sf.run(three_steps, i)
            async with pg._pool.acquire() as conn:
                before = await conn.fetchval("SELECT count(*) FROM pg_prepared_statements")
            for i in range(20):
                await sf.run(three_steps, i)
            async with pg._pool.acquire() as conn:
                after = await conn.fetchval("SELECT count(*) FROM pg_prepared_statements")
        assert after == before  # asyncpg's statement cache: no statement prepared twice

    async def test_guard_fails_in_one_statement(self, pg: Any) -> None:
        rid = str(uuid.uuid4())
        ctx = WorkflowContext(run_id=rid, workflow="w", version=1,
                              workspace_id=pg.workspace_id, env=pg.env)
        async with pg.unit() as unit:
            await pg.on_run_start(rid, ctx, StartOptions(), now=T0)
            await pg.write_lease(rid, "runner-a", T0 + timedelta(seconds=30), now=T0)
        for durable in (True, False):
            async with pg.unit(guard=Guard(run_id=rid, leased_by="runner-b",
                                           status_in=("running",)), durable=durable) as unit:
                await pg.on_node_start(rid, "step:x#1", None, now=T0)
            assert unit.held is False
        assert [e.event_type for e in await pg.list_events(rid)] == []
        run = await pg.get_run(rid)
        assert run is not None and run.leased_by == "runner-a" and run.claim_state == "running"


class TestSqlitePlans:
    """Claim and sweep search the partial indexes, not every run of the workspace."""

    async def test_claim_and_sweep_use_partial_indexes(self, tmp_path: Path) -> None:
        adapter = LocalWorkflowStateAdapter(str(tmp_path / "p.db"), workspace_id="plans")
        async with adapter:
            statements = await _traced(adapter)
            await adapter.claim_runs("me", pool=None, now=T0, lease_until=T0, limit=5)
            await adapter.expire_old_leases(T0)
            await adapter._call(lambda conn: conn.set_trace_callback(None))
            updates = [s for s in statements if s.lstrip().upper().startswith("UPDATE")]
            assert len(updates) == 2, statements
            plans = []
            for sql in updates:
                def explain(conn: sqlite3.Connection, sql: str = sql) -> list[Any]:
                    return conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()

                rows = await adapter._call(explain)
                plans.append(" ".join(str(r[3]) for r in rows))
        claim, sweep = plans
        # A partial index of queued runs: the seed's, or 027's that also yields the
        # claim's priority order (tests/test_flow_control.py).
        assert ("idx_workflow_runs_claim_pool" in claim
                or "idx_workflow_runs_claim_priority" in claim), claim
        assert "idx_workflow_runs_lease_until" in sweep, sweep
        assert "idx_workflow_runs_workspace_started" not in claim + sweep
