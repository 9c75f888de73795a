"""The adapter contract for durable events and stream items (#17, migration 034).

Runs over every durable adapter kind (and PostgreSQL behind a transaction
pooler, as the owner and under Row Level Security), plus the null adapter
where it means something. Every check reads the state back through the
adapter after the write.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.units import Guard
from starflow.errors import SerializationError
from starflow.records import StartOptions
from starflow.workflow.context import WorkflowContext
from tests.conftest import adapter_url

T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", "postgres", "pgbouncer", "pgbouncer-rls"])
def adapter_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def start(adapter: WorkflowStateAdapter) -> str:
    run_id = str(uuid.uuid4())
    ctx = WorkflowContext(run_id=run_id, workflow="orders")
    await adapter.on_run_start(run_id, ctx, StartOptions(), now=T0)
    return run_id


class TestEventValues:
    """set_event upserts one value per (run, key); reads see the latest."""

    async def test_last_write_wins_per_key(self, adapter: WorkflowStateAdapter) -> None:
        """A second write of a key replaces its value and node; other keys stay."""
        run_id = await start(adapter)
        assert await adapter.get_event_value(run_id, "status") is None
        await adapter.set_event(run_id, "status", {"step": 1}, node_id="event:status#1",
                                now=at(1))
        await adapter.set_event(run_id, "other", [1, 2], node_id="event:other#1", now=at(2))
        await adapter.set_event(run_id, "status", "done", node_id="event:status#2", now=at(3))
        got = await adapter.get_event_value(run_id, "status")
        assert got is not None
        assert (got.run_id, got.key, got.value, got.node_id, got.updated_at) == (
            run_id, "status", "done", "event:status#2", at(3))
        values = await adapter.list_event_values(run_id)
        assert [(v.key, v.value) for v in values] == [("other", [1, 2]), ("status", "done")]

    async def test_null_and_nested_values_round_trip(self, adapter: WorkflowStateAdapter
                                                     ) -> None:
        """None is a value (JSON null), not a missing event."""
        run_id = await start(adapter)
        await adapter.set_event(run_id, "none", None, node_id=None, now=at(1))
        await adapter.set_event(run_id, "deep", {"a": [{"b": "é\u2603"}]}, node_id=None,
                                now=at(1))
        none = await adapter.get_event_value(run_id, "none")
        assert none is not None and none.value is None
        deep = await adapter.get_event_value(run_id, "deep")
        assert deep is not None and deep.value == {"a": [{"b": "é\u2603"}]}

    async def test_written_with_a_unit_and_not_when_its_guard_fails(
            self, adapter: WorkflowStateAdapter) -> None:
        """An event written in a guarded unit commits with it, or not at all."""
        run_id = await start(adapter)
        async with adapter.unit(guard=Guard(run_id=run_id, leased_by="nobody")) as unit:
            await adapter.set_event(run_id, "k", 1, node_id="event:k#1", now=at(1))
        assert unit.held is False
        assert await adapter.get_event_value(run_id, "k") is None
        async with adapter.unit(guard=Guard(run_id=run_id, status_in=("running",))) as unit:
            await adapter.on_node_complete(run_id, "event:k#1",
                                           {"output": 1, "kind": "event", "name": "k"},
                                           now=at(1))
            await adapter.set_event(run_id, "k", 1, node_id="event:k#1", now=at(1))
        assert unit.held is True
        got = await adapter.get_event_value(run_id, "k")
        assert got is not None and got.value == 1

    async def test_scoped_to_the_workspace(self, adapter: WorkflowStateAdapter,
                                           db_url: str) -> None:
        """Another workspace on the same database sees none of the run's events."""
        run_id = await start(adapter)
        await adapter.set_event(run_id, "k", 1, node_id=None, now=at(1))
        other = adapter_from_url(db_url, workspace_id=f"ws-{uuid.uuid4().hex[:12]}")
        if db_url == "memory://":
            return  # a second memory:// adapter is another database
        await other.open()
        try:
            assert await other.get_event_value(run_id, "k") is None
            assert await other.list_event_values(run_id) == []
            assert await other.read_stream(run_id, "k") == []
        finally:
            await other.close()

    async def test_unknown_or_malformed_run_ids_read_nothing(
            self, adapter: WorkflowStateAdapter) -> None:
        assert await adapter.get_event_value(str(uuid.uuid4()), "k") is None
        assert await adapter.get_event_value("not-a-uuid", "k") is None
        assert await adapter.read_stream("not-a-uuid", "k") == []
        assert await adapter.list_stream_items(str(uuid.uuid4())) == []

    async def test_unstorable_value_is_refused_before_writing(
            self, adapter: WorkflowStateAdapter) -> None:
        """A value the database cannot hold fails the unit; nothing is written."""
        run_id = await start(adapter)
        with pytest.raises(SerializationError):
            async with adapter.unit():
                await adapter.set_event(run_id, "ok", 1, node_id=None, now=at(1))
                await adapter.set_event(run_id, "bad", "nul\x00", node_id=None, now=at(1))
        assert await adapter.list_event_values(run_id) == []


class TestStreamItems:
    """append_stream inserts item seq once; reads page by seq."""

    async def test_items_in_order_and_a_replayed_append_is_a_no_op(
            self, adapter: WorkflowStateAdapter) -> None:
        run_id = await start(adapter)
        for seq in (1, 2, 3):
            await adapter.append_stream(run_id, "tokens", seq, f"t{seq}",
                                        node_id=f"stream:tokens#{seq}", now=at(seq))
        # The same item again (a replay that did not know it was written): ignored.
        await adapter.append_stream(run_id, "tokens", 2, "CHANGED", node_id="x", now=at(9))
        await adapter.append_stream(run_id, "tokens", 4, None, closed=True,
                                    node_id="stream:tokens#4", now=at(4))
        await adapter.append_stream(run_id, "other", 1, {"n": 1}, node_id=None, now=at(5))
        items = await adapter.read_stream(run_id, "tokens")
        assert [(i.seq, i.value, i.closed, i.node_id) for i in items] == [
            (1, "t1", False, "stream:tokens#1"), (2, "t2", False, "stream:tokens#2"),
            (3, "t3", False, "stream:tokens#3"), (4, None, True, "stream:tokens#4")]
        assert items[0].created_at == at(1)
        page = await adapter.read_stream(run_id, "tokens", after_seq=1, limit=2)
        assert [i.seq for i in page] == [2, 3]
        everything = await adapter.list_stream_items(run_id)
        assert [(i.key, i.seq) for i in everything] == [
            ("other", 1), ("tokens", 1), ("tokens", 2), ("tokens", 3), ("tokens", 4)]


@pytest.mark.parametrize("adapter_kind", ["postgres"])
async def test_notify_wakes_a_reader_in_another_process(adapter: WorkflowStateAdapter,
                                                        workspace_id: str,
                                                        tmp_path: Path) -> None:
    """PostgreSQL: a second adapter (another process's) watching the run is woken
    by the commit of an event, and of a stream item, not by polling; a unit whose
    guard failed announces nothing."""
    reader = adapter_from_url(adapter_url("postgres", tmp_path), workspace_id=workspace_id)
    await reader.open()
    try:
        run_id = await start(adapter)
        async with reader.watch_run(run_id) as watch:
            assert watch is not None
            changed = watch.arm()
            async with adapter.unit(guard=Guard(run_id=run_id, leased_by="nobody")):
                await adapter.set_event(run_id, "k", "no", node_id=None, now=at(1))
            await adapter.set_event(run_id, "k", "v", node_id=None, now=at(1))
            with anyio.fail_after(10):
                await changed.wait()
            got = await reader.get_event_value(run_id, "k")
            assert got is not None and got.value == "v"
            changed = watch.arm()
            await adapter.append_stream(run_id, "s", 1, "item", node_id=None, now=at(2))
            with anyio.fail_after(10):
                await changed.wait()
            assert [i.value for i in await reader.read_stream(run_id, "s")] == ["item"]
    finally:
        await reader.close()


async def test_null_adapter_stores_nothing() -> None:
    """null://: writes succeed and are forgotten; reads find nothing."""
    adapter = adapter_from_url("null://")
    await adapter.open()
    run_id = str(uuid.uuid4())
    await adapter.set_event(run_id, "k", 1, node_id=None, now=T0)
    await adapter.append_stream(run_id, "s", 1, 1, node_id=None, now=T0)
    assert await adapter.get_event_value(run_id, "k") is None
    assert await adapter.list_event_values(run_id) == []
    assert await adapter.read_stream(run_id, "s") == []
    assert await adapter.list_stream_items(run_id) == []
    await adapter.close()
