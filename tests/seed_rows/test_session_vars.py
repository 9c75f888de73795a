"""Session variables: dropped with their run unless kept; kept ones expire and are GC'd."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import starflow
from starflow import Starflow, StarflowConfig, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow.runtime.maintenance import Maintenance
from starflow_testing import FakeClock

from .conftest import eventually, unique


def vars_workflow(keep_until: datetime, fail: bool = False) -> object:
    @workflow(name=unique("vars"))
    async def wf(session: str) -> str:
        await starflow.session_set(session, "scratch", {"n": 1})
        await starflow.session_set(session, "profile", "kept", keep_until=keep_until)
        await wait_for("go")
        if fail:
            raise RuntimeError("boom")
        return str(await starflow.session_get(session, "scratch"))

    return wf


class TestLifetime:
    """A run's vars live as long as the run; keep_until outlives it."""

    @pytest.mark.parametrize("fail", [False, True])
    async def test_vars_vanish_at_run_end_unless_kept(self, sf: Starflow, clock: FakeClock,
                                                      fail: bool) -> None:
        wf = vars_workflow(clock.now() + timedelta(hours=1), fail=fail)
        h = await sf.run(wf, "s1")  # type: ignore[arg-type]
        assert await sf.session_get("s1", "scratch") == {"n": 1}
        assert await sf.session_get("s1", "profile") == "kept"
        done = await sf.signal(h.run_id, "go")
        assert done.status == ("error" if fail else "success")
        assert await sf.session_get("s1", "scratch") is None
        assert await sf.session_get("s1", "profile") == "kept"

    async def test_kept_var_expires_then_is_collected(self, sf: Starflow,
                                                      clock: FakeClock) -> None:
        wf = vars_workflow(clock.now() + timedelta(minutes=5))
        h = await sf.run(wf, "s2")  # type: ignore[arg-type]
        await sf.signal(h.run_id, "go")
        await clock.advance(timedelta(minutes=6))
        assert await sf.session_get("s2", "profile") is None  # expired: not served
        assert await sf.adapter.session_get("s2", "profile") == "kept"  # row still there
        assert await sf.adapter.expire_session_vars(clock.now()) == 1
        assert await sf.adapter.session_get("s2", "profile") is None

    async def test_app_api_outside_workflows(self, sf: Starflow, clock: FakeClock) -> None:
        await sf.session_set("app", "flag", [1, 2])
        assert await sf.session_get("app", "flag") == [1, 2]
        await sf.session_set("app", "tmp", "x", keep_until=clock.now() + timedelta(seconds=5))
        await clock.advance(timedelta(seconds=6))
        assert await sf.session_get("app", "tmp") is None
        assert await sf.session_get("app", "flag") == [1, 2]
        with pytest.raises(starflow.StarflowError, match="timezone-aware"):
            await sf.session_set("app", "bad", 1, keep_until=datetime(2030, 1, 1))
        with pytest.raises(starflow.SerializationError):
            await sf.session_set("app", "bad", object())
        assert await sf.session_get("app", "bad") is None


class TestBadInput:
    """A bad session write from workflow code is refused before the step is recorded."""

    async def test_naive_keep_until_in_a_workflow(self, sf: Starflow) -> None:
        """A naive keep_until raises StarflowError at the call, not a recorded StepFailed."""
        caught: list[BaseException] = []

        @workflow(name=unique("vars-naive"))
        async def wf() -> str:
            try:
                await starflow.session_set("s3", "k", 1, keep_until=datetime(2030, 1, 2))
            except starflow.StarflowError as exc:
                caught.append(exc)
            return "done"

        h = await sf.run(wf)
        assert h.status == "success", h.error
        [exc] = caught
        assert type(exc) is starflow.StarflowError
        assert "keep_until must be timezone-aware" in str(exc) and exc.run_id == h.run_id
        assert [e.event_type for e in await sf.events(h.run_id)] == []
        assert await sf.session_get("s3", "k") is None


class TestGarbageCollection:
    """The maintenance loop deletes expired vars every session_var_gc_interval."""

    async def test_maintenance_loop_collects(self, db_url: str, workspace_id: str,
                                             clock: FakeClock) -> None:
        import anyio

        config = StarflowConfig(session_var_gc_interval=timedelta(seconds=60))
        adapter = adapter_from_url(db_url, workspace_id=workspace_id)
        async with Starflow(adapter, clock=clock, config=config, maintenance=False) as sf:
            await sf.session_set("gc", "k", 1, keep_until=clock.now() + timedelta(seconds=30))
            await sf.session_set("gc", "forever", 2)
            async with anyio.create_task_group() as tg:
                tg.start_soon(Maintenance(sf.runner, poll=False)._session_gc_loop)
                await anyio.wait_all_tasks_blocked()
                await clock.advance(timedelta(seconds=61))

                async def gone() -> bool:
                    return await sf.adapter.session_get("gc", "k") is None

                await eventually(gone, sf.adapter)
                tg.cancel_scope.cancel()
            assert await sf.adapter.session_get("gc", "forever") == 2
