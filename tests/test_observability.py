"""Tracing, metrics and log binding at the runtime's boundaries (starflow.observability)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator, MutableMapping
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest
import structlog

import starflow
from starflow import (
    ConfigError,
    RetryPolicy,
    Starflow,
    StarflowConfig,
    SystemClock,
    step,
    wait_for,
    workflow,
)
from starflow import observability as obs
from starflow.logs import bound, get_logger
from starflow_testing import WorkflowEnvironment

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")
prometheus_client = pytest.importorskip("prometheus_client")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402


class OffsetClock(SystemClock):
    """System time shifted by ``offset``, to make a live run's lease look expired.

    Its sleeps are real, but the only one started (the 10 s heartbeat) is
    cancelled long before it ends: the test using it finishes first.
    """

    def __init__(self) -> None:
        self.offset = timedelta()

    def now(self) -> datetime:
        return super().now() + self.offset


#: Per-test coordination between a test and the step it drives.
gates: dict[str, anyio.Event] = {}
flaky_calls: list[int] = []


@step(name="obs-flaky", retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=1)))
async def flaky(x: int) -> int:
    flaky_calls.append(x)
    if len(flaky_calls) < 2:
        raise RuntimeError("transient")
    return x * 2


@step(name="obs-add")
async def add(a: int, b: int) -> int:
    structlog.get_logger("user").info("adding", a=a, b=b)
    return a + b


@step(name="obs-boom")
async def boom() -> None:
    raise ValueError("no")


@step(name="obs-block")
async def block() -> str:
    gates["started"].set()
    await gates["release"].wait()
    return "done"


@workflow(name="obs-compute")
async def compute(x: int) -> int:
    doubled = await flaky(x)
    return await add(doubled, 1)


@workflow(name="obs-approve")
async def approve(x: int) -> int:
    y = await add(x, 1)
    decision = await wait_for("ok")
    return y if decision else 0


@workflow(name="obs-fail")
async def fail() -> None:
    await boom()


@workflow(name="obs-hold")
async def hold() -> str:
    return await block()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    flaky_calls.clear()
    gates.clear()
    gates["started"] = anyio.Event()
    gates["release"] = anyio.Event()
    yield
    obs.disable()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    obs.enable_tracing(provider)
    return exporter


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    obs.enable_metrics(registry)
    return registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def app(clock: OffsetClock | None = None) -> Any:
    """An application for the test: on a fake clock with time skipping (retry delays
    pass instantly, nothing sleeps for real), or on ``clock`` when a test shifts time."""
    if clock is not None:
        return Starflow.open("memory://", clock=clock, maintenance=False)
    return WorkflowEnvironment("memory", patch_time=False)


class TestTracing:
    """A span per engine execution and per step attempt, with run and node ids."""

    async def test_run_and_step_attempt_spans(self, spans: InMemorySpanExporter) -> None:
        """Each attempt gets a starflow.step span under the run's starflow.run span."""
        async with app() as sf:
            handle = await sf.run(compute, 4)
        assert handle.result == 9
        finished = spans.get_finished_spans()
        runs = [s for s in finished if s.name == "starflow.run"]
        steps = [s for s in finished if s.name == "starflow.step"]
        assert len(runs) == 1
        run = runs[0]
        assert run.attributes is not None
        assert run.attributes["starflow.run_id"] == handle.run_id
        assert run.attributes["starflow.workflow"] == "obs-compute"
        assert run.attributes["starflow.outcome"] == "success"
        assert run.attributes["starflow.replay"] is False
        got = [(s.attributes["starflow.node_id"], s.attributes["starflow.attempt"],
                s.status.status_code) for s in steps if s.attributes is not None]
        assert got == [("step:obs-flaky#1", 1, StatusCode.ERROR),
                       ("step:obs-flaky#1", 2, StatusCode.UNSET),
                       ("step:obs-add#1", 1, StatusCode.UNSET)]
        for s in steps:
            assert s.parent is not None and s.parent.span_id == run.context.span_id
            assert s.attributes is not None
            assert s.attributes["starflow.run_id"] == handle.run_id
        assert steps[0].events and steps[0].events[0].name == "exception"

    async def test_replay_does_not_trace_recorded_steps(
            self, spans: InMemorySpanExporter) -> None:
        """A resumed execution is a second run span, marked replay, without the recorded step."""
        async with app() as sf:
            handle = await sf.run(approve, 1)
            assert handle.status == "paused"
            handle = await sf.signal(handle.run_id, "ok", True)
        assert handle.result == 2
        finished = spans.get_finished_spans()
        runs = [s for s in finished if s.name == "starflow.run"]
        assert [(s.attributes or {}).get("starflow.outcome") for s in runs] == [
            "paused", "success"]
        assert [(s.attributes or {}).get("starflow.replay") for s in runs] == [False, True]
        assert len([s for s in finished if s.name == "starflow.step"]) == 1

    async def test_failed_run_span_has_error_status(self, spans: InMemorySpanExporter) -> None:
        """A run that ends in error marks its span ERROR."""
        async with app() as sf:
            handle = await sf.run(fail)
        assert handle.status == "error"
        (run,) = [s for s in spans.get_finished_spans() if s.name == "starflow.run"]
        assert run.status.status_code is StatusCode.ERROR
        assert (run.attributes or {})["starflow.outcome"] == "error"

    async def test_global_provider_is_picked_up(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An application's global tracer provider is used without enable_tracing."""
        from opentelemetry import trace

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
        async with app() as sf:
            await sf.run(compute, 1)
        assert {s.name for s in exporter.get_finished_spans()} == {"starflow.run",
                                                                   "starflow.step"}


class TestMetrics:
    """Prometheus collectors: runs by status, step latency, leases, sweep."""

    async def test_runs_and_step_latency(self, registry: CollectorRegistry) -> None:
        """Executions are counted by outcome; each step attempt is observed."""
        async with app() as sf:
            await sf.run(compute, 2)
            await sf.run(fail)
            handle = await sf.run(approve, 1)
            await sf.signal(handle.run_id, "ok", True)
        assert sample(registry, "starflow_runs_total", workflow="obs-compute",
                      status="success") == 1
        assert sample(registry, "starflow_runs_total", workflow="obs-fail", status="error") == 1
        assert sample(registry, "starflow_runs_total", workflow="obs-approve",
                      status="paused") == 1
        assert sample(registry, "starflow_runs_total", workflow="obs-approve",
                      status="success") == 1
        assert sample(registry, "starflow_active_runs") == 0
        assert sample(registry, "starflow_step_attempt_duration_seconds_count",
                      step="obs-flaky", outcome="failure") == 1
        assert sample(registry, "starflow_step_attempt_duration_seconds_count",
                      step="obs-flaky", outcome="success") == 1
        assert sample(registry, "starflow_step_attempt_duration_seconds_count",
                      step="obs-add", outcome="success") == 2

    async def test_lease_refreshes_and_cancel_counted(self, registry: CollectorRegistry) -> None:
        """Heartbeats count refreshes; a cancel mid-step counts a lost lease."""
        config = StarflowConfig(heartbeat_interval=timedelta(seconds=1))
        async with WorkflowEnvironment("memory", config=config, patch_time=False) as sf:
            clock = sf.clock
            result: dict[str, Any] = {}

            async def drive() -> None:
                result["handle"] = await sf.run(hold)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                await gates["started"].wait()
                await clock.advance(timedelta(seconds=2))  # two heartbeats
                assert sample(registry, "starflow_lease_refreshes_total", result="ok") == 2
                (run,) = await sf.list_runs()
                await sf.cancel(run.id, force=True)
        assert result["handle"].status == "cancelled"
        assert sample(registry, "starflow_leases_lost_total") == 1
        assert sample(registry, "starflow_runs_total", workflow="obs-hold",
                      status="lease_lost") == 1
        assert sample(registry, "starflow_active_runs") == 0

    async def test_sweep_actions_counted(self, registry: CollectorRegistry) -> None:
        """A run whose lease expired is counted by the sweep action taken."""
        clock = OffsetClock()
        clock.offset = -timedelta(hours=1)  # the run's lease expires an hour ago
        async def run_and_lose_lease(sf: Starflow) -> None:
            with pytest.raises(starflow.LeaseLostError):
                await sf.run(hold)

        async with app(clock) as sf, anyio.create_task_group() as tg:
            tg.start_soon(run_and_lose_lease, sf)
            await gates["started"].wait()
            clock.offset = timedelta()
            assert await sf.sweep() == 1
            gates["release"].set()  # the step ends; its write finds the lease gone
        actions = sum(sample(registry, "starflow_sweep_actions_total", action=a)
                      for a in ("requeued", "abandoned"))
        assert actions == 1
        assert sample(registry, "starflow_leases_lost_total") == 1

    def test_outbox_lag_hook_sets_every_bucket(self, registry: CollectorRegistry) -> None:
        """set_outbox_lag publishes each age bucket, 0 for the missing ones."""
        obs.set_outbox_lag({"lt_1s": 4, "gt_30s": 1})
        assert {b: sample(registry, "starflow_outbox_lag_rows", age_bucket=b)
                for b in obs.OUTBOX_AGE_BUCKETS} == {"lt_1s": 4, "1s_2s": 0, "2s_30s": 0,
                                                     "gt_30s": 1}

    def test_enable_metrics_is_idempotent_per_registry(self) -> None:
        """Enabling twice on one registry returns the same collectors (no duplicates)."""
        registry = CollectorRegistry()
        assert obs.enable_metrics(registry) is obs.enable_metrics(registry)


class TestDisabled:
    """Nothing enabled: no-op hooks, no optional import, a clear message if missing."""

    def test_noop_when_nothing_enabled(self) -> None:
        """current() is the shared no-op; its context managers do nothing."""
        active = obs.current()
        assert not active.enabled
        assert active is obs.current()

    def test_optional_packages_are_not_imported(self) -> None:
        """Running a workflow imports neither opentelemetry nor prometheus_client."""
        code = textwrap.dedent("""
            import sys, anyio
            from starflow import Starflow, step, workflow

            @step
            async def one() -> int:
                return 1

            @workflow
            async def wf() -> int:
                return await one()

            async def main() -> None:
                async with Starflow.open("memory://", maintenance=False) as sf:
                    assert (await sf.run(wf)).result == 1

            anyio.run(main)
            loaded = [m for m in sys.modules
                      if m.startswith(("opentelemetry", "prometheus_client"))]
            assert not loaded, loaded
            print("ok")
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True)
        assert out.stdout.strip() == "ok"

    def test_missing_package_message(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Enabling without the package raises ConfigError naming the extra."""
        monkeypatch.setitem(sys.modules, "prometheus_client", None)
        with pytest.raises(ConfigError, match=r"starflow-durable\[metrics\]"):
            obs.enable_metrics()
        monkeypatch.setitem(sys.modules, "opentelemetry", None)
        with pytest.raises(ConfigError, match=r"starflow-durable\[otel\]"):
            obs.enable_tracing()


class TestLogBinding:
    """Logs inside a step carry its run_id and node_id."""

    @pytest.fixture
    def captured(self) -> Iterator[list[MutableMapping[str, Any]]]:
        capture = structlog.testing.LogCapture()
        structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
        try:
            yield capture.entries
        finally:
            structlog.reset_defaults()

    async def test_user_logs_in_a_step_carry_node_id(
            self, captured: list[MutableMapping[str, Any]]) -> None:
        """structlog calls in step code get run_id and node_id; none leaks past the step."""
        async with app() as sf:
            handle = await sf.run(compute, 3)
        (entry,) = [e for e in captured if e["event"] == "adding"]
        assert entry["run_id"] == handle.run_id
        assert entry["node_id"] == "step:obs-add#1"
        assert structlog.contextvars.get_contextvars() == {}

    def test_starflow_logger_merges_bound_values(self) -> None:
        """starflow's own records inside bound() carry the bound values."""
        from starflow_testing import capture_logs

        with capture_logs() as records:
            with bound(run_id="r", node_id="step:x#1"):
                get_logger("starflow.test").debug("inside")
            get_logger("starflow.test").debug("outside")
        inside, outside = records
        assert (inside["run_id"], inside["node_id"]) == ("r", "step:x#1")
        assert "node_id" not in outside
