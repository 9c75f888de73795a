"""Fault injection at every write boundary: the run always ends in a defined state."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

import starflow
from starflow import RunNotFound, StorageError, step, wait_for, workflow
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.units import Command
from starflow.workflow.context import WAIT_KEY
from starflow_testing import FaultInjectingAdapter, WorkflowEnvironment
from starflow_testing._tracking import forwarded_reads


@step
async def t_fault_charge(order: str) -> str:
    return f"receipt-{order}"


@step
async def t_fault_ship(order: str) -> str:
    return f"parcel-{order}"


@workflow(name="t_fault_order")
async def fault_order(order: str) -> dict[str, Any]:
    starflow.context().phase = "charging"
    receipt = await t_fault_charge(order)
    decision = await wait_for("approval")
    starflow.context().phase = "shipping"
    parcel = await t_fault_ship(order)
    return {"receipt": receipt, "parcel": parcel, "ok": decision["ok"]}


#: Methods that reach the adapter as read-modify-write commands (``perform``).
COMMANDS = frozenset(cls.method for cls in Command.__subclasses__())
#: Write methods the environment calls while it opens, before any run.
AT_OPEN = ("get_secret",)

EXPECTED = {"receipt": "receipt-o-1", "parcel": "parcel-o-1", "ok": True}


class Harness:
    """One environment over a FaultInjectingAdapter."""

    def __init__(self, fail: dict[str, Any] | None = None) -> None:
        self.faults: FaultInjectingAdapter | None = None
        self.fail = fail or {}

    def wrap(self, inner: WorkflowStateAdapter) -> WorkflowStateAdapter:
        self.faults = FaultInjectingAdapter(inner, fail=self.fail)
        return self.faults


async def _check_state(env: WorkflowEnvironment, run_id: str) -> str:
    """The run's state is one the state model defines; returns its status."""
    try:
        run = await env.get_run(run_id)
    except RunNotFound:
        # A failed start writes nothing at all.
        assert await env.list_runs() == []
        return "absent"
    assert run.status in ("running", "paused", "success", "queued"), run
    if run.status == "paused":
        assert run.checkpoint_json is not None, "paused without a checkpoint"
        wait = run.checkpoint_json["variables"][WAIT_KEY]
        assert wait["node_id"] == "wait:approval#1" and wait["wake_token"]
        waits = await env.adapter.list_waits(run_id)
        assert [w.node_id for w in waits] == ["wait:approval#1"]
        assert run.leased_by is None and run.lease_until is None
    if run.status == "running" and env.runner.busy == 0:
        # A runner gave up on storage: its lease remains for the sweep.
        assert run.lease_until is not None
    if run.status == "success":
        assert run.checkpoint_json is None and run.lease_until is None
    return run.status


async def _drive_to_success(env: WorkflowEnvironment, run_id: str) -> list[str]:
    """Start, approve and finish the run, retrying what failed; returns errors seen."""
    errors: list[str] = []
    for _ in range(20):
        status = await _check_state(env, run_id)
        try:
            if status == "absent":
                await env.run(fault_order, "o-1", run_id=run_id)  # type: ignore[call-arg]
            elif status == "paused":
                run = await env.get_run(run_id)
                assert run.checkpoint_json is not None
                token = run.checkpoint_json["variables"][WAIT_KEY]["wake_token"]
                await env.resume(token, {"ok": True})
            elif status in ("running", "queued"):
                await env.run_until_idle()
            else:
                return errors
        except StorageError as exc:
            assert "injected fault" in str(exc) or "could not record" in str(exc), exc
            errors.append(str(exc))
    raise AssertionError(f"run {run_id} never finished: {await env.get_run(run_id)}")


async def _write_methods() -> list[str]:
    """The write boundaries a clean run with steps, a wait and a resume goes through."""
    harness = Harness()
    async with WorkflowEnvironment(wrap=harness.wrap) as env:
        run_id = str(uuid.uuid4())
        await _drive_to_success(env, run_id)
        assert await env.result(run_id) == EXPECTED
    assert harness.faults is not None
    reads = set(forwarded_reads())
    return sorted({c for c in harness.faults.calls if c not in reads})


class TestEveryWriteBoundary:
    """Each write method, failed once and failed past the retries."""

    async def test_seed_boundaries_are_covered(self) -> None:
        """The scenario exercises the state model's write boundaries."""
        methods = await _write_methods()
        for seed in ("on_run_start", "write_lease", "on_node_start", "on_node_complete",
                     "on_run_paused", "save_checkpoint", "record_phase_if_changed",
                     "emit_wait_wake", "clear_lease", "on_run_resumed", "on_run_complete",
                     "clear_waits"):
            assert seed in methods, seed
        # The read-modify-writes reach the wrapper through the same seam (perform).
        for command in ("ensure_definition", "get_secret", "claim_runs", "expire_old_leases"):
            assert command in methods, command

    @pytest.mark.parametrize("calls", [1, range(1, 5)], ids=["once", "past-retries"])
    async def test_fault_at_every_write_method(self, calls: Any) -> None:
        """Whatever write fails, the run ends in success with one outcome per node."""
        methods = await _write_methods()
        for method in methods:
            if method in AT_OPEN:
                continue  # no run to end: see test_a_fault_at_open_fails_the_open
            harness = Harness({method: calls})
            async with WorkflowEnvironment(wrap=harness.wrap) as env:
                run_id = str(uuid.uuid4())
                errors = await _drive_to_success(env, run_id)
                assert harness.faults is not None
                assert harness.faults.failures, f"{method} was never failed"
                assert await env.result(run_id) == EXPECTED, method
                events = await env.events(run_id)
                outcomes = Counter(e.node_id for e in events
                                   if e.event_type in ("node_complete", "node_error"))
                assert outcomes == {"step:t_fault_charge#1": 1, "wait:approval#1": 1,
                                    "step:t_fault_ship#1": 1}, (method, outcomes)
                if calls == 1 and errors:
                    # One failure is absorbed by the engine's retries, except at the
                    # boundaries the caller makes itself (start, wake).
                    # ensure_definition and get_secret are commands of the start.
                    assert method in ("on_run_start", "write_lease", "on_node_complete",
                                      "clear_waits", "on_run_resumed", "consume_signal",
                                      "ensure_definition", "get_secret"), (method, errors)


    async def test_a_fault_at_open_fails_the_open(self) -> None:
        """The wake-token secret is read while the environment opens: failing it fails
        the open with the injected StorageError, before any run is written."""
        for method in AT_OPEN:
            harness = Harness({method: 1})
            with pytest.raises(StorageError, match="injected fault"):
                async with WorkflowEnvironment(wrap=harness.wrap):
                    raise AssertionError("the environment opened")  # pragma: no cover
            assert harness.faults is not None and harness.faults.failures == [method]
            assert not any(c.startswith("on_") for c in harness.faults.calls)


class TestFaultInjectingAdapter:
    """The wrapper itself."""

    async def test_records_calls_and_fails_the_nth(self) -> None:
        """calls lists boundaries in order; the 2nd on_node_complete fails once."""
        harness = Harness({"on_node_complete": 2})
        async with WorkflowEnvironment(wrap=harness.wrap) as env:
            handle = await env.run(fault_order, "o-1")
            assert handle.status == "paused"
            faults = harness.faults
            assert faults is not None
            assert faults.failures == []
            # The 2nd on_node_complete is the wake's: the caller gets the error,
            # nothing was written, and the run is still paused on its checkpoint.
            with pytest.raises(StorageError, match="injected fault"):
                await env.resume(handle.wake_token or "", {"ok": True})
            assert faults.failures == ["on_node_complete"]
            assert await _check_state(env, handle.run_id) == "paused"
            await env.resume(handle.wake_token or "", {"ok": True})
            assert faults.calls_of("on_node_complete") == 4
            assert await env.result(handle.run_id) == EXPECTED
        writes = [c for c in faults.calls if c not in set(forwarded_reads())]
        # Background claims and sweeps interleave; the run's own writes are in order.
        assert writes.index("get_secret") < writes.index("ensure_definition") < writes.index(
            "on_run_start")
        units = [c for c in writes if c not in COMMANDS]
        assert units[:3] == ["on_run_start", "write_lease", "record_phase_if_changed"]

    async def test_hang_until_released(self) -> None:
        """A hung save_checkpoint keeps the run running until the test releases it."""
        import anyio

        faults: list[FaultInjectingAdapter] = []

        def wrap(inner: WorkflowStateAdapter) -> WorkflowStateAdapter:
            faults.append(FaultInjectingAdapter(inner, hang={"save_checkpoint": 1}))
            return faults[0]

        async with WorkflowEnvironment(wrap=wrap) as env, anyio.create_task_group() as tg:
            handles: list[Any] = []

            async def run() -> None:
                handles.append(await env.run(fault_order, "o-1"))

            tg.start_soon(run)
            await faults[0].wait_hanging("save_checkpoint")
            runs = await env.list_runs()
            assert [r.status for r in runs] == ["running"]
            faults[0].release("save_checkpoint")
            await env.quiesce()
            assert handles and handles[0].status == "paused"

    def test_rejects_bad_specs(self) -> None:
        """Call numbers start at 1."""
        from starflow.adapters.null import NullWorkflowStateAdapter

        with pytest.raises(ValueError, match="call number"):
            FaultInjectingAdapter(NullWorkflowStateAdapter(), fail={"x": 0})


@step
async def t_fault_patched_step() -> str:
    # A code change reached inside the step: its marker rides on this step's
    # node_complete unit, right before the step's own on_node_complete.
    return "new" if starflow.patched("inside") else "old"


@workflow(name="t_fault_patched")
async def fault_patched() -> list[str]:
    first = await t_fault_patched_step()
    both = [starflow.patched("a"), starflow.patched("b")]  # two markers, one unit
    return [first, *map(str, both), await t_fault_patched_step()]


class TestExactCounts:
    """A method called several times back to back in one unit counts every call."""

    async def test_back_to_back_node_completes_each_count(self) -> None:
        """Marker + step on_node_complete, and two markers, are separate calls."""
        h = Harness()
        async with WorkflowEnvironment(wrap=h.wrap) as env:
            assert (await env.run(fault_patched)).status == "success"
        assert h.faults is not None
        # step 1 start; [patch:inside, step 1] complete; [patch:a, patch:b] + step 2
        # start; step 2 complete.
        assert h.faults.calls_of("on_node_complete") == 5, h.faults.calls
        assert h.faults.calls.count("on_node_complete") == 5

    @pytest.mark.parametrize(("n", "node"), [(2, "step:t_fault_patched_step#1"),
                                             (4, "patch:b#1")])
    async def test_the_nth_call_fails(self, n: int, node: str) -> None:
        """fail={"on_node_complete": n} fails the unit holding the n-th call, no other."""
        h = Harness({"on_node_complete": {n}})
        async with WorkflowEnvironment(wrap=h.wrap) as env:
            assert (await env.run(fault_patched)).status == "success"  # the retry wrote it
            assert h.faults is not None
            assert h.faults.failures == ["on_node_complete"]
            events = [(e.event_type, e.node_id) for e in await env.events(
                (await env.list_runs())[0].id)]
        assert ("node_complete", node) in events
        # 5, and the failed unit's again: [patch:inside, step 1] (2), or fused (the
        # default) [patch:inside, step 1, patch:a, patch:b] + step 2's start (4).
        again = 4 if env.app.config.fused_boundaries else 2
        assert h.faults.calls_of("on_node_complete") == 5 + again


class TestCommandsAtTheSeam:
    """Claims and sweeps reach the wrapper through ``perform``, like units through
    ``execute``: a fault there fails the call, and neither the database nor the
    mirror's outbox changes."""

    async def test_failed_claim_and_sweep_leave_rows_and_outbox_unchanged(
            self, tmp_path: Any) -> None:
        from datetime import UTC, datetime, timedelta

        from starflow.adapters import adapter_from_url
        from starflow.records import StartOptions
        from starflow.warm.mirror import mirror
        from starflow.workflow.context import WorkflowContext

        t0 = datetime(2030, 1, 1, tzinfo=UTC)
        cold = adapter_from_url(f"sqlite:///{tmp_path / 'f.db'}", workspace_id="faults")
        faults = FaultInjectingAdapter(cold, fail={"claim_runs": 1, "expire_old_leases": 1})
        # The mirror above the injector: its outbox rows ride on the failing command.
        mirrored = mirror(faults, "memory://")
        async with mirrored:
            run_id = str(uuid.uuid4())
            await mirrored.on_run_start(
                run_id, WorkflowContext(run_id=run_id, workflow="w"),
                StartOptions(status="queued", claim_state="queued", start_mode="queued"),
                now=t0)
            outbox = len(await cold.pending_outbox())

            with pytest.raises(StorageError, match="injected fault"):
                await mirrored.claim_runs("r", pool=None, now=t0,
                                          lease_until=t0 + timedelta(seconds=30))
            run = await cold.get_run(run_id)
            assert run is not None and (run.claim_state, run.claim_attempts) == ("queued", 0)
            assert len(await cold.pending_outbox()) == outbox

            [claimed] = await mirrored.claim_runs("r", pool=None, now=t0,
                                                  lease_until=t0 + timedelta(seconds=30))
            assert claimed.id == run_id
            outbox = len(await cold.pending_outbox())

            later = t0 + timedelta(seconds=60)
            with pytest.raises(StorageError, match="injected fault"):
                await mirrored.expire_old_leases(later)
            run = await cold.get_run(run_id)
            assert run is not None and (run.status, run.leased_by) == ("running", "r")
            assert await cold.list_events(run_id) == []
            assert len(await cold.pending_outbox()) == outbox

            [swept] = await mirrored.expire_old_leases(later)
            assert swept.run_id == run_id and swept.action == "requeued"
            assert len(await cold.pending_outbox()) == outbox + 2  # the row and its event
        assert faults.failures == ["claim_runs", "expire_old_leases"]
