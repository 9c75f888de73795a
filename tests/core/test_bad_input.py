"""Bad input gets a clear StarflowError subclass, and nothing is written."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import starflow
from starflow import (
    ConfigError,
    ReservedKeyError,
    RunFinished,
    RunNotFound,
    SerializationError,
    Starflow,
    StarflowConfig,
    StarflowError,
    WorkflowDefinitionError,
    step,
    wait_for,
    workflow,
)
from starflow_testing import capture_logs
from tests.conftest import POSTGRES_URL, require_postgres

from .conftest import SpyAdapter


class Opaque:
    """Not JSON-encodable."""


@step
async def give_opaque() -> object:
    return Opaque()


@workflow(name="bad-input-echo")
async def echo(value: object) -> object:
    return value


@workflow(name="bad-input-opaque-step")
async def opaque_step() -> object:
    return await give_opaque()


@workflow(name="bad-input-waits")
async def waits() -> object:
    return await wait_for("go")


async def test_non_serializable_argument(sf: Starflow, spy: SpyAdapter) -> None:
    """An argument that cannot be stored is rejected before the run exists."""
    with pytest.raises(SerializationError, match="arguments of workflow 'bad-input-echo'"):
        await sf.run(echo, Opaque())
    assert await sf.list_runs() == []
    assert spy.calls == []


async def test_non_serializable_step_return(sf: Starflow, spy: SpyAdapter) -> None:
    """A step result that cannot be stored fails the run; no node_complete is written."""
    handle = await sf.run(opaque_step)
    assert handle.status == "error"
    assert "SerializationError" in (handle.error or "")
    types = [e.event_type for e in await sf.events(handle.run_id)]
    assert "node_complete" not in types


async def test_non_serializable_workflow_result(sf: Starflow) -> None:
    """A workflow result that cannot be stored ends the run in error with that cause."""
    handle = await sf.run(echo, "fine")
    assert handle.status == "success"

    @workflow(name="bad-input-result")
    async def returns_opaque() -> object:
        return Opaque()

    handle = await sf.run(returns_opaque)
    assert handle.status == "error" and "SerializationError" in (handle.error or "")
    run = await sf.get_run(handle.run_id)
    assert run.result_json is None


async def test_non_serializable_signal_payload(sf: Starflow, spy: SpyAdapter) -> None:
    """A signal payload that cannot be stored writes nothing, and the run keeps waiting."""
    handle = await sf.run(waits)
    spy.units.clear()
    with pytest.raises(SerializationError):
        await sf.signal(handle.run_id, "go", Opaque())
    assert spy.calls == []
    assert (await sf.get_run(handle.run_id)).status == "paused"


async def test_signal_event_no_wait_can_have(sf: Starflow, spy: SpyAdapter) -> None:
    """A signal name wait_for refuses (with '#', empty, not a string) is refused too,
    naming the run, instead of being kept for a wait that can never exist."""
    handle = await sf.run(waits)
    spy.units.clear()
    for bad in ("go#1", "", None, 7):
        with pytest.raises(StarflowError, match="signal event must be") as info:
            await sf.signal(handle.run_id, bad, 1)  # type: ignore[arg-type]
        assert info.value.run_id == handle.run_id
    assert spy.calls == []
    assert await sf.adapter.find_signal(handle.run_id, "go#1") is None
    assert (await sf.get_run(handle.run_id)).status == "paused"


async def test_unknown_run_id(sf: Starflow, spy: SpyAdapter) -> None:
    """Every run-scoped call names the missing run."""
    missing = str(uuid.uuid4())
    for call in (sf.get_run(missing), sf.signal(missing, "go"), sf.cancel(missing),
                 sf.events(missing), sf.result(missing)):
        with pytest.raises(RunNotFound, match=missing) as info:
            await call
        assert info.value.run_id == missing
    assert spy.calls == []


async def test_signal_to_finished_run(sf: Starflow, spy: SpyAdapter) -> None:
    """A signal for an ended run raises RunFinished and queues nothing."""
    handle = await sf.run(echo, 1)
    spy.units.clear()
    with pytest.raises(RunFinished, match="already ended with status 'success'") as info:
        await sf.signal(handle.run_id, "go", 1)
    assert info.value.status == "success"
    with pytest.raises(RunFinished):
        await sf.cancel(handle.run_id)
    assert spy.calls == []


async def test_reserved_key_in_workflow(sf: Starflow) -> None:
    """A user write of a __celestial key fails the run with ReservedKeyError's message."""

    @workflow(name="bad-input-reserved")
    async def reserved() -> None:
        starflow.context().variables["__celestialWait"] = "mine"

    handle = await sf.run(reserved)
    assert handle.status == "error"
    assert "ReservedKeyError" in (handle.error or "") and "__celestialWait" in (handle.error or "")


def test_reserved_key_every_write_path() -> None:
    """Item assignment, update, setdefault, pop, |= and ctx.set all refuse reserved keys."""
    ctx = starflow.WorkflowContext(run_id="r", workflow="w")
    attempts = [
        lambda: ctx.variables.__setitem__("__celestialX", 1),
        lambda: ctx.variables.update({"__celestialX": 1}),
        lambda: ctx.variables.setdefault("__celestialX", 1),
        lambda: ctx.variables.pop("__celestialX", None),
        lambda: ctx.set("__celestialLeases", 1),
    ]
    for attempt in attempts:
        with pytest.raises(ReservedKeyError):
            attempt()
    with pytest.raises(ReservedKeyError):
        ctx.variables |= {"__celestialIdempotency": 1}
    assert dict(ctx.variables) == {}


async def test_workflow_not_decorated(sf: Starflow, spy: SpyAdapter) -> None:
    """Running a plain function says to decorate it; nothing is written."""

    async def plain() -> None:
        return None

    with pytest.raises(WorkflowDefinitionError, match=r"decorate it with @starflow\.workflow"):
        await sf.run(plain)
    assert spy.calls == [] and await sf.list_runs() == []


async def test_wrong_arguments(sf: Starflow, spy: SpyAdapter) -> None:
    """Arguments that do not fit the signature are rejected before anything is written."""
    with pytest.raises(WorkflowDefinitionError, match="bad arguments"):
        await sf.run(echo, 1, 2)
    assert spy.calls == []


async def test_bad_run_id(sf: Starflow, spy: SpyAdapter) -> None:
    """A run id that is neither a UUID nor a valid run key is rejected up front."""
    with pytest.raises(starflow.InvalidArgument, match="not a UUID nor a valid run key"):
        await sf.run(echo, 1, run_id=" order-1")
    assert spy.calls == []


def test_invalid_definitions_report_every_problem() -> None:
    """Decoration validates and lists all reasons at once."""

    def gen_fn() -> Any:  # a plain def is a valid workflow; a generator is not
        yield None

    with pytest.raises(WorkflowDefinitionError, match=r"for 3 reason\(s\)") as info:
        workflow(name="", version=0)(gen_fn)
    assert "generator function" in str(info.value)
    with pytest.raises(WorkflowDefinitionError, match="must not contain '#'"):
        step(name="a#b")(give_opaque.__wrapped__)


def test_invalid_config() -> None:
    """Config errors name the parameter and its value."""
    with pytest.raises(ConfigError, match="heartbeat_interval must be < lease_ttl: 40 s >= 30 s"):
        StarflowConfig(heartbeat_interval=timedelta(seconds=40))
    with pytest.raises(ConfigError, match="sweep_interval must be positive"):
        StarflowConfig(sweep_interval=timedelta(0))
    with pytest.raises(ConfigError, match="sqlite_inline_commits must be True or False"):
        StarflowConfig(sqlite_inline_commits="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fused_boundaries must be True or False, got 1"):
        StarflowConfig(fused_boundaries=1)  # type: ignore[arg-type]


def test_bad_url() -> None:
    """An unknown scheme says which ones exist."""
    with pytest.raises(ConfigError, match=r"sqlite:///path\.db"):
        Starflow.open("mysql://x")


async def test_step_outside_a_run_is_a_plain_function() -> None:
    """Decorated functions keep working as plain async functions outside a run."""
    assert await echo(3) == 3
    assert isinstance(await give_opaque(), Opaque)
    with pytest.raises(starflow.StarflowError, match="outside a workflow run"):
        await wait_for("x")


async def test_result_of_a_cancelled_run(sf: Starflow) -> None:
    """sf.result raises RunCancelled, a WorkflowFailed, for a cancelled run."""
    handle = await sf.run(waits)
    cancelled = await sf.cancel(handle.run_id)
    assert cancelled.status == "cancelled"
    with pytest.raises(starflow.RunCancelled) as info:
        await sf.result(handle.run_id)
    assert isinstance(info.value, starflow.WorkflowFailed) and info.value.status == "cancelled"


async def test_options_start_is_idempotent(sf: Starflow) -> None:
    """sf.options(run_id=...) starts once; the second call returns the same run."""
    rid = str(uuid.uuid4())
    first = await sf.options(run_id=rid).run(echo, 1)
    second = await sf.options(run_id=rid).run(echo, 2)
    assert first.run_id == second.run_id == rid and second.result == 1
    assert len(await sf.list_runs()) == 1
    with pytest.raises(ConfigError, match="pool= applies to queued runs"):
        await sf.options(pool="gpu").run(echo, 1)


@pytest.mark.parametrize(("args", "kwargs", "ok"), [
    ((1, 2), {}, True), ((1,), {"b": 2}, True), ((1,), {}, False), ((1, 2, 3), {}, False),
    ((1, 2), {"b": 3}, False), ((), {"a": 1, "b": 2}, True), ((1, 2), {"c": 3}, False),
])
def test_arguments_are_checked_against_the_signature(
        args: tuple[object, ...], kwargs: dict[str, object], ok: bool) -> None:
    """The quick path for a plain positional call agrees with Signature.bind."""
    from starflow.workflow.decorators import definition_of

    @workflow(name=f"sig-{uuid.uuid4().hex[:8]}")
    async def plain(a: int, b: int) -> int:
        return a + b

    @workflow(name=f"sig-kw-{uuid.uuid4().hex[:8]}")
    async def keyword_only(a: int, b: int, *, c: int) -> int:
        return a + b + c

    definition = definition_of(plain)
    if ok:
        definition.check_call(args, kwargs)
    else:
        with pytest.raises(TypeError):
            definition.check_call(args, kwargs)
    with pytest.raises(TypeError):  # two positionals are not enough here: c is required
        definition_of(keyword_only).check_call((1, 2), {})


@workflow(name="bad-input-typed")
async def typed_arg(count: int) -> int:
    return count


@pytest.mark.parametrize("mode", ["run", "start"])
async def test_argument_of_the_wrong_annotated_type(sf: Starflow, spy: SpyAdapter,
                                                    mode: str) -> None:
    """An argument that does not convert to its annotation is rejected before the run exists."""
    begin = sf.run if mode == "run" else sf.start
    with pytest.raises(SerializationError, match="argument 'count' of workflow 'bad-input-typed'"):
        await begin(typed_arg, "not a number")  # type: ignore[arg-type]
    assert spy.calls == []
    assert await sf.list_runs() == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"limit": -1}, "limit must be an int >= 1: -1"),
    ({"limit": 0}, "limit must be an int >= 1: 0"),
    ({"limit": "5"}, "limit must be an int >= 1: '5'"),
    ({"status": "done"}, "status must be one of queued, running, paused, success, error, "
                         "cancelled: 'done'"),
    ({"since": datetime(2030, 1, 1)}, "since must be timezone-aware"),
])
async def test_list_runs_rejects_bad_filters(sf: Starflow, kwargs: dict[str, object],
                                             message: str) -> None:
    """list_runs names a bad filter the same way on every adapter (no driver error, no silence)."""
    await sf.run(echo, 1)
    with pytest.raises(starflow.StarflowError, match=re.escape(message)) as info:
        await sf.list_runs(**kwargs)  # type: ignore[arg-type]
    assert type(info.value) is starflow.InvalidArgument
    assert len(await sf.list_runs(limit=1)) == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_claim_attempts": "3"}, "max_claim_attempts must be an int >= 1: '3'"),
    ({"max_claim_attempts": True}, "max_claim_attempts must be an int >= 1: True"),
    ({"max_claim_attempts": 2.5}, "max_claim_attempts must be an int >= 1: 2.5"),
    ({"storage_retries": None}, "storage_retries must be an int >= 0: None"),
    ({"sqlite_synchronous": "full"}, "sqlite_synchronous must be one of FULL, NORMAL, OFF, "
                                     "EXTRA: 'full'"),
    ({"postgres_synchronous_commit": "yes"}, "postgres_synchronous_commit must be one of on, "
                                             "off, local, remote_write, remote_apply: 'yes'"),
    ({"wake_keys": {"k1": 1234567890123456789}}, "wake key 'k1' must be a string secret"),
    ({"wake_keys": ["k1"]}, "wake_keys must be a dict"),
])
def test_invalid_config_of_the_wrong_type(kwargs: dict[str, object], message: str) -> None:
    """A value of the wrong type is a ConfigError naming it, not a TypeError from a comparison."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        StarflowConfig(**kwargs)  # type: ignore[arg-type]


class TestDefinitionValidation:
    """Decoration and RetryPolicy report every problem at once, as WorkflowDefinitionError."""

    def test_step_pool_is_reported_with_the_other_problems(self) -> None:
        """A bad pool is listed beside the other reasons, not alone after fixing them."""

        def sync_fn() -> None:  # a plain def step is valid (run in a thread)
            return None

        with pytest.raises(WorkflowDefinitionError, match=r"for 2 reason\(s\)") as info:
            step(name="a#b", pool="")(sync_fn)
        assert "must not contain '#'" in str(info.value) and (
            "pool must be a non-empty string" in str(info.value))

    @pytest.mark.parametrize("pool", ["", " ", 3])
    def test_workflow_pool_is_validated(self, pool: object) -> None:
        """@workflow(pool=...) is checked like @step(pool=...)."""

        async def fn() -> None:
            return None

        with pytest.raises(WorkflowDefinitionError, match="pool must be a non-empty string"):
            workflow(name=f"bad-pool-{uuid.uuid4().hex[:8]}", pool=pool)(fn)  # type: ignore[arg-type]

    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"backoff_coefficient": "2"}, "backoff_coefficient must be a number >= 1: '2'"),
        ({"max_attempts": True}, "max_attempts must be an int >= 1: True"),
        ({"non_retryable": (int,)}, "non_retryable must be a tuple of exception types"),
        ({"non_retryable": "ValueError"}, "non_retryable must be a tuple of exception types"),
    ])
    def test_retry_policy_of_the_wrong_type(self, kwargs: dict[str, object],
                                            message: str) -> None:
        """A wrong-typed RetryPolicy field is a WorkflowDefinitionError, not a TypeError."""
        with pytest.raises(WorkflowDefinitionError, match=re.escape(message)):
            starflow.RetryPolicy(**kwargs)  # type: ignore[arg-type]


nonretry_attempts = {"n": 0}


@step(retry=starflow.RetryPolicy(max_attempts=3, initial_interval=timedelta(0),
                                 non_retryable=[PermissionError]))  # type: ignore[arg-type]
async def refused_at_once() -> None:
    nonretry_attempts["n"] += 1
    raise PermissionError("no")


@workflow(name="bad-input-non-retryable-list")
async def non_retryable_list() -> str:
    try:
        await refused_at_once()
    except starflow.StepFailed as exc:
        return exc.error_type
    return "no error"


async def test_non_retryable_given_as_a_list(sf: Starflow) -> None:
    """non_retryable=[Exc] is taken as a tuple: recorded at once, not a TypeError at failure."""
    nonretry_attempts["n"] = 0
    handle = await sf.run(non_retryable_list)
    assert handle.status == "success", handle.error
    assert handle.result == "builtins.PermissionError"
    assert nonretry_attempts["n"] == 1


class TestReplacingVariables:
    """Assigning ``ctx.variables`` keeps the reserved-key guard and the engine's own keys."""

    def test_assignment_refuses_reserved_keys(self) -> None:
        """``ctx.variables = {...}`` with a __celestial key raises, and changes nothing."""
        ctx = starflow.WorkflowContext(run_id="r", workflow="w", variables={"a": 1})
        with pytest.raises(ReservedKeyError, match="__celestialWait"):
            ctx.variables = {"__celestialWait": {"status": "pending"}}
        assert dict(ctx.variables) == {"a": 1}

    def test_clear_and_popitem_leave_engine_keys(self) -> None:
        """clear() and popitem() remove user keys only."""
        ctx = starflow.WorkflowContext(run_id="r", workflow="w", variables={
            "a": 1, "__celestialIdempotency": {"step:x#1": "k"}})
        ctx.variables.clear()
        assert dict(ctx.variables) == {"__celestialIdempotency": {"step:x#1": "k"}}
        ctx.variables["b"] = 2
        assert ctx.variables.popitem() == ("b", 2)
        with pytest.raises(KeyError):
            ctx.variables.popitem()
        assert dict(ctx.variables) == {"__celestialIdempotency": {"step:x#1": "k"}}

    async def test_assigned_variables_survive_a_wait(self, sf: Starflow) -> None:
        """A workflow that replaces its variables can still pause, and keeps them."""

        @workflow(name="bad-input-replace-vars")
        async def replaces() -> object:
            starflow.context().variables = {"mine": 1}
            await wait_for("go")
            return dict(starflow.context().variables)

        handle = await sf.run(replaces)
        assert handle.status == "paused", handle.error
        run = await sf.get_run(handle.run_id)
        assert run.checkpoint_json is not None
        assert run.checkpoint_json["variables"]["mine"] == 1
        done = await sf.signal(handle.run_id, "go")
        assert done.status == "success", done.error
        assert done.result == {"mine": 1}


async def test_run_id_taken_in_another_workspace(db_url: str, adapter_kind: str) -> None:
    """A run id used by another workspace of the database: a StorageError that names the
    run and what to do, the same on every database, and nothing written here."""
    if adapter_kind == "memory":
        pytest.skip("a private in-memory database cannot be shared by two workspaces")
    run_id = str(uuid.uuid4())
    async with Starflow.open(db_url, workspace_id=f"ws-{uuid.uuid4().hex[:12]}",
                             maintenance=False) as first:
        await first.start(echo, 1, run_id=run_id)
    async with Starflow.open(db_url, workspace_id=f"ws-{uuid.uuid4().hex[:12]}",
                             maintenance=False) as second:
        with pytest.raises(starflow.StorageError, match="start the run with a new id") as info:
            await second.start(echo, 2, run_id=run_id)
        assert info.value.run_id == run_id
        assert await second.list_runs() == []


@workflow(name="bad-input-other")
async def other(value: object) -> object:
    return ["other", value]


@pytest.mark.parametrize(("first", "second"), [("run", "run"), ("start", "start"),
                                               ("run", "start"), ("start", "run")])
async def test_run_id_of_another_workflow(sf: Starflow, spy: SpyAdapter, first: str,
                                          second: str) -> None:
    """A run id that already names a run of another workflow: RunIdConflict naming the
    run, both workflows and what to do, raised before anything is written."""
    rid = str(uuid.uuid4())
    handle = await getattr(sf, first)(echo, 1, run_id=rid)
    before = await sf.get_run(rid)
    events = await sf.events(rid)
    spy.units.clear()
    with pytest.raises(starflow.RunIdConflict) as info:
        await getattr(sf, second)(other, 2, run_id=rid)
    err = info.value
    assert err.run_id == rid
    assert err.existing_workflow == "bad-input-echo"
    assert err.requested_workflow == "bad-input-other"
    assert rid in str(err) and "'bad-input-echo'" in str(err) and "'bad-input-other'" in str(err)
    assert "use another run_id" in str(err)
    assert spy.calls == []
    assert await sf.get_run(rid) == before and await sf.events(rid) == events
    assert [r.id for r in await sf.list_runs()] == [handle.run_id]
    with pytest.raises(starflow.RunIdConflict):  # through sf.options too
        await sf.options(run_id=rid).start(other, 3)


async def test_run_id_of_the_same_workflow_with_other_arguments(sf: Starflow) -> None:
    """The same workflow under an existing run id returns that run, whatever the new
    arguments (nothing starts), and logs a warning that they were ignored."""
    rid = str(uuid.uuid4())
    first = await sf.run(echo, 1, run_id=rid)
    with capture_logs() as logs:
        again = await sf.start(echo, 2, run_id=rid)
        same = await sf.run(echo, 1, run_id=rid)
    assert again.run_id == same.run_id == first.run_id and again.result == 1
    assert again.status == "success"
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["run_id"] == rid
    assert "different arguments" in warnings[0]["event"]
    assert len(await sf.list_runs()) == 1


class TestUrlSchemesIgnoreCase:
    """URL schemes are case-insensitive (RFC 3986 3.1), for the database and the warm tier."""

    @pytest.mark.parametrize("scheme", ["SQLITE", "Sqlite", "sqlite"])
    async def test_sqlite(self, scheme: str, tmp_path: Path) -> None:
        """SQLITE:///x.db opens the same file as sqlite:///x.db."""
        path = tmp_path / "mixed.db"
        async with Starflow.open(f"{scheme}:///{path}", maintenance=False) as sf:
            assert (await sf.run(echo, 1)).result == 1
        async with Starflow.open(f"sqlite:///{path}", maintenance=False) as sf:
            assert len(await sf.list_runs()) == 1

    @pytest.mark.parametrize("url", ["MEMORY://", "Memory://", "NULL://"])
    async def test_memory_and_null(self, url: str) -> None:
        """memory:// and null:// in any case."""
        async with Starflow.open(url, maintenance=False) as sf:
            assert (await sf.run(echo, 2)).status == "success"

    @pytest.mark.parametrize("scheme", ["POSTGRESQL", "Postgres"])
    async def test_postgres(self, scheme: str) -> None:
        """POSTGRESQL://… and Postgres://… connect like postgresql://…."""
        require_postgres()
        url = scheme + POSTGRES_URL[POSTGRES_URL.index(":"):]
        async with Starflow.open(url, workspace_id=f"ws-{uuid.uuid4().hex[:12]}",
                                 maintenance=False) as sf:
            assert (await sf.run(echo, 3)).result == 3

    @pytest.mark.parametrize("url", ["mysql://x", "MYSQL://x", "starflow.db"])
    def test_unknown_scheme_lists_the_valid_ones(self, url: str) -> None:
        """A scheme that is not one of ours, in any case, names every valid one."""
        with pytest.raises(ConfigError) as info:
            Starflow.open(url)
        for valid in ("sqlite:///path.db", "memory://", "postgresql://", "null://"):
            assert valid in str(info.value), valid
