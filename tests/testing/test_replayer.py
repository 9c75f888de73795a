"""Replayer: recorded histories against changed workflow code."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from starflow import NonDeterminismError, SerializationError, step, wait_for, workflow
from starflow.admin.history import HISTORY_FORMAT
from starflow.workflow.decorators import registry
from starflow_testing import (
    FaultInjectingAdapter,
    Replayer,
    WorkflowEnvironment,
    export_run,
    load_history,
)

_ran: list[str] = []


@step(name="t_rep_a")
async def step_a(x: int) -> int:
    _ran.append("a")
    return x + 1


@step(name="t_rep_c")
async def step_c(x: int) -> int:
    _ran.append("c")
    return x * 10


@workflow(name="t_rep_flow")
async def original(x: int) -> int:
    y = await step_a(x)
    z = await step_c(y)
    return z


@workflow(name="t_rep_paused")
async def paused_original(x: int) -> int:
    y = await step_a(x)
    approval = await wait_for("go")
    return y + int(approval)


async def _record(wf: Callable[..., Awaitable[Any]], *args: Any
                  ) -> tuple[list[dict[str, Any]], str]:
    """Run a workflow in an environment and export its history."""
    async with WorkflowEnvironment() as env:
        handle = await env.run(wf, *args)
        return [await export_run(env.adapter, handle.run_id)], handle.run_id


def _redefine(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Register ``fn`` as the current code of workflow ``name`` (what a deploy does)."""
    return workflow(name=name)(fn)


@pytest.fixture(autouse=True)
def _restore_registry() -> object:
    saved = dict(registry._by_key)
    yield
    registry._by_key.clear()
    registry._by_key.update(saved)


class TestReplayer:
    """Divergence is reported; changes inside a step body are not divergence."""

    async def test_flags_a_step_added_in_the_middle(self) -> None:
        """A history a, c replayed against a, b, c raises NonDeterminismError."""
        histories, run_id = await _record(original, 1)

        @step(name="t_rep_b")
        async def step_b(x: int) -> int:
            _ran.append("b")
            return x

        async def gained(x: int) -> int:
            y = await step_a(x)
            y = await step_b(y)
            return await step_c(y)

        new = _redefine("t_rep_flow", gained)
        _ran.clear()
        [result] = await Replayer(workflows=[new]).replay_histories(histories)
        assert result.run_id == run_id
        assert not result.ok
        assert result.outcome == "nondeterminism"
        assert isinstance(result.error, NonDeterminismError)
        assert "step:t_rep_c#1" in str(result.error)
        assert _ran == []  # no handler ran: not a, not the new b

    async def test_flags_a_divergence_the_workflow_code_catches(self) -> None:
        """The replay reports the first divergence it met even when the code catches
        it and goes on to end as the history did."""
        histories, _ = await _record(original, 1)

        @step(name="t_rep_b2")
        async def step_b(x: int) -> int:
            _ran.append("b")
            return x

        async def catching(x: int) -> int:
            y = await step_a(x)
            with contextlib.suppress(NonDeterminismError):  # the run still ends as recorded
                y = await step_b(y)
            return await step_c(y)

        new = _redefine("t_rep_flow", catching)
        _ran.clear()
        [result] = await Replayer(workflows=[new]).replay_histories(histories)
        assert (result.ok, result.outcome) == (False, "nondeterminism")
        assert isinstance(result.error, NonDeterminismError)
        assert "step:t_rep_b2#1" in str(result.error)
        assert _ran == []

    async def test_passes_a_change_inside_a_step_body(self) -> None:
        """Changing what a step does (not which steps run) replays cleanly."""
        histories, _ = await _record(original, 1)

        @step(name="t_rep_c")
        async def step_c_v2(x: int) -> int:
            _ran.append("c2")
            return x * 1000  # new behaviour, same call

        async def changed(x: int) -> int:
            y = await step_a(x)
            return await step_c_v2(y)

        new = _redefine("t_rep_flow", changed)
        _ran.clear()
        [result] = await Replayer(workflows=[new]).replay_histories(histories)
        assert result.ok and result.error is None and result.outcome == "success"
        assert _ran == []

    async def test_stops_at_the_frontier_of_a_paused_run(self) -> None:
        """A paused history replays up to its wait; later code never runs."""
        histories, _ = await _record(paused_original, 2)
        _ran.clear()
        [result] = await Replayer(workflows=[paused_original]).replay_histories(histories)
        assert result.ok and result.outcome == "paused"
        assert _ran == []

    async def test_replays_from_a_database_without_writing(self) -> None:
        """replay_workflow reads every run of a workflow and writes nothing."""
        spy: list[FaultInjectingAdapter] = []

        def wrap(inner):  # type: ignore[no-untyped-def]
            spy.append(FaultInjectingAdapter(inner))
            return spy[0]

        async with WorkflowEnvironment(wrap=wrap) as env:
            for x in (1, 2):
                await env.run(original, x)
            await env.run(paused_original, 3)
            writes_before = [c for c in spy[0].calls if c.startswith(("on_", "write_", "save_"))]
            results = await Replayer().replay_workflow(env, "t_rep_flow")
            assert len(results) == 2 and all(r.ok for r in results)
            assert (await Replayer().replay_run(env.app, results[0].run_id)).ok
            writes_after = [c for c in spy[0].calls if c.startswith(("on_", "write_", "save_"))]
            assert writes_after == writes_before

    async def test_unknown_workflow_is_reported(self) -> None:
        """A history whose workflow is not given cannot be replayed, and says so."""
        histories, _ = await _record(original, 1)
        [result] = await Replayer(workflows=[paused_original]).replay_histories(histories)
        assert not result.ok and result.outcome == "failed"
        assert "t_rep_flow" in str(result.error)


class TestExportFormat:
    """The JSON export a CLI writes and the replayer reads."""

    async def test_round_trip_through_json(self) -> None:
        """export_run -> JSON -> load_history keeps the run and its events."""
        async with WorkflowEnvironment() as env:
            handle = await env.run(paused_original, 4)
            data = await export_run(env.adapter, handle.run_id)
            events = await env.events(handle.run_id)
        text = msgspec.json.encode(data)
        history = load_history(text)
        assert history.format == HISTORY_FORMAT
        assert history.run_id == handle.run_id
        assert [e.event_type for e in history.events] == [e.event_type for e in events]
        assert (await Replayer(workflows=[paused_original]).replay_history(text)).ok

    async def test_wake_tokens_are_redacted(self) -> None:
        """A wake token is a bearer secret: exports never carry it."""
        async with WorkflowEnvironment() as env:
            handle = await env.run(paused_original, 5)
            assert handle.wake_token
            data = await export_run(env.adapter, handle.run_id)
        assert handle.wake_token not in msgspec.json.encode(data).decode()

    def test_rejects_other_formats(self) -> None:
        """A file that is not a run history is refused with a clear error."""
        with pytest.raises(SerializationError, match="not a starflow run history"):
            load_history(b'{"hello": 1}')
        with pytest.raises(SerializationError, match="unsupported run history format"):
            load_history({"format": "other/9", "run": {"id": "x", "template_id": None,
                          "workspace_id": "w", "env": "e", "status": "success",
                          "started_at": None}, "events": []})


class TestPlainDefWorkflows:
    """The replayer runs a plain ``def`` workflow's body in a thread, like the runtime."""

    async def test_a_plain_def_rewrite_of_the_same_steps_replays_cleanly(self) -> None:
        histories, _ = await _record(original, 1)

        def rewritten(x: int) -> int:
            return step_c(step_a(x))  # type: ignore[arg-type,return-value]

        new = _redefine("t_rep_flow", rewritten)
        _ran.clear()
        [result] = await Replayer(workflows=[new]).replay_histories(histories)
        assert result.ok and result.outcome == "success"
        assert _ran == []

    async def test_a_plain_def_that_diverges_is_flagged(self) -> None:
        histories, _ = await _record(original, 1)

        def skips_a(x: int) -> int:
            return step_c(x)  # type: ignore[return-value]

        new = _redefine("t_rep_flow", skips_a)
        _ran.clear()
        [result] = await Replayer(workflows=[new]).replay_histories(histories)
        assert result.outcome == "nondeterminism"
        assert isinstance(result.error, NonDeterminismError)
        assert _ran == []
