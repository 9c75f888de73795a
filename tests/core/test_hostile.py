"""Hostile input: values a database cannot hold, names past their limits, raw Python errors.

Every case runs on each adapter (memory, SQLite, PostgreSQL). Before the codec
checked what *both* databases can hold, PostgreSQL refused a NUL in the middle
of a boundary write, the run was given up and swept, and the step ran again.
"""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from typing import Any

import pytest

import starflow
from starflow import (
    ConfigError,
    InvalidArgument,
    ResultTimeout,
    SerializationError,
    Starflow,
    StarflowError,
    WorkflowDefinitionError,
    step,
    wait_for,
    workflow,
)
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Unit
from starflow.errors import StorageError

from .conftest import SpyAdapter

CALLS: dict[str, int] = {}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@step
async def returns_nul() -> str:
    _count("returns_nul")
    return "a\x00b"


@step
async def returns_surrogate() -> dict[str, str]:
    _count("returns_surrogate")
    return {"k": "\ud800"}


@step
async def returns_deep() -> Any:
    _count("returns_deep")
    return _nested(300)


@step
async def raises_nul() -> str:
    _count("raises_nul")
    raise ValueError("card\x00declined")


@step
async def plain() -> int:
    _count("plain")
    return 1


@workflow(name="hostile-step-value")
async def step_value(which: str) -> Any:
    fn = {"nul": returns_nul, "surrogate": returns_surrogate, "deep": returns_deep,
          "raise": raises_nul}[which]
    return await fn()


@workflow(name="hostile-raises")
async def raises() -> None:
    raise ValueError("bad\x00input \ud800")


class Opaque:
    """Not JSON-encodable."""


@workflow(name="hostile-variable")
async def variable(kind: str) -> str:
    ctx = starflow.context()
    ctx.variables["x"] = Opaque() if kind == "opaque" else "a\x00b"
    if kind == "sleep":
        await starflow.sleep(timedelta(seconds=5))
    else:
        await wait_for("go")
    return "done"


@workflow(name="hostile-phase")
async def phase() -> int:
    starflow.context().phase = "ship\x00ping"
    return await plain()


@workflow(name="hostile-phase-free")
async def phase_free() -> int:
    return await plain()


@workflow(name="hostile-long-event")
async def long_event(length: int) -> Any:
    return await wait_for("e" * length)


@workflow(name="hostile-echo")
async def echo(value: Any) -> Any:
    return value


@workflow(name="hostile-waits")
async def waits() -> Any:
    return await wait_for("go")


async def _ended_once(sf: Starflow, run_id: str) -> str:
    """The run ended in error, holds no lease, and its error is the one message."""
    run = await sf.get_run(run_id)
    assert run.status == "error", run
    assert run.leased_by is None and run.lease_until is None
    assert run.error is not None
    return run.error


class TestUnstorableStepValues:
    """A step whose outcome no database can hold runs once and fails the run with the path."""

    @pytest.mark.parametrize(("which", "step_name", "path", "reason"), [
        ("nul", "returns_nul", "at $ ", "NUL"),
        ("surrogate", "returns_surrogate", "at $['output']['k']", "lone surrogate"),
        ("deep", "returns_deep", "at $['output']", "nested more than 250"),
        ("raise", "raises_nul", "at $['message']", "NUL"),
    ])
    async def test_step_runs_once(self, sf: Starflow, which: str, step_name: str,
                                  path: str, reason: str) -> None:
        """The value is refused by the codec before the write: one execution, error once."""
        CALLS.clear()
        handle = await sf.run(step_value, which)
        assert handle.status == "error"
        error = await _ended_once(sf, handle.run_id)
        assert error.startswith("SerializationError: ")
        assert f"step:{step_name}#1" in error and reason in error
        assert "\x00" not in error
        assert {step_name: 1} == CALLS
        events = [e.event_type for e in await sf.events(handle.run_id)]
        assert "node_complete" not in events and "node_error" not in events
        # Nothing is left for a sweep to hand to another runner.
        assert await sf.sweep() == 0
        assert {step_name: 1} == CALLS

    async def test_nul_output_path(self, sf: Starflow) -> None:
        """The message names the JSON path of the offending string."""
        handle = await sf.run(step_value, "nul")
        error = await _ended_once(sf, handle.run_id)
        assert "at $" in error and "index 1" in error

    async def test_workflow_error_message_is_stored_escaped(self, sf: Starflow) -> None:
        """An exception message with NUL and a lone surrogate is recorded, escaped, once."""
        handle = await sf.run(raises)
        error = await _ended_once(sf, handle.run_id)
        assert error == "ValueError: bad\\x00input \\ud800"


class TestUnstorableVariables:
    """A variable that cannot be saved with the checkpoint fails the run once, not runner_lost."""

    @pytest.mark.parametrize(("kind", "reason"), [
        ("opaque", "Opaque"), ("nul", "NUL"), ("sleep", "NUL")])
    async def test_pause_fails_the_run(self, sf: Starflow, kind: str, reason: str) -> None:
        handle = await sf.run(variable, kind)
        assert handle.status == "error"
        error = await _ended_once(sf, handle.run_id)
        assert error.startswith("SerializationError: the workflow's variables")
        assert reason in error
        events = [e.event_type for e in await sf.events(handle.run_id)]
        assert "run_paused" not in events
        assert await sf.sweep() == 0

    async def test_phase_fails_at_its_boundary(self, sf: Starflow) -> None:
        """A phase that cannot be stored fails the run at the next boundary (the step's
        start), so the step never runs."""
        CALLS.clear()
        handle = await sf.run(phase)
        error = await _ended_once(sf, handle.run_id)
        assert "SerializationError: the run's phase" in error
        assert CALLS == {}


class TestNames:
    """Indexed names have one documented limit, checked at every entry point."""

    @pytest.mark.parametrize("length", [201, 2000, 3000])
    async def test_long_wait_event_fails_the_run_once(self, sf: Starflow, length: int) -> None:
        """Past the limit the wait is refused before it is written (no loop to runner_lost)."""
        handle = await sf.run(long_event, length)
        error = await _ended_once(sf, handle.run_id)
        assert error.startswith("InvalidArgument: wait_for event is ")
        assert "the most is 200" in error

    async def test_event_at_the_limit_waits(self, sf: Starflow) -> None:
        handle = await sf.run(long_event, 200)
        assert handle.status == "paused"
        done = await sf.signal(handle.run_id, "e" * 200, {"ok": 1})
        assert done.status == "success"

    @pytest.mark.parametrize("event", ["e" * 201, "a\x00b", "\ud800"])
    async def test_signal_event(self, sf: Starflow, spy: SpyAdapter, event: str) -> None:
        handle = await sf.run(waits)
        before = len(spy.units)
        with pytest.raises(InvalidArgument, match="signal event"):
            await sf.signal(handle.run_id, event)
        assert len(spy.units) == before

    @pytest.mark.parametrize(("session_id", "key"), [
        ("s" * 201, "k"), ("s", "k" * 201), ("s\x00", "k"), ("s", "\ud800"), ("", "k")])
    async def test_session_names(self, sf: Starflow, spy: SpyAdapter, session_id: str,
                                 key: str) -> None:
        with pytest.raises(InvalidArgument, match=r"session_id|key"):
            await sf.session_set(session_id, key, 1)
        with pytest.raises(InvalidArgument, match=r"session_id|key"):
            await sf.session_get(session_id, key)
        assert spy.units == []

    @pytest.mark.parametrize("pool", ["p" * 201, "p\x00"])
    async def test_pool(self, sf: Starflow, spy: SpyAdapter, pool: str) -> None:
        with pytest.raises(InvalidArgument, match="pool"):
            await sf.start(echo, 1, pool=pool)
        with pytest.raises(InvalidArgument, match="pool"):
            sf.worker(pool=pool)
        with pytest.raises(InvalidArgument, match="pool"):
            sf.job_worker(pool)
        assert spy.units == []

    @pytest.mark.parametrize("name", ["w" * 201, "w\x00", "\ud800"])
    def test_workflow_and_step_names(self, name: str) -> None:
        async def fn() -> None: ...

        with pytest.raises(WorkflowDefinitionError, match="name"):
            workflow(name=name)(fn)
        with pytest.raises(WorkflowDefinitionError, match="name"):
            step(name=name)(fn)
        with pytest.raises(WorkflowDefinitionError, match="pool"):
            workflow(name="ok-name", pool=name)(fn)

    @pytest.mark.parametrize(("workspace_id", "env"), [
        ("w" * 65, "prod"), ("acme", "e" * 65), ("a\x00", "prod"), ("acme", "\ud800")])
    def test_tenant(self, db_url: str, workspace_id: str, env: str) -> None:
        with pytest.raises(ConfigError, match=r"workspace_id|env"):
            Starflow.open(db_url, workspace_id=workspace_id, env=env)
        with pytest.raises(ConfigError, match=r"workspace_id|env"):
            adapter_from_url(db_url, workspace_id=workspace_id, env=env)

    async def test_run_id_with_surrogate(self, sf: Starflow, spy: SpyAdapter) -> None:
        with pytest.raises(StarflowError, match="not a UUID nor a valid run key"):
            await sf.run(echo, 1, run_id="\ud800")
        with pytest.raises(InvalidArgument, match="not a UUID nor a valid run key"):
            await sf.get_run("\ud800")
        assert spy.units == []

    async def test_upper_case_run_id(self, sf: Starflow) -> None:
        """A run started with an upper-case UUID is found by it, on every database."""
        rid = str(uuid.uuid4()).upper()
        handle = await sf.run(waits, run_id=rid)
        assert handle.run_id == rid.lower()
        assert (await sf.get_run(rid)).id == rid.lower()
        assert [e.event_type for e in await sf.events(rid)] == ["run_paused"]
        done = await sf.signal(rid, "go", 7)
        assert done.status == "success"
        assert await sf.result(rid) == 7


class TestRawErrors:
    """Where a StarflowError is promised, no raw RecursionError / OverflowError / ValueError."""

    async def test_deep_arguments(self, sf: Starflow, spy: SpyAdapter) -> None:
        for depth in (300, 1000, 5000):
            with pytest.raises(SerializationError, match="nested"):
                await sf.run(echo, _nested(depth))
        assert spy.units == []

    async def test_depth_under_the_limit_reads_back(self, sf: Starflow) -> None:
        """What the door accepts the reader can read (get_run, events, cancel)."""
        value = _nested(240)
        handle = await sf.run(echo, value)
        assert handle.status == "success"
        assert await sf.result(handle.run_id) == value
        paused = await sf.run(waits)
        done = await sf.signal(paused.run_id, "go", value)
        assert done.status == "success"
        assert await sf.result(paused.run_id) == value
        events = await sf.events(paused.run_id)
        assert "run_resumed" in [e.event_type for e in events]
        # Queued (no worker here), so a signal for any name is kept in the inbox (a
        # paused run refuses a name it never waited for: UnexpectedSignal).
        waiting = await sf.start(waits)
        await sf.signal(waiting.run_id, "early", _nested(240))  # kept in the inbox
        assert await sf.adapter.find_signal(waiting.run_id, "early") is not None
        assert (await sf.cancel(waiting.run_id)).status == "cancelled"

    async def test_deep_signal_payload(self, sf: Starflow, spy: SpyAdapter) -> None:
        handle = await sf.run(waits)
        before = len(spy.units)
        with pytest.raises(SerializationError, match="nested"):
            await sf.signal(handle.run_id, "go", _nested(1000))
        assert len(spy.units) == before
        assert (await sf.get_run(handle.run_id)).status == "paused"

    @pytest.mark.parametrize("value", ["\ud800", {"\udfff": 1}, ["ok", "a\x00"]])
    async def test_unstorable_arguments(self, sf: Starflow, spy: SpyAdapter, value: Any
                                        ) -> None:
        with pytest.raises(SerializationError, match="arguments of workflow 'hostile-echo'"):
            await sf.run(echo, value)
        assert spy.units == []

    @pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, -1, 1e300,
                                         timedelta.max, timedelta(days=-1), "1"])
    async def test_result_timeout(self, sf: Starflow, timeout: Any) -> None:
        handle = await sf.run(waits)
        with pytest.raises(InvalidArgument, match="result timeout"):
            await sf.result(handle.run_id, timeout=timeout)

    async def test_result_timeout_zero_returns_at_once(self, sf: Starflow) -> None:
        handle = await sf.run(waits)
        with pytest.raises(ResultTimeout):
            await sf.result(handle.run_id, timeout=0)

    @pytest.mark.parametrize("limit", [10**30, 2**63, 2**31])
    async def test_list_runs_huge_limit(self, sf: Starflow, limit: int) -> None:
        with pytest.raises(InvalidArgument, match="limit must be at most 2147483647"):
            await sf.list_runs(limit=limit)
        assert await sf.list_runs(limit=2**31 - 1) == []

    async def test_list_runs_template_id(self, sf: Starflow) -> None:
        with pytest.raises(InvalidArgument, match="template_id"):
            await sf.list_runs(template_id="t\x00")


class TestStorageErrorClass:
    """Driver errors are classified once: transient ones retried, permanent ones fail."""

    def test_classification(self) -> None:
        import sqlite3

        class PgError(Exception):
            def __init__(self, sqlstate: str) -> None:
                super().__init__(sqlstate)
                self.sqlstate = sqlstate

        def wrapped(cause: BaseException) -> StorageError:
            try:
                raise StorageError("x") from cause
            except StorageError as exc:
                return exc

        assert wrapped(PgError("08006")).transient  # connection failure
        assert wrapped(PgError("40001")).transient  # serialization failure
        assert wrapped(PgError("57P01")).transient  # admin shutdown
        assert not wrapped(PgError("22021")).transient  # bad encoding (NUL)
        assert not wrapped(PgError("54000")).transient  # index row too big
        assert not wrapped(PgError("23505")).transient  # unique violation
        assert wrapped(ConnectionResetError()).transient
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
        assert wrapped(busy).transient
        assert not wrapped(sqlite3.IntegrityError("UNIQUE constraint failed")).transient
        assert not wrapped(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates")).transient
        assert StorageError("given", transient=False).transient is False


class RefusingAdapter(DelegatingAdapter):
    """Fails every unit holding ``method`` with a StorageError of the given kind."""

    def __init__(self, inner: WorkflowStateAdapter, method: str, *, transient: bool) -> None:
        super().__init__(inner)
        self.method = method
        self.transient = transient
        self.refused = 0

    async def execute(self, unit: Unit) -> bool:
        if self.method in unit.methods:
            self.refused += 1
            raise StorageError("PostgreSQL error during execute (DataError): refused",
                               transient=self.transient)
        return await self.inner.execute(unit)


class TestPermanentStorageErrors:
    """A write refused for what it holds fails the run once; it is not retried or handed on."""

    async def test_permanent_fails_once(self, db_url: str, workspace_id: str) -> None:
        CALLS.clear()
        adapter = RefusingAdapter(adapter_from_url(db_url, workspace_id=workspace_id),
                                  "on_node_complete", transient=False)
        async with Starflow(adapter, maintenance=False) as sf:
            handle = await sf.run(phase_free)
            assert handle.status == "error"
            error = await _ended_once(sf, handle.run_id)
            assert error.startswith("StorageError: ") and "refused" in error
            assert adapter.refused == 1  # not retried
            assert CALLS == {"plain": 1}
            assert await sf.sweep() == 0  # nothing to hand to another runner

    async def test_transient_is_handed_back(self, db_url: str, workspace_id: str) -> None:
        """A lost connection keeps the old path: past the retries (none here, so the
        test needs no backoff sleep) the run keeps its lease for the sweep."""
        adapter = RefusingAdapter(adapter_from_url(db_url, workspace_id=workspace_id),
                                  "on_node_complete", transient=True)
        config = starflow.StarflowConfig(storage_retries=0)
        async with Starflow(adapter, maintenance=False, config=config) as sf:
            with pytest.raises(StorageError):
                await sf.run(phase_free)
            assert adapter.refused == 1
            runs = await sf.list_runs()
            assert runs[0].status == "running" and runs[0].leased_by is not None


JOB_POOL = f"hostile-{uuid.uuid4().hex[:6]}"


@step(name="hostile_job_nul", pool=JOB_POOL)
async def job_nul() -> str:
    _count("job_nul")
    raise ValueError("gpu\x00fault")


@workflow(name="hostile-job")
async def job_flow() -> str:
    try:
        await job_nul()
    except starflow.StepFailed as exc:
        return f"{exc.error_type}|{'path' if 'at $' in exc.error_message else exc.error_message}"
    return "unreachable"


class TestJobErrors:
    """A job whose exception message no database can hold is recorded once, as its path."""

    async def test_job_error_with_nul(self, sf: Starflow) -> None:
        CALLS.clear()
        handle = await sf.run(job_flow)
        assert handle.status == "paused"
        assert await sf.job_worker(JOB_POOL).work_once() == 1
        assert await sf.result(handle.run_id) == "starflow.errors.SerializationError|path"
        assert CALLS == {"job_nul": 1}
        (job,) = await sf.adapter.list_jobs(run_id=handle.run_id)
        assert job.status == "failed"
        assert await sf.job_worker(JOB_POOL).work_once() == 0
