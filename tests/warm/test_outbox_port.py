"""The adapter port's outbox reads, on every durable adapter (memory, SQLite, Postgres)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.null import NullWorkflowStateAdapter
from starflow.adapters.units import InsertOutbox, Unit

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _row(run_id: str, n: int, at: datetime) -> InsertOutbox:
    return InsertOutbox(method="test", run_id=run_id, kind="event",
                        payload={"run_id": run_id, "n": n}, created_at=at)


class TestOutboxPort:
    """pending (id order, scoped), mark applied, prune, lag by age bucket."""

    async def test_pending_in_id_order_then_marked_applied(
            self, adapter: WorkflowStateAdapter) -> None:
        """Rows come back oldest first; marking applied removes them from pending."""
        run = str(uuid.uuid4())
        await adapter.execute(Unit(ops=[_row(run, i, T0 + timedelta(seconds=i))
                                        for i in range(5)]))
        rows = await adapter.pending_outbox(limit=10)
        assert [r.payload["n"] for r in rows] == [0, 1, 2, 3, 4]
        assert [r.id for r in rows] == sorted(r.id for r in rows)
        assert rows[0].run_id == run and rows[0].kind == "event"
        assert rows[0].created_at == T0
        assert len(await adapter.pending_outbox(limit=2)) == 2
        marked = await adapter.mark_outbox_applied([rows[0].id, rows[1].id], now=T0)
        assert marked == 2
        assert await adapter.mark_outbox_applied([rows[0].id], now=T0) == 0  # already applied
        assert [r.payload["n"] for r in await adapter.pending_outbox()] == [2, 3, 4]

    async def test_prune_only_applied_rows_older_than_cutoff(
            self, adapter: WorkflowStateAdapter) -> None:
        """Pending rows are never pruned; applied ones go once older than the cutoff."""
        run = str(uuid.uuid4())
        await adapter.execute(Unit(ops=[_row(run, i, T0) for i in range(3)]))
        rows = await adapter.pending_outbox()
        await adapter.mark_outbox_applied([rows[0].id], now=T0)
        await adapter.mark_outbox_applied([rows[1].id], now=T0 + timedelta(hours=1))
        assert await adapter.prune_outbox(T0 + timedelta(minutes=30)) == 1
        assert await adapter.prune_outbox(T0 + timedelta(hours=2)) == 1
        assert [r.payload["n"] for r in await adapter.pending_outbox()] == [2]

    async def test_lag_by_age(self, adapter: WorkflowStateAdapter) -> None:
        """Counts of pending rows at least 1 s / 2 s / 30 s old, and the oldest."""
        run = str(uuid.uuid4())
        now = T0 + timedelta(seconds=100)
        ages = [0.5, 1.5, 5, 40, 90]
        await adapter.execute(Unit(ops=[_row(run, i, now - timedelta(seconds=a))
                                        for i, a in enumerate(ages)]))
        lag = await adapter.outbox_lag(now, [1.0, 2.0, 30.0])
        assert lag.pending == 5
        assert lag.older_than == (4, 3, 2)
        assert lag.oldest_created_at == now - timedelta(seconds=90)
        bare = await adapter.outbox_lag(now)
        assert bare.pending == 5 and bare.older_than == ()

    async def test_scoped_to_workspace(self, adapter: WorkflowStateAdapter, db_url: str) -> None:
        """Another workspace's outbox rows are invisible and untouchable."""
        from starflow.adapters import adapter_from_url

        if db_url == "memory://":
            return  # a private in-memory database cannot be shared by two adapters
        other = adapter_from_url(db_url, workspace_id=f"other-{uuid.uuid4().hex[:8]}")
        await other.open()
        try:
            await other.execute(Unit(ops=[_row(str(uuid.uuid4()), 1, T0)]))
            theirs = await other.pending_outbox()
            assert len(theirs) == 1
            assert await adapter.pending_outbox() == []
            assert (await adapter.outbox_lag(T0)).pending == 0
            assert await adapter.mark_outbox_applied([theirs[0].id], now=T0) == 0
            assert len(await other.pending_outbox()) == 1
        finally:
            await other.close()


async def test_null_adapter_has_an_empty_outbox() -> None:
    """The no-op adapter stores nothing, so nothing is ever pending."""
    null = NullWorkflowStateAdapter()
    assert await null.pending_outbox() == []
    assert await null.mark_outbox_applied([1], now=T0) == 0
    assert await null.prune_outbox(T0) == 0
    lag = await null.outbox_lag(T0, [1.0, 2.0])
    assert lag.pending == 0 and lag.older_than == (0, 0)
