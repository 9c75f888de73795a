"""Workflow definitions and versioning: definition rows, pinned versions, patching."""

from __future__ import annotations

import pytest

import starflow
from starflow import Starflow, step, wait_for, workflow
from starflow.errors import WorkflowDefinitionError
from starflow.workflow.decorators import registry

from .conftest import unique

calls: list[str] = []


@step(name="ver_a")
async def a() -> str:
    calls.append("a")
    return "a"


@step(name="ver_b")
async def b() -> str:
    calls.append("b")
    return "b"


class TestDefinitions:
    """Every run records the definition it started with."""

    async def test_definition_row_written_on_first_use(self, sf: Starflow) -> None:
        """The first run of (name, version) inserts the row; every run points at it."""
        name = unique("def")

        @workflow(name=name, version=3)
        async def wf() -> int:
            return 1

        h1 = await sf.run(wf)
        h2 = await sf.run(wf)
        r1, r2 = await sf.get_run(h1.run_id), await sf.get_run(h2.run_id)
        assert r1.definition_id is not None and r1.definition_id == r2.definition_id
        row = await sf.adapter.get_definition(r1.definition_id)
        assert row is not None
        assert (row.name, row.version) == (name, 3)
        assert row.code_hash == registry.get(name, 3).code_hash  # type: ignore[union-attr]

    async def test_resume_fails_clearly_without_the_runs_version(self, sf: Starflow) -> None:
        """A paused v1 run in a process without v1's code: a clear error, nothing written."""
        name = unique("gone")

        @workflow(name=name, version=1)
        async def v1() -> str:
            return str(await wait_for("go"))

        h = await sf.run(v1)
        before = await sf.events(h.run_id)

        @workflow(name=name, version=2)
        async def v2() -> str:
            return "v2"

        registry._by_key.pop((name, 1))
        with pytest.raises(WorkflowDefinitionError, match=r"version 1.*registered versions: \[2\]"):
            await sf.signal(h.run_id, "go", "x")
        assert (await sf.get_run(h.run_id)).status == "paused"
        assert await sf.events(h.run_id) == before


class TestVersions:
    """A function starts its own version, a name the newest; paused runs keep theirs."""

    async def test_paused_v1_resumes_on_v1_while_new_runs_use_v2(self, sf: Starflow) -> None:
        """Two versions registered at once: each run replays the code it started with."""
        name = unique("order")

        @workflow(name=name, version=1)
        async def v1() -> str:
            await a()
            return f"v1:{await wait_for('go')}"

        old = await sf.run(v1)
        assert old.status == "paused"

        @workflow(name=name, version=2)
        async def v2() -> str:
            await a()
            await b()
            return f"v2:{await wait_for('go')}"

        new = await sf.run(name)  # by name: the newest registered version
        assert new.status == "paused"
        assert (await sf.get_run(new.run_id)).workflow_version == 2
        assert (await sf.get_run(old.run_id)).workflow_version == 1

        done_old = await sf.signal(old.run_id, "go", "x")
        done_new = await sf.signal(new.run_id, "go", "y")
        assert (done_old.status, done_old.result) == ("success", "v1:x")
        assert (done_new.status, done_new.result) == ("success", "v2:y")

    async def test_a_function_starts_its_own_version(self, sf: Starflow) -> None:
        """sf.run(v1) / sf.start(v1) with v2 registered record and run version 1."""
        name = unique("pinned")

        @workflow(name=name, version=1)
        async def v1(x: int) -> str:
            return f"v1:{x}"

        @workflow(name=name, version=2)
        async def v2(x: int) -> str:
            return f"v2:{x}"

        ran = await sf.run(v1, 1)
        assert (ran.status, ran.result) == ("success", "v1:1")
        assert (await sf.get_run(ran.run_id)).workflow_version == 1
        queued = await sf.start(v1, 2)
        assert (await sf.get_run(queued.run_id)).workflow_version == 1
        assert (await sf.run(v2, 3)).result == "v2:3"
        assert (await sf.run(name, 4)).result == "v2:4"

    async def test_unknown_name_writes_nothing(self, sf: Starflow) -> None:
        """Starting a name no module registered is a WorkflowDefinitionError, no run."""
        before = await sf.list_runs()
        with pytest.raises(WorkflowDefinitionError, match="no workflow named 'nope-x'"):
            await sf.run("nope-x")
        with pytest.raises(WorkflowDefinitionError, match="import the module"):
            await sf.start("nope-x")
        assert await sf.list_runs() == before

    async def test_incompatible_change_is_caught_at_replay(self, sf: Starflow) -> None:
        """Same version, a step inserted before a recorded wait: NonDeterminismError naming it."""
        name = unique("drift")

        @workflow(name=name, version=1)
        async def wf() -> str:
            await a()
            return str(await wait_for("go"))

        h = await sf.run(wf)

        @workflow(name=name, version=1)  # redeployed without a version bump or patch
        async def wf_changed() -> str:
            await a()
            await b()
            return str(await wait_for("go"))

        calls.clear()
        done = await sf.signal(h.run_id, "go", "x")
        assert done.status == "error"
        assert done.error is not None
        assert "NonDeterminismError" in done.error and "step:ver_b#1" in done.error
        assert "wait:go#1" in done.error
        assert "b" not in calls


class TestPatched:
    """starflow.patched() lets old histories replay the old path."""

    async def test_patched_change_passes_for_an_old_run(self, sf: Starflow) -> None:
        """History reached past the patch point without a marker: patched() is False."""
        name = unique("patch")

        @workflow(name=name, version=1)
        async def wf() -> str:
            await a()
            return str(await wait_for("go"))

        old = await sf.run(wf)

        @workflow(name=name, version=1)
        async def wf_patched() -> str:
            await a()
            took = starflow.patched("add-b")
            if took:
                await b()
            return f"{took}:{await wait_for('go')}"

        calls.clear()
        done = await sf.signal(old.run_id, "go", "x")
        assert (done.status, done.result) == ("success", "False:x")
        assert calls == []
        assert not any(e.node_id == "patch:add-b#1" for e in await sf.events(old.run_id))

        new = await sf.run(wf)
        assert new.status == "paused"
        assert calls == ["a", "b"]
        events = await sf.events(new.run_id)
        nodes = [e.node_id for e in events if e.node_id]
        assert nodes.index("patch:add-b#1") < nodes.index("step:ver_b#1")
        marker = next(e for e in events if e.node_id == "patch:add-b#1")
        assert marker.event_type == "node_complete"
        done = await sf.signal(new.run_id, "go", "y")
        assert (done.status, done.result) == ("success", "True:y")
        assert calls == ["a", "b"]  # replayed from the journal, not re-run

    async def test_patch_call_may_be_removed_later(self, sf: Starflow) -> None:
        """Markers left in a history do not count as divergence once patched() is gone."""
        name = unique("deprecate")

        @workflow(name=name, version=1)
        async def wf() -> str:
            if starflow.patched("p1"):
                await b()
            return str(await wait_for("go"))

        h = await sf.run(wf)

        @workflow(name=name, version=1)
        async def wf_clean() -> str:
            await b()
            return str(await wait_for("go"))

        done = await sf.signal(h.run_id, "go", "z")
        assert (done.status, done.result) == ("success", "z")

    async def test_patched_outside_a_run(self) -> None:
        """Called outside a workflow it says where to call it."""
        with pytest.raises(starflow.StarflowError, match="outside a workflow run"):
            starflow.patched("x")
