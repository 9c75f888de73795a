"""Trace context: a run continues the trace of the span that started it, on every execution."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from starflow import observability as obs
from starflow import step, wait_for, workflow
from starflow_testing import WorkflowEnvironment

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


@step
async def traced_add(a: int) -> int:
    return a + 1


@workflow(name="traced-flow")
async def traced(a: int) -> int:
    b = await traced_add(a)
    ok = await wait_for("go")
    return b if ok else 0


@pytest.fixture
def tracing() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    obs.enable_tracing(provider)
    yield exporter, provider
    obs.disable()


class TestTraceContext:
    """The starting span's traceparent is stored with the run and continued on each wake."""

    async def test_queued_run_and_its_wake_continue_the_callers_trace(
            self, tracing: tuple[InMemorySpanExporter, TracerProvider]) -> None:
        """sf.start inside a request span; the worker's execution and the resumed one
        are children of that span, though they run elsewhere and later."""
        exporter, provider = tracing
        tracer = provider.get_tracer("app")
        async with WorkflowEnvironment() as env:
            with tracer.start_as_current_span("POST /orders") as request:
                handle = await env.start(traced, 1)
            parent = request.get_span_context()
            run = await env.get_run(handle.run_id)
            stored = run.input_json["trace"]["traceparent"]
            assert stored.startswith(f"00-{parent.trace_id:032x}-{parent.span_id:016x}-")
            assert run.input_json["args"] == [1]
            await env.run_until_idle()
            assert (await env.get_run(handle.run_id)).status == "paused"
            await env.signal(handle.run_id, "go", True)  # outside any span
            assert await env.result(handle.run_id) == 2
        runs = [s for s in exporter.get_finished_spans() if s.name == "starflow.run"]
        assert len(runs) == 2
        for span in runs:
            assert span.context.trace_id == parent.trace_id
            assert span.parent is not None and span.parent.span_id == parent.span_id
        steps = [s for s in exporter.get_finished_spans() if s.name == "starflow.step"]
        assert steps and all(s.context.trace_id == parent.trace_id for s in steps)

    async def test_without_a_span_nothing_is_stored(
            self, tracing: tuple[InMemorySpanExporter, TracerProvider]) -> None:
        """A run started outside any span stores no trace and its span is a root."""
        exporter, _ = tracing
        async with WorkflowEnvironment() as env:
            handle = await env.run(traced, 1)
            run = await env.get_run(handle.run_id)
            assert run.input_json == {"args": [1], "kwargs": {}}
        (span,) = [s for s in exporter.get_finished_spans() if s.name == "starflow.run"]
        assert span.parent is None

    async def test_idempotent_start_ignores_the_trace(
            self, tracing: tuple[InMemorySpanExporter, TracerProvider],
            caplog: pytest.LogCaptureFixture) -> None:
        """Starting the same run id again from another span is not 'different arguments'."""
        _, provider = tracing
        tracer = provider.get_tracer("app")
        run_id = "5b0c1d0e-8f1e-4a55-9d43-0f7c6f1f2a10"
        async with WorkflowEnvironment() as env:
            with tracer.start_as_current_span("first"):
                first = await env.app.options(run_id=run_id).start(traced, 1)
            with tracer.start_as_current_span("second"):
                again = await env.app.options(run_id=run_id).start(traced, 1)
            assert first.run_id == again.run_id
        assert "different arguments" not in caplog.text
