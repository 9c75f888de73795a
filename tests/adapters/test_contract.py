"""The adapter contract: one suite, run against every durable adapter.

The ``adapter`` fixture (tests/conftest.py) yields an open adapter of each kind
(in-memory SQLite, SQLite file, PostgreSQL) scoped to a fresh workspace, so
tests on the shared PostgreSQL database never see each other's rows. Every
check reads the state back through the adapter after the write.

Here the matrix has two more kinds, ``pgbouncer`` and ``pgbouncer-rls``:
PostgreSQL through a PgBouncer in ``pool_mode = transaction``
(``?pooler=transaction``), where each transaction may land on another server
connection, as the owner and as a non-owner role under Row Level Security.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.sweep import lost_payload, swept_columns
from starflow.adapters.units import (
    Command,
    Guard,
    InsertEvent,
    InsertOutbox,
    InsertRun,
    Op,
    Unit,
    UpdateRun,
)
from starflow.errors import SerializationError, StorageError
from starflow.records import JobSpec, RunInfo, StartOptions, SweepResult
from starflow.workflow.context import WorkflowContext
from starflow_testing import FaultInjectingAdapter
from tests.conftest import adapter_url

R = TypeVar("R")
T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", "postgres", "pgbouncer", "pgbouncer-rls"])
def adapter_kind(request: pytest.FixtureRequest) -> str:
    """Every durable adapter kind, and PostgreSQL behind a transaction pooler: as the
    tables' owner, and as a role Row Level Security applies to (tenant settings
    set per transaction)."""
    return str(request.param)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ctx_for(run_id: str, **variables: Any) -> WorkflowContext:
    return WorkflowContext(run_id=run_id, workflow="orders", version=2, variables=variables)


async def start(adapter: WorkflowStateAdapter, *, now: datetime = T0, **options: Any) -> str:
    run_id = str(uuid.uuid4())
    await adapter.on_run_start(run_id, ctx_for(run_id), StartOptions(**options), now=now)
    return run_id


async def queued(adapter: WorkflowStateAdapter, *, now: datetime = T0,
                 pool: str | None = None, **options: Any) -> str:
    return await start(adapter, now=now, status="queued", claim_state="queued",
                       runner_pool=pool, start_mode="queued", **options)


async def event_types(adapter: WorkflowStateAdapter, run_id: str) -> list[str]:
    return [e.event_type for e in await adapter.list_events(run_id)]


class TestRunBoundaries:
    """Each of the state model's write boundaries writes what its table row says."""

    async def test_on_run_start_inserts_a_running_row(self, adapter: WorkflowStateAdapter
                                                      ) -> None:
        run_id = await start(adapter, input={"order": 7, "items": ["a", "b"]},
                             max_claim_attempts=5)
        run = await adapter.get_run(run_id)
        assert run is not None
        assert run.id == run_id and run.run_id == run_id
        assert (run.template_id, run.workspace_id, run.env) == (
            "orders", adapter.workspace_id, adapter.env)
        assert (run.status, run.claim_state, run.start_mode) == ("running", "running", "inline")
        assert run.started_at == T0 and run.started_at.tzinfo is not None
        assert run.started_at.utcoffset() == timedelta(0)
        assert run.input_json == {"order": 7, "items": ["a", "b"]}
        assert (run.max_claim_attempts, run.workflow_version, run.claim_attempts) == (5, 2, 0)
        assert run.completed_at is None and run.duration_ms is None
        assert run.checkpoint_json is None and run.error is None and run.result_json is None
        assert run.leased_by is None and run.lease_until is None and run.last_heartbeat is None
        assert run.definition_id is None and run.runner_pool is None
        assert await adapter.list_events(run_id) == []

    async def test_on_run_start_queued_for_a_pool(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await queued(adapter, pool="gpu")
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.claim_state, run.runner_pool, run.start_mode) == (
            "queued", "queued", "gpu", "queued")

    async def test_write_refresh_and_clear_lease(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        await adapter.update_run(run_id, "test", claim_state="claimed")
        await adapter.write_lease(run_id, "runner-1", at(30), now=at(0))
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.claim_state, run.leased_by, run.lease_until, run.last_heartbeat) == (
            "running", "runner-1", at(30), at(0))

        await adapter.refresh_lease(run_id, at(40), now=at(10))
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.leased_by, run.lease_until, run.last_heartbeat) == ("runner-1", at(40), at(10))

        await adapter.clear_lease(run_id)
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.leased_by, run.lease_until, run.last_heartbeat) == (None, None, at(10))
        assert run.status == "running"

    async def test_node_events_in_order(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        await adapter.on_node_start(run_id, "step:charge#1", {"amount": 5}, now=at(1))
        await adapter.on_node_complete(run_id, "step:charge#1", {"receipt": "r-1"}, now=at(2))
        await adapter.on_node_start(run_id, "step:ship#1", None, now=at(3))
        await adapter.on_node_error(run_id, "step:ship#1",
                                    {"type": "ValueError", "message": "no"}, now=at(4))
        events = await adapter.list_events(run_id)
        assert [(e.event_type, e.node_id, e.payload_json, e.created_at) for e in events] == [
            ("node_start", "step:charge#1", {"amount": 5}, at(1)),
            ("node_complete", "step:charge#1", {"receipt": "r-1"}, at(2)),
            ("node_start", "step:ship#1", None, at(3)),
            ("node_error", "step:ship#1", {"type": "ValueError", "message": "no"}, at(4)),
        ]
        assert all(e.run_id == run_id for e in events)
        ids = [e.id for e in events]
        assert ids == sorted(ids) and len(set(ids)) == 4
        assert events[0].payload == {"amount": 5}
        later = await adapter.list_events(run_id, after_id=ids[1])
        assert [e.id for e in later] == ids[2:]

    async def test_checkpoint_pause_and_resume(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        ctx = ctx_for(run_id, phase="waiting", cart=[1, 2])
        await adapter.on_run_paused(run_id, ctx, now=at(5), payload={"wake_token": "tok"})
        await adapter.save_checkpoint(run_id, ctx)
        run = await adapter.get_run(run_id)
        assert run is not None
        assert run.status == "paused"
        assert run.checkpoint_json == ctx.snapshot()

        await adapter.on_run_resumed(run_id, now=at(9), payload={"signal": "approved"})
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.checkpoint_json) == ("running", None)
        events = await adapter.list_events(run_id)
        assert [(e.event_type, e.node_id, e.payload_json, e.created_at) for e in events] == [
            ("run_paused", None, {"wake_token": "tok"}, at(5)),
            ("run_resumed", None, {"signal": "approved"}, at(9)),
        ]

    async def test_on_run_complete(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        ctx = ctx_for(run_id)
        await adapter.save_checkpoint(run_id, ctx)
        await adapter.on_run_complete(run_id, ctx, 1500, now=at(2), result={"total": 12.5})
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.claim_state, run.completed_at, run.duration_ms) == (
            "success", "complete", at(2), 1500)
        assert run.checkpoint_json is None and run.result_json == {"total": 12.5}
        assert run.is_terminal

    @pytest.mark.parametrize(("status", "claim_state"), [("error", "failed"),
                                                         ("cancelled", "failed")])
    async def test_on_run_error(self, adapter: WorkflowStateAdapter, status: str,
                                claim_state: str) -> None:
        run_id = await start(adapter)
        await adapter.save_checkpoint(run_id, ctx_for(run_id))
        await adapter.on_run_error(run_id, "boom", now=at(3), duration_ms=3000, status=status,
                                   claim_state=claim_state)
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.claim_state, run.error, run.completed_at, run.duration_ms) == (
            status, claim_state, "boom", at(3), 3000)
        assert run.checkpoint_json is None

    async def test_record_phase_if_changed(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        ctx = ctx_for(run_id, phase="charging")
        assert await adapter.record_phase_if_changed(run_id, ctx, {"previous": "charging"},
                                                     now=at(1)) is False
        assert await adapter.record_phase_if_changed(run_id, ctx, {"previous": None},
                                                     now=at(2)) is True
        events = await adapter.list_events(run_id)
        assert [(e.event_type, e.payload_json, e.created_at) for e in events] == [
            ("phase", {"phase": "charging", "previous": None}, at(2))]

    async def test_update_run_and_record_event(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        await adapter.update_run(run_id, "cancel", status="cancelled", error="by user")
        await adapter.record_event(run_id, "run_cancelled", None, {"by": "ops"}, now=at(1))
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.error) == ("cancelled", "by user")
        assert await event_types(adapter, run_id) == ["run_cancelled"]
        with pytest.raises(ValueError, match="not updatable"):
            await adapter.update_run(run_id, "bad", workspace_id="other")

    async def test_reads_of_unknown_runs(self, adapter: WorkflowStateAdapter) -> None:
        unknown = str(uuid.uuid4())
        assert await adapter.get_run(unknown) is None
        assert await adapter.list_events(unknown) == []
        assert await adapter.list_waits(unknown) == []
        assert await adapter.find_signal(unknown, "go") is None
        # Writes naming a run that does not exist change nothing.
        await adapter.record_event(unknown, "phase", None, None, now=T0)
        await adapter.update_run(unknown, "test", status="error")
        assert await adapter.get_run(unknown) is None
        assert await adapter.list_events(unknown) == []

    async def test_list_runs(self, adapter: WorkflowStateAdapter) -> None:
        a = await start(adapter, now=at(1))
        b = await start(adapter, now=at(2))
        c = await queued(adapter, now=at(3))
        other = str(uuid.uuid4())
        await adapter.on_run_start(other, WorkflowContext(run_id=other, workflow="billing"),
                                   now=at(4))
        assert [r.id for r in await adapter.list_runs()] == [other, c, b, a]
        assert [r.id for r in await adapter.list_runs(status="queued")] == [c]
        assert [r.id for r in await adapter.list_runs(template_id="billing")] == [other]
        assert [r.id for r in await adapter.list_runs(since=at(2))] == [other, c, b]
        assert [r.id for r in await adapter.list_runs(limit=2)] == [other, c]
        assert [r.id for r in await adapter.list_runs(status="queued",
                                                      template_id="orders")] == [c]

    async def test_list_queued_runs(self, adapter: WorkflowStateAdapter) -> None:
        """The newest queued runs, each with its newest event's time, in one read:
        the same answer as ``list_runs`` and ``list_events`` run by run."""
        quiet = await queued(adapter, now=at(1))
        busy = await queued(adapter, now=at(2), pool="gpu")
        await adapter.record_event(busy, "phase", None, "a", now=at(9))
        await adapter.record_event(busy, "phase", None, "b", now=at(7))  # newest by order
        newest = await queued(adapter, now=at(3))
        await adapter.record_event(newest, "phase", None, None, now=at(4))
        running = await start(adapter, now=at(5))
        await adapter.record_event(running, "phase", None, None, now=at(6))

        got = await adapter.list_queued_runs(10)
        assert [(q.run.id, q.last_event_at) for q in got] == [
            (newest, at(4)), (busy, at(7)), (quiet, None)]
        expected = await adapter.list_runs(status="queued", limit=10)
        assert [q.run for q in got] == expected
        for q in got:
            events = await adapter.list_events(q.run.id)
            assert q.last_event_at == (events[-1].created_at if events else None)
        assert [q.run.id for q in await adapter.list_queued_runs(2)] == [newest, busy]

    async def test_child_runs_and_deadlines(self, adapter: WorkflowStateAdapter) -> None:
        """Migration 033: a child names its parent (detached or not); list_runs finds a
        run's children; deadline_at round-trips (child runs and deadlines, #17)."""
        parent = await start(adapter, now=at(1), deadline_at=at(3601))
        kid = await queued(adapter, now=at(2), parent_run_id=parent)
        loose = await queued(adapter, now=at(3), parent_run_id=parent, detached=True)
        stranger = await start(adapter, now=at(4))
        got = await adapter.list_runs(parent_run_id=parent)
        assert [(r.id, r.parent_run_id, r.detached) for r in got] == [
            (loose, parent, True), (kid, parent, False)]
        assert [r.id for r in await adapter.list_runs(parent_run_id=parent,
                                                      status="queued", limit=1)] == [loose]
        assert await adapter.list_runs(parent_run_id=stranger) == []
        assert await adapter.list_runs(parent_run_id=str(uuid.uuid4())) == []
        info = await adapter.get_run(parent)
        assert info is not None
        assert (info.parent_run_id, info.detached, info.deadline_at) == (None, False, at(3601))
        row = await adapter.get_run(kid)
        assert row is not None and row.deadline_at is None


@pytest.fixture
async def other_db(adapter_kind: str, tmp_path: Path, workspace_id: str
                   ) -> AsyncIterator[WorkflowStateAdapter]:
    """A second adapter of the same kind on another database (PostgreSQL: another
    workspace of the shared test database, which is what scopes its rows)."""
    if adapter_kind == "memory":
        url = "memory://"
    elif adapter_kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'other.db'}"
    else:
        url = adapter_url(adapter_kind, tmp_path)
    other = adapter_from_url(url, workspace_id=f"{workspace_id}-other")
    await other.open()
    try:
        yield other
    finally:
        await other.close()


class TestUnits:
    """A unit commits all of its ops or none, and only if its guard holds."""

    async def test_a_unit_with_a_failing_op_writes_nothing(self, adapter: WorkflowStateAdapter
                                                           ) -> None:
        run_id = await start(adapter)
        unit = Unit(ops=[
            InsertEvent(method="on_node_complete", run_id=run_id, event_type="node_complete",
                        node_id="step:a#1", payload={"ok": 1}, created_at=at(1)),
            UpdateRun(method="on_run_paused", run_id=run_id, values={"status": "paused"}),
            InsertRun(method="on_run_start", run_id=run_id, values={"status": "running"}),
        ])
        with pytest.raises(StorageError):
            await adapter.execute(unit)
        run = await adapter.get_run(run_id)
        assert run is not None and run.status == "running"
        assert await adapter.list_events(run_id) == []

    async def test_an_unencodable_value_writes_nothing(self, adapter: WorkflowStateAdapter
                                                       ) -> None:
        run_id = await start(adapter)
        with pytest.raises(SerializationError):
            async with adapter.unit():
                await adapter.on_node_start(run_id, "step:a#1", {"ok": 1}, now=at(1))
                await adapter.on_node_complete(run_id, "step:a#1", object(), now=at(2))
        assert await adapter.list_events(run_id) == []

    async def test_a_block_that_raises_writes_nothing(self, adapter: WorkflowStateAdapter
                                                      ) -> None:
        run_id = await start(adapter)
        with pytest.raises(RuntimeError):
            async with adapter.unit():
                await adapter.on_node_start(run_id, "step:a#1", None, now=at(1))
                raise RuntimeError("user code failed")
        assert await adapter.list_events(run_id) == []

    async def test_units_do_not_nest_and_leave_no_scope_behind(
            self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        with pytest.raises(RuntimeError, match="do not nest"):
            async with adapter.unit(), adapter.unit():
                pass
        # Neither the failed inner nor the outer unit is still collecting: this
        # write is its own unit again and lands at once.
        await adapter.on_node_start(run_id, "step:a#1", None, now=at(1))
        assert [e.event_type for e in await adapter.list_events(run_id)] == ["node_start"]

    async def test_a_unit_collects_only_its_own_adapters_writes(
            self, adapter: WorkflowStateAdapter, other_db: WorkflowStateAdapter) -> None:
        """Adapter B's boundary call inside ``A.unit()`` is B's own write, to B's database."""
        mine = await start(adapter)
        theirs = await start(other_db)
        async with adapter.unit() as unit:
            await adapter.on_node_start(mine, "step:a#1", None, now=at(1))
            await other_db.on_node_start(theirs, "step:b#1", None, now=at(1))
            # B's write is not held back for A's unit: it is written at once.
            assert await event_types(other_db, theirs) == ["node_start"]
            assert await event_types(adapter, mine) == []
        assert unit.held is True and unit.methods == ["on_node_start"]
        assert await event_types(adapter, mine) == ["node_start"]
        assert await event_types(other_db, theirs) == ["node_start"]
        # Nothing of B's run reached A's database, nor of A's run B's.
        assert await adapter.get_run(theirs) is None
        assert await other_db.get_run(mine) is None

    async def test_guard_holds(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        await adapter.write_lease(run_id, "me", at(30), now=T0)
        await adapter.emit_wait_wake(run_id, "wait:approval#1", "approval", None, now=T0)
        guard = Guard(run_id=run_id, leased_by="me", status_in=("running",),
                      wait_node="wait:approval#1")
        async with adapter.unit(guard=guard) as u:
            await adapter.on_node_complete(run_id, "step:a#1", 1, now=at(1))
            await adapter.update_run(run_id, "test", error="noted")
        assert u.held is True
        run = await adapter.get_run(run_id)
        assert run is not None and run.error == "noted"
        assert await event_types(adapter, run_id) == ["node_complete"]

    @pytest.mark.parametrize("failing", ["leased_by", "status_in", "wait_node", "run_id",
                                         "other_workspace"])
    async def test_failing_guard_writes_nothing(self, adapter: WorkflowStateAdapter,
                                                db_url: str, adapter_kind: str,
                                                failing: str) -> None:
        run_id = await start(adapter)
        await adapter.write_lease(run_id, "me", at(30), now=T0)
        await adapter.emit_wait_wake(run_id, "wait:approval#1", "approval", None, now=T0)
        target: WorkflowStateAdapter = adapter
        guard = Guard(run_id=run_id, leased_by="me", status_in=("running",),
                      wait_node="wait:approval#1")
        if failing == "leased_by":
            guard = Guard(run_id=run_id, leased_by="someone-else")
        elif failing == "status_in":
            guard = Guard(run_id=run_id, status_in=("paused",))
        elif failing == "wait_node":
            guard = Guard(run_id=run_id, wait_node="wait:other#1")
        elif failing == "run_id":
            guard = Guard(run_id=str(uuid.uuid4()))
        else:
            if adapter_kind == "memory":
                pytest.skip("a private in-memory database has no second workspace to ask from")
            target = adapter_from_url(db_url, workspace_id=f"{adapter.workspace_id}-b")
            await target.open()
        try:
            unit = Unit(guard=guard, ops=[
                InsertEvent(method="on_node_complete", run_id=run_id, event_type="node_complete",
                            node_id="step:a#1", payload=1, created_at=at(1)),
                UpdateRun(method="clear_lease", run_id=run_id,
                          values={"leased_by": None, "lease_until": None}),
            ])
            assert await target.execute(unit) is False
        finally:
            if target is not adapter:
                await target.close()
        run = await adapter.get_run(run_id)
        assert run is not None and run.leased_by == "me" and run.lease_until == at(30)
        assert await adapter.list_events(run_id) == []

    async def test_guard_only_unit(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        async with adapter.unit(guard=Guard(run_id=run_id, status_in=("running",))) as u:
            pass
        assert u.held is True
        async with adapter.unit(guard=Guard(run_id=run_id, status_in=("paused",))) as u:
            pass
        assert u.held is False

    async def test_two_wakes_racing_exactly_one_wins(self, adapter: WorkflowStateAdapter
                                                     ) -> None:
        run_id = await start(adapter)
        await adapter.emit_wait_wake(run_id, "wait:approval#1", "approval", None, now=T0)
        wins: list[bool] = []

        async def wake(n: int) -> None:
            async with adapter.unit(guard=Guard(run_id=run_id,
                                                wait_node="wait:approval#1")) as u:
                await adapter.clear_waits(run_id)
                await adapter.on_run_resumed(run_id, now=at(n), payload={"by": n})
            wins.append(bool(u.held))

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(wake, n)
        assert sorted(wins) == [False] * 7 + [True]
        assert await event_types(adapter, run_id) == ["run_resumed"]

    async def test_no_signal_guard_keeps_exactly_one_of_racing_enqueues(
            self, adapter: WorkflowStateAdapter) -> None:
        """Guard(no_signal=event): of racing units each queuing that event, one holds."""
        run_id = await start(adapter)
        async with adapter.unit(guard=Guard(run_id=run_id, no_signal="other")) as u:
            await adapter.enqueue_signal(run_id, "approval", {"n": -1}, now=T0)
        assert u.held is True  # a signal for another event does not count
        wins: list[bool] = []

        async def enqueue(n: int) -> None:
            async with adapter.unit(guard=Guard(run_id=run_id, status_in=("running",),
                                                no_signal="other")) as u:
                await adapter.enqueue_signal(run_id, "other", {"n": n}, now=at(n))
            wins.append(bool(u.held))

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(enqueue, n)
        assert sorted(wins) == [False] * 7 + [True]
        first = await adapter.find_signal(run_id, "other")
        assert first is not None
        await adapter.consume_signal(first.id)
        assert await adapter.find_signal(run_id, "other") is None


class TestClaim:
    """claim_runs: pool affinity, the claim's writes, exactly-once under concurrency."""

    async def test_claim_writes_the_lease_in_one_step(self, adapter: WorkflowStateAdapter
                                                      ) -> None:
        run_id = await queued(adapter)
        claimed = await adapter.claim_runs("w-1", pool=None, now=at(1), lease_until=at(31))
        assert [r.id for r in claimed] == [run_id]
        for run in (claimed[0], await adapter.get_run(run_id)):
            assert run is not None
            assert (run.status, run.claim_state, run.claim_attempts) == ("running", "claimed", 1)
            assert (run.leased_by, run.lease_until, run.last_heartbeat) == (
                "w-1", at(31), at(1))
        assert await adapter.claim_runs("w-2", pool=None, now=at(2), lease_until=at(32)) == []

    async def test_pool_affinity(self, adapter: WorkflowStateAdapter) -> None:
        anyone = await queued(adapter, now=at(1))
        gpu = await queued(adapter, now=at(2), pool="gpu")
        cpu = await queued(adapter, now=at(3), pool="cpu")
        claimed = await adapter.claim_runs("w", pool="gpu", now=at(9), lease_until=at(39),
                                           limit=10)
        assert [r.id for r in claimed] == [anyone, gpu]
        assert await adapter.claim_runs("w", pool=None, now=at(9), lease_until=at(39),
                                        limit=10) == []
        claimed = await adapter.claim_runs("w", pool="cpu", now=at(9), lease_until=at(39),
                                           limit=10)
        assert [r.id for r in claimed] == [cpu]

    async def test_unpooled_worker_claims_only_unpooled_runs(
            self, adapter: WorkflowStateAdapter) -> None:
        await queued(adapter, pool="gpu")
        anyone = await queued(adapter)
        claimed = await adapter.claim_runs("w", pool=None, now=at(9), lease_until=at(39),
                                           limit=10)
        assert [r.id for r in claimed] == [anyone]

    async def test_oldest_first_with_limit_and_only_queued(self, adapter: WorkflowStateAdapter
                                                           ) -> None:
        await start(adapter, now=at(0))  # running inline: never claimable
        later = await queued(adapter, now=at(5))
        first = await queued(adapter, now=at(1))
        middle = await queued(adapter, now=at(3))
        got = await adapter.claim_runs("w", pool=None, now=at(9), lease_until=at(39), limit=2)
        assert [r.id for r in got] == [first, middle]
        got = await adapter.claim_runs("w", pool=None, now=at(9), lease_until=at(39), limit=2)
        assert [r.id for r in got] == [later]

    async def test_each_run_claimed_exactly_once_under_concurrency(
            self, adapter: WorkflowStateAdapter) -> None:
        runs = {await queued(adapter, now=at(i)) for i in range(30)}
        claims: list[tuple[str, str]] = []

        async def claimer(n: int) -> None:
            while True:
                got = await adapter.claim_runs(f"w-{n}", pool=None, now=at(60),
                                               lease_until=at(90), limit=1 + n % 3)
                if not got:
                    return
                claims.extend((r.id, f"w-{n}") for r in got)

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(claimer, n)
        assert sorted(r for r, _ in claims) == sorted(runs)
        for run_id, worker in claims:
            run = await adapter.get_run(run_id)
            assert run is not None
            assert (run.claim_attempts, run.leased_by) == (1, worker)


class TestAfterHooks:
    """Extra ops of a claim or a sweep commit in the same transaction, or not at all."""

    @staticmethod
    def outbox(run_id: str) -> InsertOutbox:
        return InsertOutbox(method="test", run_id=run_id, kind="run",
                            payload={"run_id": run_id}, created_at=at(1))

    async def test_claim_after_ops_commit_with_the_claim(self, adapter: WorkflowStateAdapter
                                                         ) -> None:
        run_id = await queued(adapter)
        got = await adapter.claim_runs("w", pool=None, now=at(1), lease_until=at(31),
                                       after=lambda runs: [self.outbox(r.id) for r in runs])
        assert [r.id for r in got] == [run_id]
        assert [row.run_id for row in await adapter.pending_outbox()] == [run_id]

    async def test_failing_after_rolls_the_claim_back(self, adapter: WorkflowStateAdapter
                                                      ) -> None:
        run_id = await queued(adapter)

        def boom(runs: list[RunInfo]) -> list[Op]:
            raise RuntimeError("after failed")

        with pytest.raises(RuntimeError, match="after failed"):
            await adapter.claim_runs("w", pool=None, now=at(1), lease_until=at(31), after=boom)
        run = await adapter.get_run(run_id)
        assert run is not None and (run.claim_state, run.claim_attempts) == ("queued", 0)
        assert await adapter.pending_outbox() == []

    async def test_failing_after_rolls_the_sweep_back(self, adapter: WorkflowStateAdapter
                                                      ) -> None:
        run_id = await queued(adapter)
        await adapter.claim_runs("w", pool=None, now=at(1), lease_until=at(31))

        def boom(results: list[SweepResult]) -> list[Op]:
            raise RuntimeError("after failed")

        with pytest.raises(RuntimeError, match="after failed"):
            await adapter.expire_old_leases(at(40), after=boom)
        run = await adapter.get_run(run_id)
        assert run is not None and run.leased_by == "w" and run.status == "running"
        assert [e.event_type for e in await adapter.list_events(run_id)] == []
        swept = await adapter.expire_old_leases(
            at(40), after=lambda results: [self.outbox(r.run_id) for r in results])
        assert [r.run_id for r in swept] == [run_id]
        assert [row.run_id for row in await adapter.pending_outbox()] == [run_id]


class _SeamRecorder(DelegatingAdapter):
    """Sees writes only where every wrapper sees them: ``execute`` and ``perform``."""

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.writes: list[str] = []

    async def execute(self, unit: Unit) -> bool:
        self.writes.extend(unit.methods)
        return await self.inner.execute(unit)

    async def perform(self, command: Command[R]) -> R:
        self.writes.append(command.method)
        return await self.inner.perform(command)


class TestEveryWriteThroughTheSeam:
    """Claims, sweeps, job claims, outbox drains, definitions, secrets and session GC
    reach a wrapper through ``perform`` (units through ``execute``): nothing bypasses."""

    async def test_a_wrapper_sees_every_read_modify_write(self, adapter: WorkflowStateAdapter
                                                          ) -> None:
        seen = _SeamRecorder(adapter)
        run_id = await queued(seen)
        await seen.claim_runs("w", pool=None, now=at(1), lease_until=at(31))
        await seen.expire_old_leases(at(40))
        await seen.ensure_definition("orders", 1, "h", now=T0)
        await seen.get_secret("k", now=T0)
        await seen.expire_session_vars(T0)
        job = JobSpec(id=str(uuid.uuid4()), run_id=run_id, node_id="step:a#1", pool="p",
                      step_name="a", idempotency_key=f"{run_id}:step:a#1", input=None)
        await seen.insert_job(job, now=T0)
        [claimed] = await seen.claim_jobs("jw", pool="p", now=T0, lease_until=at(30))
        assert await seen.heartbeat_job(claimed.id, "jw", now=at(1), lease_until=at(31))
        await seen.execute(Unit(ops=[InsertOutbox(method="test", run_id=run_id, kind="run",
                                                  payload={}, created_at=T0)]))
        [row] = await seen.pending_outbox()
        assert await seen.mark_outbox_applied([row.id], now=at(1)) == 1
        assert await seen.prune_outbox(at(2)) == 1
        assert seen.writes == [
            "on_run_start", "claim_runs", "expire_old_leases", "ensure_definition",
            "get_secret", "expire_session_vars", "insert_job", "claim_jobs", "heartbeat_job",
            "test", "mark_outbox_applied", "prune_outbox"]

    async def test_a_fault_at_the_seam_fails_a_claim_and_writes_nothing(
            self, adapter: WorkflowStateAdapter) -> None:
        run_id = await queued(adapter)
        faults = FaultInjectingAdapter(adapter, fail={"claim_runs": 1})
        with pytest.raises(StorageError, match="injected fault"):
            await faults.claim_runs("w", pool=None, now=at(1), lease_until=at(31))
        assert faults.failures == ["claim_runs"]
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.claim_state, run.claim_attempts, run.leased_by) == (
            "queued", "queued", 0, None)
        # The next claim (call #2) goes through.
        assert [r.id for r in await faults.claim_runs("w", pool=None, now=at(1),
                                                      lease_until=at(31))] == [run_id]

    async def test_a_fault_at_the_seam_fails_a_sweep_and_writes_nothing(
            self, adapter: WorkflowStateAdapter) -> None:
        run_id = await queued(adapter)
        await adapter.claim_runs("w", pool=None, now=at(1), lease_until=at(31))
        faults = FaultInjectingAdapter(adapter, fail={"expire_old_leases": 1})
        with pytest.raises(StorageError, match="injected fault"):
            await faults.expire_old_leases(at(40))
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.claim_state, run.leased_by, run.lease_until) == (
            "running", "claimed", "w", at(31))
        assert await adapter.list_events(run_id) == []
        assert [r.run_id for r in await faults.expire_old_leases(at(40))] == [run_id]


class TestSweep:
    """expire_old_leases: requeue below max_claim_attempts, abandon at it, runner_lost."""

    async def claimed(self, adapter: WorkflowStateAdapter, *, attempts: int | None = None,
                      max_attempts: int = 3) -> str:
        run_id = await queued(adapter, max_claim_attempts=max_attempts)
        got = await adapter.claim_runs("w-1", pool=None, now=T0, lease_until=at(30))
        assert [r.id for r in got] == [run_id]
        if attempts is not None:
            await adapter.update_run(run_id, "test", claim_attempts=attempts)
        return run_id

    async def test_requeue_below_max_attempts(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await self.claimed(adapter, attempts=2)
        result = await adapter.expire_old_leases(at(31))
        assert [(r.run_id, r.leased_by, r.action) for r in result] == [
            (run_id, "w-1", "requeued")]
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.claim_state, run.lease_until, run.error, run.completed_at) == (
            "queued", "queued", None, None, None)
        assert run.leased_by == "w-1"
        events = await adapter.list_events(run_id)
        assert [(e.event_type, e.node_id, e.payload_json, e.created_at) for e in events] == [
            ("runner_lost", None, {"leased_by": "w-1", "action": "requeued",
                                   "reason": "runner_lost"}, at(31))]
        # Requeued: claimable again, and the sweep leaves it alone now.
        assert await adapter.expire_old_leases(at(100)) == []
        again = await adapter.claim_runs("w-2", pool=None, now=at(40), lease_until=at(70))
        assert [(r.id, r.claim_attempts) for r in again] == [(run_id, 3)]

    @pytest.mark.parametrize(("attempts", "action"), [(1, "requeued"), (3, "abandoned")])
    async def test_the_row_is_the_shared_outcome(self, adapter: WorkflowStateAdapter,
                                                 attempts: int, action: str) -> None:
        """What the adapter's sweep SQL wrote is sweep.swept_columns (what the mirror
        projects) and its event payload sweep.lost_payload: one rule, every reader."""
        run_id = await self.claimed(adapter, attempts=attempts)
        [result] = await adapter.expire_old_leases(at(31), "gone")
        assert result.action == action
        run = await adapter.get_run(run_id)
        assert run is not None
        expected = swept_columns(action, reason="gone", now=at(31))
        assert {c: getattr(run, c) for c in expected} == expected
        [event] = await adapter.list_events(run_id)
        assert event.payload_json == lost_payload("w-1", action, "gone")

    async def test_abandon_at_max_attempts(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await self.claimed(adapter, attempts=3)
        result = await adapter.expire_old_leases(at(31), "lease expired")
        assert [(r.run_id, r.action) for r in result] == [(run_id, "abandoned")]
        run = await adapter.get_run(run_id)
        assert run is not None
        assert (run.status, run.claim_state, run.error, run.completed_at) == (
            "error", "abandoned", "lease expired", at(31))
        assert run.lease_until == at(30) and run.leased_by == "w-1"
        events = await adapter.list_events(run_id)
        assert [(e.event_type, e.payload_json) for e in events] == [
            ("runner_lost", {"leased_by": "w-1", "action": "abandoned",
                             "reason": "lease expired"})]
        assert await adapter.expire_old_leases(at(100)) == []

    async def test_lost_inline_run_counts_one_attempt(self, adapter: WorkflowStateAdapter
                                                      ) -> None:
        """An inline run (never claimed: claim_attempts 0) lost counts one claim."""
        runs = {}
        for max_attempts in (1, 2):
            run_id = await start(adapter, max_claim_attempts=max_attempts)
            await adapter.write_lease(run_id, "inline", at(30), now=T0)
            runs[max_attempts] = run_id
        result = {r.run_id: r.action for r in await adapter.expire_old_leases(at(31))}
        assert result == {runs[1]: "abandoned", runs[2]: "requeued"}
        for run_id in runs.values():
            run = await adapter.get_run(run_id)
            assert run is not None and run.claim_attempts == 1

    async def test_requeue_false_abandons_every_lost_run(self, adapter: WorkflowStateAdapter
                                                         ) -> None:
        claimed = await self.claimed(adapter, attempts=1)
        inline = await start(adapter)
        await adapter.write_lease(inline, "inline", at(30), now=T0)
        result = await adapter.expire_old_leases(at(31), requeue=False)
        assert {r.run_id: r.action for r in result} == {claimed: "abandoned",
                                                       inline: "abandoned"}
        for run_id in (claimed, inline):
            run = await adapter.get_run(run_id)
            assert run is not None
            assert (run.status, run.claim_state, run.error) == (
                "error", "abandoned", "runner_lost")

    async def test_max_claim_attempts_is_per_run(self, adapter: WorkflowStateAdapter) -> None:
        once = await self.claimed(adapter, max_attempts=1)
        twice = await self.claimed(adapter, max_attempts=2)
        result = {r.run_id: r.action for r in await adapter.expire_old_leases(at(31))}
        assert result == {once: "abandoned", twice: "requeued"}

    async def test_unexpired_lease_is_not_swept(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await self.claimed(adapter)
        assert await adapter.expire_old_leases(at(29)) == []
        assert await adapter.expire_old_leases(at(30)) == []  # lease_until < now, strictly
        run = await adapter.get_run(run_id)
        assert run is not None and run.status == "running"
        assert await adapter.list_events(run_id) == []

    async def test_paused_run_without_lease_is_never_swept(self, adapter: WorkflowStateAdapter
                                                           ) -> None:
        run_id = await self.claimed(adapter)
        await adapter.on_run_paused(run_id, ctx_for(run_id), now=at(1))
        await adapter.clear_lease(run_id)
        assert await adapter.expire_old_leases(at(10_000_000)) == []
        run = await adapter.get_run(run_id)
        assert run is not None and run.status == "paused"

    async def test_paused_run_holding_an_expired_lease_is_swept(
            self, adapter: WorkflowStateAdapter) -> None:
        run_id = await self.claimed(adapter)
        await adapter.on_run_paused(run_id, ctx_for(run_id), now=at(1))
        result = await adapter.expire_old_leases(at(31))
        assert [r.run_id for r in result] == [run_id]

    async def test_terminal_runs_are_not_swept(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await self.claimed(adapter)
        await adapter.on_run_complete(run_id, ctx_for(run_id), 10, now=at(1))
        assert await adapter.expire_old_leases(at(31)) == []

    async def test_concurrent_sweepers_act_once_per_run(self, adapter: WorkflowStateAdapter
                                                        ) -> None:
        runs = {await self.claimed(adapter) for _ in range(10)}
        results: list[str] = []

        async def sweeper() -> None:
            results.extend(r.run_id for r in await adapter.expire_old_leases(at(31)))

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(sweeper)
        assert sorted(results) == sorted(runs)
        for run_id in runs:
            assert await event_types(adapter, run_id) == ["runner_lost"]


class TestSignals:
    """The signal inbox delivers per event, oldest first."""

    async def test_fifo_per_event(self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        await adapter.enqueue_signal(run_id, "approval", {"n": 1}, now=at(1))
        await adapter.enqueue_signal(run_id, "other", None, now=at(2))
        await adapter.enqueue_signal(run_id, "approval", {"n": 2}, now=at(3))
        first = await adapter.find_signal(run_id, "approval")
        assert first is not None
        assert (first.run_id, first.event, first.payload, first.created_at) == (
            run_id, "approval", {"n": 1}, at(1))
        await adapter.consume_signal(first.id)
        second = await adapter.find_signal(run_id, "approval")
        assert second is not None and second.payload == {"n": 2} and second.id > first.id
        await adapter.consume_signal(second.id)
        assert await adapter.find_signal(run_id, "approval") is None
        other = await adapter.find_signal(run_id, "other")
        assert other is not None and other.payload is None


class TestWaits:
    """Wake registrations: per run, by deadline, and the next deadline."""

    async def test_waits_due_waits_next_deadline(self, adapter: WorkflowStateAdapter) -> None:
        a = await start(adapter)
        b = await start(adapter)
        await adapter.emit_wait_wake(a, "wait:approval#1", "approval", at(60), now=at(1))
        await adapter.emit_wait_wake(a, "sleep#1", None, at(30), now=at(2))
        await adapter.emit_wait_wake(b, "wait:go#1", "go", None, now=at(3))
        waits = await adapter.list_waits(a)
        assert [(w.run_id, w.node_id, w.event, w.deadline, w.created_at) for w in waits] == [
            (a, "wait:approval#1", "approval", at(60), at(1)),
            (a, "sleep#1", None, at(30), at(2)),
        ]
        assert await adapter.next_deadline() == at(30)
        assert [w.node_id for w in await adapter.due_waits(at(29))] == []
        assert [w.node_id for w in await adapter.due_waits(at(30))] == ["sleep#1"]
        assert [w.node_id for w in await adapter.due_waits(at(90))] == [
            "sleep#1", "wait:approval#1"]
        assert [w.node_id for w in await adapter.due_waits(at(90), limit=1)] == ["sleep#1"]

        # Registering the same node again replaces it.
        await adapter.emit_wait_wake(a, "sleep#1", None, at(45), now=at(4))
        assert [(w.node_id, w.deadline) for w in await adapter.list_waits(a)] == [
            ("wait:approval#1", at(60)), ("sleep#1", at(45))]

        await adapter.clear_waits(a)
        assert await adapter.list_waits(a) == []
        assert await adapter.next_deadline() is None
        assert [w.node_id for w in await adapter.list_waits(b)] == ["wait:go#1"]

    async def test_queued_runs_past_their_deadline(self, adapter: WorkflowStateAdapter) -> None:
        """Queued runs with a deadline are timers too (migration 036): the earliest is
        ``next_deadline``, and ``due_run_deadlines`` lists those due, earliest first."""
        late = await queued(adapter, deadline_at=at(50))
        early = await queued(adapter, deadline_at=at(20))
        await queued(adapter)  # no deadline
        running = await start(adapter, deadline_at=at(5))  # not queued: its engine's
        a = await start(adapter)
        await adapter.emit_wait_wake(a, "sleep#1", None, at(30), now=at(1))
        assert await adapter.next_deadline() == at(20)
        assert await adapter.due_run_deadlines(at(19)) == []
        assert [r.id for r in await adapter.due_run_deadlines(at(50))] == [early, late]
        assert [r.id for r in await adapter.due_run_deadlines(at(50), limit=1)] == [early]
        [due] = await adapter.due_run_deadlines(at(20))
        assert (due.id, due.status, due.deadline_at) == (early, "queued", at(20))
        await adapter.update_run(early, "test", status="error", claim_state="failed")
        assert await adapter.next_deadline() == at(30)  # the sleep's, then the late run's
        assert running not in {r.id for r in await adapter.due_run_deadlines(at(100))}

    async def test_child_waits_in_keyset_batches(self, adapter: WorkflowStateAdapter) -> None:
        """Runs paused on a child, by run id, with the run ending the child's chain
        when it has ended (``continued_as`` followed)."""
        parents = sorted([await start(adapter) for _ in range(4)])
        kids = [await start(adapter) for _ in range(4)]
        other = await start(adapter)
        await adapter.emit_wait_wake(other, "wait:go#1", "go", None, now=at(1))
        for parent, kid in zip(parents, kids, strict=True):
            await adapter.emit_wait_wake(parent, f"result:{kid}#1", f"__starflow.child:{kid}",
                                         None, now=at(1))
        # kids[1] ended; kids[2] continued as nxt, which ended; kids[3] continued as
        # one still running.
        ctx = ctx_for(kids[1])
        await adapter.on_run_complete(kids[1], ctx, 1, now=at(2), result=1)
        nxt, going = await start(adapter), await start(adapter)
        for kid, successor in ((kids[2], nxt), (kids[3], going)):
            await adapter.on_run_complete(kid, ctx_for(kid), 1, now=at(2), result=None)
            await adapter.update_run(kid, "continue_as_new", continued_as=successor)
        await adapter.on_run_error(nxt, "boom", now=at(3))
        rows = await adapter.child_waits(after=None)
        assert [(r.run_id, r.child_run_id, r.ended_run_id) for r in rows] == [
            (parents[0], kids[0], None), (parents[1], kids[1], kids[1]),
            (parents[2], kids[2], nxt), (parents[3], kids[3], None)]
        first = await adapter.child_waits(after=None, limit=3)
        assert [r.run_id for r in first] == parents[:3]
        rest = await adapter.child_waits(after=first[-1].run_id, limit=3)
        assert [r.run_id for r in rest] == parents[3:]


class TestSessionVars:
    """Session vars: upsert, lifetime bound to the run unless kept, keep_until expiry."""

    async def test_set_get_overwrite(self, adapter: WorkflowStateAdapter) -> None:
        assert await adapter.session_get("s", "k") is None
        await adapter.session_set("s", "k", {"a": [1, 2]}, now=T0)
        assert await adapter.session_get("s", "k") == {"a": [1, 2]}
        await adapter.session_set("s", "k", "v2", now=at(1))
        assert await adapter.session_get("s", "k") == "v2"
        assert await adapter.session_get("s", "other") is None
        assert await adapter.session_get("t", "k") is None

    async def test_keep_until_expiry(self, adapter: WorkflowStateAdapter) -> None:
        await adapter.session_set("s", "kept", 1, now=T0, keep_until=at(60))
        await adapter.session_set("s", "forever", 2, now=T0)
        assert await adapter.session_get("s", "kept", now=at(59)) == 1
        assert await adapter.session_get("s", "kept", now=at(60)) is None
        assert await adapter.expire_session_vars(at(59)) == 0
        assert await adapter.expire_session_vars(at(60)) == 1
        assert await adapter.session_get("s", "kept") is None
        assert await adapter.session_get("s", "forever", now=at(10_000)) == 2

    async def test_run_scoped_vars_are_dropped_on_complete(self, adapter: WorkflowStateAdapter
                                                           ) -> None:
        run_id = await start(adapter)
        other = await start(adapter)
        await adapter.session_set("s", "scratch", 1, now=T0, run_id=run_id)
        await adapter.session_set("s", "kept", 2, now=T0, run_id=run_id, keep_until=at(3600))
        await adapter.session_set("s", "theirs", 3, now=T0, run_id=other)
        await adapter.session_set("s", "global", 4, now=T0)
        await adapter.on_run_complete(run_id, ctx_for(run_id), 5, now=at(1))
        assert await adapter.session_get("s", "scratch") is None
        assert [await adapter.session_get("s", k) for k in ("kept", "theirs", "global")] == [
            2, 3, 4]


class TestDefinitionsAndSecrets:
    """ensure_definition is idempotent; get_secret is stable."""

    async def test_ensure_definition(self, adapter: WorkflowStateAdapter) -> None:
        first = await adapter.ensure_definition("orders", 1, "abc", now=T0)
        assert await adapter.ensure_definition("orders", 1, "abc", now=at(5)) == first
        second = await adapter.ensure_definition("orders", 2, "def", now=at(6))
        assert second != first
        uuid.UUID(first)
        record = await adapter.get_definition(first)
        assert record is not None
        assert (record.id, record.name, record.version, record.code_hash, record.created_at) == (
            first, "orders", 1, "abc", T0)
        assert await adapter.get_definition(str(uuid.uuid4())) is None

        run_id = await start(adapter, definition_id=second)
        run = await adapter.get_run(run_id)
        assert run is not None and run.definition_id == second

    async def test_concurrent_ensure_definition_agrees(self, adapter: WorkflowStateAdapter
                                                       ) -> None:
        ids: set[str] = set()

        async def ensure() -> None:
            ids.add(await adapter.ensure_definition("race", 1, "h", now=T0))

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(ensure)
        assert len(ids) == 1

    async def test_get_secret(self, adapter: WorkflowStateAdapter) -> None:
        assert await adapter.get_secret("k1", now=T0, create=False) is None
        secret = await adapter.get_secret("k1", now=T0)
        assert secret and len(secret) >= 32
        assert await adapter.get_secret("k1", now=at(1)) == secret
        assert await adapter.get_secret("k1", now=at(1), create=False) == secret
        assert await adapter.get_secret("k2", now=T0) != secret


@pytest.fixture
async def neighbour(adapter: WorkflowStateAdapter, adapter_kind: str, db_url: str
                    ) -> AsyncIterator[WorkflowStateAdapter]:
    """A second adapter on the same database, bound to another workspace."""
    if adapter_kind == "memory":
        pytest.skip("a private in-memory database cannot be shared by two adapters")
    other = adapter_from_url(db_url, workspace_id=f"{adapter.workspace_id}-n")
    await other.open()
    try:
        yield other
    finally:
        await other.close()


class TestTenancy:
    """Two adapters on one database with different workspace_id see nothing of each other."""

    async def test_runs_events_signals_waits_vars_are_scoped(
            self, adapter: WorkflowStateAdapter, neighbour: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        await adapter.on_node_start(run_id, "step:a#1", None, now=at(1))
        await adapter.enqueue_signal(run_id, "go", 1, now=at(1))
        await adapter.emit_wait_wake(run_id, "sleep#1", None, at(30), now=at(1))
        kid = await queued(adapter, deadline_at=at(5))
        await adapter.emit_wait_wake(run_id, f"result:{kid}#1", f"__starflow.child:{kid}",
                                     None, now=at(1))
        await adapter.session_set("s", "k", "mine", now=T0)
        definition = await adapter.ensure_definition("orders", 1, "h", now=T0)
        assert len(await adapter.due_run_deadlines(at(100))) == 1
        assert len(await adapter.child_waits(after=None)) == 1

        assert await neighbour.get_run(run_id) is None
        assert await neighbour.list_runs() == []
        assert await neighbour.list_queued_runs(10) == []
        assert await neighbour.list_events(run_id) == []
        assert await neighbour.find_signal(run_id, "go") is None
        assert await neighbour.list_waits(run_id) == []
        assert await neighbour.due_waits(at(100)) == []
        assert await neighbour.next_deadline() is None
        assert await neighbour.due_run_deadlines(at(100)) == []
        assert await neighbour.child_waits(after=None) == []
        assert await neighbour.session_get("s", "k") is None
        assert await neighbour.get_definition(definition) is None
        assert await neighbour.ensure_definition("orders", 1, "h", now=T0) != definition
        assert await neighbour.get_secret("k", now=T0) != await adapter.get_secret("k", now=T0)

        # Writes from the neighbour do not reach our rows.
        await neighbour.update_run(run_id, "test", status="error")
        await neighbour.record_event(run_id, "phase", None, None, now=at(2))
        await neighbour.session_set("s", "k", "theirs", now=T0)
        signal = await adapter.find_signal(run_id, "go")
        assert signal is not None
        await neighbour.consume_signal(signal.id)
        await neighbour.clear_waits(run_id)
        run = await adapter.get_run(run_id)
        assert run is not None and run.status == "running"
        assert await event_types(adapter, run_id) == ["node_start"]
        assert await adapter.session_get("s", "k") == "mine"
        assert await neighbour.session_get("s", "k") == "theirs"
        assert await adapter.find_signal(run_id, "go") is not None
        assert len(await adapter.list_waits(run_id)) == 2

    async def test_claim_and_sweep_are_scoped(self, adapter: WorkflowStateAdapter,
                                              neighbour: WorkflowStateAdapter) -> None:
        mine = await queued(adapter)
        assert await neighbour.claim_runs("n", pool=None, now=T0, lease_until=at(30)) == []
        got = await adapter.claim_runs("w", pool=None, now=T0, lease_until=at(30))
        assert [r.id for r in got] == [mine]
        assert await neighbour.expire_old_leases(at(31)) == []
        run = await adapter.get_run(mine)
        assert run is not None and run.status == "running"
        assert [r.run_id for r in await adapter.expire_old_leases(at(31))] == [mine]


class TestNullAdapter:
    """The null adapter accepts every boundary and finds nothing."""

    @pytest.fixture
    async def null(self) -> AsyncIterator[WorkflowStateAdapter]:
        adapter = adapter_from_url("null://")
        async with adapter:
            yield adapter

    async def test_writes_succeed_and_reads_are_empty(self, null: WorkflowStateAdapter) -> None:
        run_id = await queued(null)
        await null.write_lease(run_id, "me", at(30), now=T0)
        await null.on_node_start(run_id, "step:a#1", None, now=at(1))
        async with null.unit(guard=Guard(run_id=run_id, leased_by="me")) as u:
            await null.on_node_complete(run_id, "step:a#1", 1, now=at(2))
        assert u.held is True
        await null.enqueue_signal(run_id, "go", None, now=T0)
        await null.session_set("s", "k", 1, now=T0)
        assert await null.due_run_deadlines(at(100)) == []
        assert await null.child_waits(after=None) == []
        assert await null.get_run(run_id) is None
        assert await null.list_runs() == []
        assert await null.list_runs(parent_run_id=run_id) == []
        assert await null.list_queued_runs(10) == []
        assert await null.list_events(run_id) == []
        assert await null.find_signal(run_id, "go") is None
        assert await null.session_get("s", "k") is None
        assert await null.claim_runs("w", pool=None, now=T0, lease_until=at(30)) == []
        assert await null.expire_old_leases(at(100)) == []
        assert await null.next_deadline() is None
        assert await null.due_waits(at(100)) == []
        assert await null.expire_session_vars(at(100)) == 0
        definition = await null.ensure_definition("orders", 1, "h", now=T0)
        assert await null.ensure_definition("orders", 1, "h", now=T0) == definition
        assert await null.get_definition(definition) is None
