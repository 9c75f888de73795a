"""Methods: ``@step`` methods run and replay on their instance; ``@workflow`` methods
are rejected (a run is replayed from its name and arguments, without the instance)."""

from __future__ import annotations

import uuid

import pytest

from starflow import Starflow, WorkflowDefinitionError, step, wait_for, workflow
from starflow.workflow.decorators import registry

from .conftest import SpyAdapter


class Payments:
    """A client whose methods are steps."""

    def __init__(self, fee: int) -> None:
        self.fee = fee
        self.calls: list[int] = []

    @step(name="methods-charge")
    async def charge(self, cents: int) -> int:
        self.calls.append(cents)
        return cents + self.fee

    @step
    async def refund(self, cents: int) -> int:
        self.calls.append(-cents)
        return -cents


payments = Payments(fee=30)


@workflow(name="methods-order")
async def order(cents: int) -> dict[str, int]:
    charged = await payments.charge(cents)
    await wait_for("ship")
    refunded = await payments.refund(5)
    return {"charged": charged, "refunded": refunded}


class Service:
    """A workflow as a static method: no instance, so it is a plain workflow."""

    @staticmethod
    @workflow(name="methods-static")
    async def double(value: int) -> int:
        return value * 2


class TestStepMethods:
    """A @step method runs on its instance, is recorded, and is not called again on replay."""

    async def test_run_pause_and_replay(self, sf: Starflow) -> None:
        """The first call's outcome is replayed after the wait; only new calls run."""
        payments.calls.clear()
        handle = await sf.run(order, 100)
        assert handle.status == "paused"
        assert payments.calls == [100]
        done = await sf.signal(handle.run_id, "ship")
        assert done.status == "success", done.error
        assert done.result == {"charged": 130, "refunded": -5}
        assert payments.calls == [100, -5]  # charge replayed from history, not re-run
        events = await sf.events(handle.run_id)
        nodes = [e.node_id for e in events if e.event_type == "node_complete"]
        assert nodes == ["step:methods-charge#1", "wait:ship#1", "step:Payments.refund#1"]
        start = next(e for e in events if e.event_type == "node_start")
        assert start.payload_json is not None
        assert start.payload_json["input"] == {"args": [100], "kwargs": {}}  # no self

    async def test_outside_a_run_a_plain_method(self) -> None:
        """Called outside a workflow run, a @step method is the method."""
        client = Payments(fee=1)
        assert await client.charge(2) == 3 and client.calls == [2]


class TestWorkflowMethods:
    """@workflow on a method is a WorkflowDefinitionError that says what to do."""

    def test_rejected_at_decoration(self) -> None:
        """A workflow defined with self in a class body is rejected, and not registered."""
        name = f"methods-bad-{uuid.uuid4().hex[:8]}"
        with pytest.raises(WorkflowDefinitionError) as info:
            class Bad:
                @workflow(name=name)
                async def run(self, value: int) -> int:
                    return value
        text = str(info.value)
        assert "Bad.run" in text and "method" in text and "'self'" in text
        assert "module-level" in text and "@staticmethod" in text
        assert registry.get(name) is None

    def test_classmethod_rejected(self) -> None:
        """A classmethod workflow (cls) is rejected the same way."""
        with pytest.raises(WorkflowDefinitionError, match="'cls'"):
            class Bad:
                @classmethod
                @workflow(name=f"methods-bad-{uuid.uuid4().hex[:8]}")
                async def run(cls, value: int) -> int:
                    return value

    async def test_bound_at_call_time(self, sf: Starflow, spy: SpyAdapter) -> None:
        """A workflow bound to an instance (its first parameter not called self) is
        rejected by sf.run and sf.start before anything is written."""

        class Odd:
            @workflow(name=f"methods-odd-{uuid.uuid4().hex[:8]}")
            async def run(this, value: int) -> int:
                return value

        for start in (sf.run, sf.start):
            with pytest.raises(WorkflowDefinitionError, match="bound to an instance"):
                await start(Odd().run, 1)
        assert spy.calls == [] and await sf.list_runs() == []

    async def test_static_method_workflow(self, sf: Starflow) -> None:
        """A @staticmethod over @workflow has no instance: it runs, from the class or one."""
        assert (await sf.run(Service.double, 2)).result == 4
        assert (await sf.run(Service().double, 3)).result == 6

    def test_pool_step_method_rejected(self) -> None:
        """A @step(pool=...) method: a job worker would call it without its instance."""
        with pytest.raises(WorkflowDefinitionError) as info:
            class Bad:
                @step(pool="methods-pool")
                async def work(self, value: int) -> int:
                    return value
        assert "job worker" in str(info.value) and "'self'" in str(info.value)

    def test_decorator_under_staticmethod(self) -> None:
        """@workflow over @staticmethod says to swap them (not just "not async def")."""
        with pytest.raises(WorkflowDefinitionError, match="under @staticmethod"):
            class Bad:
                @workflow(name=f"methods-bad-{uuid.uuid4().hex[:8]}")  # type: ignore[arg-type]
                @staticmethod
                async def run(value: int) -> int:
                    return value


class TestOneFunctionTwoNames:
    """One function decorated twice under two names: each name starts its own definition."""

    async def test_each_name_starts_its_own_registration(self, sf: Starflow) -> None:
        """`a = workflow(name=A)(f); b = workflow(name=B)(f)`: a run of a is named A."""
        suffix = uuid.uuid4().hex[:8]

        async def body(value: int) -> int:
            return value + 1

        a = workflow(name=f"twice-a-{suffix}")(body)
        b = workflow(name=f"twice-b-{suffix}", version=2)(body)
        ran_a, ran_b = await sf.run(a, 1), await sf.run(b, 2)
        assert (ran_a.result, ran_b.result) == (2, 3)
        got_a, got_b = await sf.get_run(ran_a.run_id), await sf.get_run(ran_b.run_id)
        assert (got_a.template_id, got_a.workflow_version) == (f"twice-a-{suffix}", 1)
        assert (got_b.template_id, got_b.workflow_version) == (f"twice-b-{suffix}", 2)
        assert not hasattr(body, "__starflow_workflow__")  # nothing leaks onto the function

    def test_step_twice_keeps_each_name(self) -> None:
        """The same holds for @step: each wrapper carries its own definition."""

        async def work() -> None:
            return None

        one, two = step(name="twice-one")(work), step(name="twice-two")(work)
        assert one.__starflow_step__.name == "twice-one"  # type: ignore[attr-defined]
        assert two.__starflow_step__.name == "twice-two"  # type: ignore[attr-defined]
