"""Run keys (#30 item 6): a caller-chosen string names a run wherever a run id does.

``sf.options(run_id="order-123")`` starts the run whose id is derived from the
key (uuid5 of workspace, env and key) and stores the key in
``workflow_runs.run_key`` (migration 048); every call that takes a run id
takes the key too, through ``starflow.limits.run_ref``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

import starflow
from starflow import (
    InvalidArgument,
    InvalidWakeToken,
    RunIdConflict,
    RunNotFound,
    Starflow,
    StorageError,
    step,
    wait_for,
    workflow,
)
from starflow.adapters.base import WorkflowStateAdapter
from starflow.limits import MAX_RUN_KEY_LENGTH, RUN_KEY_NAMESPACE, run_ref
from starflow.records import StartOptions
from starflow.workflow.context import WorkflowContext

from .conftest import SpyAdapter

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def derived(workspace_id: str, key: str, env: str = "prod") -> str:
    """The id a key names: pinned here, since a change would orphan stored runs."""
    return str(uuid.uuid5(uuid.UUID("8ac84a28-62af-461f-870a-8b21cfee64e1"),
                          f"{workspace_id}\x1f{env}\x1f{key}"))


@workflow(name="run-keys-order")
async def order(order_id: str) -> str:
    starflow.set_attributes(customer="c-1")
    starflow.set_event("stage", "placed")
    starflow.write_stream("log", "placed")
    starflow.close_stream("log")
    decision = await wait_for("approve")
    return f"{order_id}:{decision}"


@workflow(name="run-keys-other")
async def other(order_id: str) -> str:
    return order_id


FLAKY = {"fail": True}


@step
async def charge(order_id: str) -> str:
    if FLAKY["fail"]:
        raise RuntimeError("card declined")
    return f"paid-{order_id}"


@workflow(name="run-keys-flaky")
async def flaky(order_id: str) -> str:
    return await charge(order_id)


@workflow(name="run-keys-counter")
async def counter() -> int:
    total = 0
    while total < 2:
        req = await starflow.receive("add")
        total += int(req.payload)
        await req.reply(total)
    return total


@workflow(name="run-keys-child")
async def child(n: int) -> int:
    return n * 2


@workflow(name="run-keys-parent")
async def parent(n: int) -> tuple[int, str]:
    handle = await starflow.start_child(child, n, run_id=f"invoice-{n}")
    return await handle.result(), handle.run_id


class TestStart:
    """Starting by key: the derived id, the stored key, idempotence."""

    async def test_key_names_a_derived_id_and_is_stored(self, sf: Starflow) -> None:
        """The run's id is uuid5 of workspace/env/key; RunInfo.run_key keeps the key."""
        handle = await sf.options(run_id="order-123").run(order, "o-123")
        assert handle.run_id == derived(sf.workspace_id, "order-123")
        assert handle.status == "paused"
        info = await sf.get_run("order-123")
        assert (info.id, info.run_key) == (handle.run_id, "order-123")
        assert [r.run_key for r in await sf.list_runs()] == ["order-123"]
        assert run_ref("order-123", workspace_id=sf.workspace_id, env="prod").id == info.id
        assert uuid.UUID("8ac84a28-62af-461f-870a-8b21cfee64e1") == RUN_KEY_NAMESPACE

    async def test_starting_twice_returns_the_same_run(self, sf: Starflow) -> None:
        """run then start (or again) with one key: one run, its first arguments."""
        first = await sf.options(run_id="order-7").run(order, "o-7")
        again = await sf.options(run_id="order-7").start(order, "other-args")
        kwargs = await sf.run(order, "o-7", run_id="order-7")
        assert first.run_id == again.run_id == kwargs.run_id
        assert len(await sf.list_runs()) == 1
        assert (await sf.get_run("order-7")).input_json["args"] == ["o-7"]

    async def test_uuid_is_an_id_not_a_key(self, sf: Starflow) -> None:
        """A UUID (any case) is the run's id: no key is stored."""
        rid = str(uuid.uuid4())
        handle = await sf.options(run_id=rid.upper()).start(order, "o")
        assert handle.run_id == rid
        assert (await sf.get_run(rid)).run_key is None
        assert (await sf.start(order, "o")).run_id != rid

    async def test_other_workflow_under_the_key_conflicts(self, sf: Starflow,
                                                          spy: SpyAdapter) -> None:
        """A key already naming a run of another workflow: RunIdConflict naming the key."""
        await sf.options(run_id="order-9").start(order, "o-9")
        written = list(spy.calls)
        with pytest.raises(RunIdConflict, match="run key 'order-9'") as info:
            await sf.options(run_id="order-9").start(other, "o-9")
        assert info.value.run_key == "order-9"
        assert spy.calls == written

    async def test_printable_unicode_and_longest_key(self, sf: Starflow) -> None:
        """Any printable text up to the limit is a key, stored as given."""
        for key in ("commande-é-1/注文", "k" * MAX_RUN_KEY_LENGTH, "a b\tc".replace("\t", "-")):
            handle = await sf.options(run_id=key).start(other, "x")
            assert (await sf.get_run(key)).run_key == key
            assert handle.run_id == derived(sf.workspace_id, key)


SEEN_KEYS: list[str | None] = []


@workflow(name="run-keys-self")
async def knows_its_key() -> str | None:
    SEEN_KEYS.append(starflow.context().run_key)
    await wait_for("go")
    SEEN_KEYS.append(starflow.context().run_key)
    return starflow.context().run_key


class TestWorkflowSeesItsKey:
    """``starflow.context().run_key``: the key the run was started with, on its
    first execution and when it is woken and replayed."""

    async def test_key_before_and_after_a_wake(self, sf: Starflow) -> None:
        SEEN_KEYS.clear()
        await sf.options(run_id="invoice-5").run(knows_its_key)
        done = await sf.signal("invoice-5", "go")
        assert done.status == "success"
        assert await sf.result("invoice-5") == "invoice-5"
        # first execution, then the replay after the wake (up to the wait, then past it)
        assert SEEN_KEYS == ["invoice-5", "invoice-5", "invoice-5"]

    async def test_no_key_is_none(self, sf: Starflow) -> None:
        SEEN_KEYS.clear()
        handle = await sf.run(knows_its_key)
        await sf.signal(handle.run_id, "go")
        assert await sf.result(handle.run_id) is None
        assert set(SEEN_KEYS) == {None}

    async def test_queued_run_claimed_by_a_worker(self, sf: Starflow) -> None:
        SEEN_KEYS.clear()
        await sf.options(run_id="invoice-6").start(knows_its_key)
        async with anyio.create_task_group() as tg:
            assert await sf.worker().claim_once(tg) == 1  # runs it to its wait
        assert (await sf.get_run("invoice-6")).status == "paused"
        await sf.signal("invoice-6", "go")  # back to the queue: a worker's run
        async with anyio.create_task_group() as tg:
            assert await sf.worker().claim_once(tg) == 1  # replays it to its end
        assert await sf.result("invoice-6") == "invoice-6"
        assert set(SEEN_KEYS) == {"invoice-6"}


class TestValidation:
    """A bad key is refused with a clear error before anything is written."""

    BAD = [("", "empty"), ("   ", "whitespace"), (" order-1", "whitespace"),
           ("order-1 ", "whitespace"), ("a\nb", "printable"), ("a\x00b", "printable"),
           ("\ud800", "printable"), ("k" * (MAX_RUN_KEY_LENGTH + 1), "at most 200"),
           ("sfw1.abc", "wake token")]

    @pytest.mark.parametrize(("key", "why"), BAD)
    async def test_refused_before_any_write(self, sf: Starflow, spy: SpyAdapter, key: str,
                                            why: str) -> None:
        with pytest.raises(InvalidArgument, match=why):
            sf.options(run_id=key)
        with pytest.raises(InvalidArgument, match="not a UUID nor a valid run key"):
            await sf.start(order, "o", run_id=key)
        with pytest.raises(InvalidArgument, match=why):
            await sf.get_run(key)
        with pytest.raises(InvalidArgument, match=why):
            await sf.signal(key, "approve", True)
        assert spy.calls == []
        assert await sf.list_runs() == []

    async def test_not_a_string(self, sf: Starflow, spy: SpyAdapter) -> None:
        with pytest.raises(InvalidArgument, match="a UUID or a run key"):
            await sf.get_run(123)  # type: ignore[arg-type]
        assert spy.calls == []


class TestEveryCallTakesTheKey:
    """Each public call that takes a run id takes the run's key too."""

    async def test_waking_and_reading(self, sf: Starflow) -> None:
        await sf.options(run_id="order-1").run(order, "o-1")
        assert await sf.get_attributes("order-1") == {"customer": "c-1"}
        assert await sf.get_event("order-1", "stage") == "placed"
        assert [v async for v in sf.read_stream("order-1", "log")] == ["placed"]
        assert [w.event for w in await sf.waits("order-1")] == ["approve"]
        assert "run_paused" in [e.event_type for e in await sf.events("order-1")]
        assert (await sf.export_run("order-1"))["run"]["run_key"] == "order-1"
        paused = await sf.pause("order-1")
        assert paused.status == "paused"
        assert (await sf.get_run("order-1")).claim_state == "held"
        await sf.resume("order-1")
        assert (await sf.get_run("order-1")).claim_state != "held"
        done = await sf.signal("order-1", "approve", "yes")
        assert done.status == "success"
        assert await sf.result("order-1") == "o-1:yes"

    async def test_update_cancel_retry_fork(self, sf: Starflow) -> None:
        await sf.options(run_id="counter-1").run(counter)
        assert await sf.update("counter-1", "add", 1) == 1
        cancelled = await sf.cancel("counter-1")
        assert cancelled.status == "cancelled"
        FLAKY["fail"] = True
        try:
            failed = await sf.options(run_id="pay-1").run(flaky, "o-1")
            assert failed.status == "error"
            FLAKY["fail"] = False
            assert (await sf.retry("pay-1")).status == "success"
        finally:
            FLAKY["fail"] = True
        assert await sf.result("pay-1") == "paid-o-1"
        fork = await sf.fork("pay-1", from_node="step:charge#1")
        forked = await sf.get_run(fork.run_id)
        assert forked.run_key is None  # the key names the source run only
        assert (await sf.get_run("pay-1")).id != fork.run_id

    async def test_child_run_by_key(self, sf: Starflow) -> None:
        """start_child(run_id="invoice-4"): the child's id derives from the key."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(sf.worker().run)
            handle = await sf.options(run_id="parent-4").start(parent, 4)
            result = await sf.result("parent-4", timeout=30)
            tg.cancel_scope.cancel()
        assert result == (8, derived(sf.workspace_id, "invoice-4"))
        kid = await sf.get_run("invoice-4")
        assert (kid.run_key, kid.parent_run_id) == ("invoice-4", handle.run_id)
        assert [r.id for r in await sf.list_runs(parent_run_id="parent-4")] == [kid.id]

    async def test_unknown_key(self, sf: Starflow, spy: SpyAdapter) -> None:
        """RunNotFound names the key and the id it derives; nothing is written."""
        for call in (sf.get_run("order-404"), sf.signal("order-404", "approve"),
                     sf.cancel("order-404"), sf.result("order-404", timeout=0)):
            with pytest.raises(RunNotFound, match="run order-404 not found") as info:
                await call
            assert info.value.run_key == "order-404"
            assert info.value.run_id == derived(sf.workspace_id, "order-404")
        assert spy.calls == []


class TestResumeTellsKeysFromTokens:
    """sf.resume(x): a run id, a run key or a wake token, never confused."""

    async def test_token_still_wakes_a_keyed_run(self, sf: Starflow) -> None:
        handle = await sf.options(run_id="order-5").run(order, "o-5")
        assert handle.wake_token is not None and handle.wake_token.startswith("sfw1.")
        done = await sf.resume(handle.wake_token, "ok")
        assert (done.run_id, done.status) == (handle.run_id, "success")

    async def test_key_resumes_a_held_run_and_takes_no_payload(self, sf: Starflow,
                                                               spy: SpyAdapter) -> None:
        await sf.options(run_id="order-6").run(order, "o-6")
        await sf.pause("order-6")
        written = list(spy.calls)
        with pytest.raises(InvalidArgument, match="takes no payload"):
            await sf.resume("order-6", "x")
        assert spy.calls == written
        await sf.resume("order-6")
        assert (await sf.get_run("order-6")).claim_state != "held"

    async def test_text_that_is_neither_is_a_malformed_token(self, sf: Starflow,
                                                             spy: SpyAdapter) -> None:
        for text in ("garbage", "sfw1.order-1", " padded "):
            with pytest.raises(InvalidWakeToken) as info:
                await sf.resume(text, "x")
            assert info.value.reason == "malformed"
        assert spy.calls == []


class TestScope:
    """A key names one run per workspace and env."""

    async def test_same_key_in_two_workspaces(self, adapter_kind: str, db_url: str,
                                              tmp_path: Path) -> None:
        if adapter_kind == "memory":
            pytest.skip("a private in-memory database cannot be shared by two workspaces")
        ws = [f"ws-{uuid.uuid4().hex[:12]}" for _ in range(2)]
        ids = []
        for w in ws:
            async with Starflow.open(db_url, workspace_id=w, maintenance=False) as sf:
                ids.append((await sf.options(run_id="order-1").start(other, w)).run_id)
        assert ids == [derived(w, "order-1") for w in ws] and ids[0] != ids[1]
        async with Starflow.open(db_url, workspace_id=ws[0], env="staging",
                                 maintenance=False) as sf:
            staged = await sf.options(run_id="order-1").start(other, "s")
            assert staged.run_id == derived(ws[0], "order-1", env="staging")
            assert (await sf.get_run("order-1")).input_json["args"] == ["s"]


class TestStorage:
    """workflow_runs.run_key (migration 048): one run per key in a scope."""

    async def test_unique_per_scope(self, adapter: WorkflowStateAdapter) -> None:
        ids = [str(uuid.uuid4()) for _ in range(3)]
        ctx = WorkflowContext(run_id=ids[0], workflow="w")
        await adapter.on_run_start(ids[0], ctx, StartOptions(run_key="k-1"), now=T0)
        assert (await adapter.get_run(ids[0])).run_key == "k-1"  # type: ignore[union-attr]
        with pytest.raises(StorageError):
            await adapter.on_run_start(ids[1], ctx, StartOptions(run_key="k-1"), now=T0)
        assert await adapter.get_run(ids[1]) is None
        await adapter.on_run_start(ids[2], ctx, StartOptions(), now=T0)
        assert (await adapter.get_run(ids[2])).run_key is None  # type: ignore[union-attr]


def test_sync_facade_takes_keys(tmp_path: Path) -> None:
    """starflow.sync.Starflow: the same calls, blocking, by key."""
    from starflow.sync import Starflow as SyncStarflow

    with SyncStarflow.open(f"sqlite:///{tmp_path / 'sync.db'}") as sf:
        first = sf.options(run_id="order-s").run(order, "o-s")
        assert sf.options(run_id="order-s").run(order, "o-s").run_id == first.run_id
        assert sf.get_run("order-s").run_key == "order-s"
        assert sf.signal("order-s", "approve", "ok").status == "success"
        assert sf.result("order-s") == "o-s:ok"

