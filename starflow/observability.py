"""Optional tracing (OpenTelemetry) and metrics (Prometheus) at the runtime's boundaries.

The engine and the runner call one :class:`Observability` object, which
:func:`current` returns. With neither package in use it does nothing: every
hook is a method call returning a shared no-op, and nothing optional is
imported.

Tracing follows the OpenTelemetry rule for libraries: starflow calls the API,
the application chooses the SDK. As soon as the application has installed a
tracer provider (``opentelemetry.trace.set_tracer_provider``), each engine
execution gets a ``starflow.run`` span and each step attempt a
``starflow.step`` span inside it, with ``starflow.run_id`` and
``starflow.node_id`` attributes. :func:`enable_tracing` picks a provider
explicitly instead (tests, or an application that keeps its provider local).

Metrics are opt-in, because registering collectors is a side effect:
:func:`enable_metrics` registers starflow's collectors in a Prometheus
``CollectorRegistry`` (the default one unless given) and returns them.

Install the extras with ``pip install 'starflow-durable[otel]'`` and
``pip install 'starflow-durable[metrics]'``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .clock import monotonic
from .errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .records import QueueStats

__all__ = [
    "OUTBOX_AGE_BUCKETS",
    "STEP_BUCKETS",
    "Execution",
    "Observability",
    "RunScope",
    "StarflowMetrics",
    "current",
    "current_traceparent",
    "disable",
    "enable_metrics",
    "enable_tracing",
    "set_outbox_lag",
    "set_queue_stats",
]

#: Histogram buckets of ``starflow_step_attempt_duration_seconds`` (steps call
#: the outside world: from milliseconds to an hour).
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                300.0, 900.0, 3600.0)

#: The ``age_bucket`` labels of ``starflow_outbox_lag_rows``; the state model
#: alerts at more than 2 s of lag and pages at more than 30 s.
OUTBOX_AGE_BUCKETS = ("lt_1s", "1s_2s", "2s_30s", "gt_30s")


@dataclass(frozen=True, slots=True)
class RunScope:
    """What the observers know about one engine execution."""

    run_id: str
    workflow: str
    version: int
    runner_id: str
    workspace: str
    env: str
    #: True when the execution starts by replaying recorded history (a resume
    #: or a run another runner started).
    replay: bool
    #: The W3C ``traceparent`` stored with the run when it started: every
    #: execution's ``starflow.run`` span continues that trace (None: a root span).
    traceparent: str | None = None


class StarflowMetrics:
    """starflow's Prometheus collectors, registered in one registry.

    Attributes:
        runs: ``starflow_runs_total{workflow, status}``: engine executions by
            how they ended (``success``, ``error``, ``paused``, ``lease_lost``,
            ``storage``, ``cancelled``, ``released``, or ``interrupted`` when
            the caller cancelled it).
        active_runs: ``starflow_active_runs``: executions in progress in this process.
        step_attempts: ``starflow_step_attempt_duration_seconds{step, outcome}``:
            latency of each step attempt (``success`` or ``failure``).
        lease_refreshes: ``starflow_lease_refreshes_total{result}``: heartbeat
            refreshes (``ok`` or ``failed``; a failure is retried, not fatal).
        leases_lost: ``starflow_leases_lost_total``: executions that found their
            lease taken (by another runner, the sweep, or a cancel).
        sweep_actions: ``starflow_sweep_actions_total{action}``: runs the lease
            sweep acted on (``requeued`` or ``abandoned``).
        outbox_lag: ``starflow_outbox_lag_rows{age_bucket}``: unapplied
            ``mirror_outbox`` rows by age, set by the drainer through
            :func:`set_outbox_lag`.
        queue_depth: ``starflow_queue_depth{pool}``: queued runs a worker may
            claim now (not those started for later, nor debounced ones not yet
            due), read by workers every ``queue_metrics_interval`` through
            :func:`set_queue_stats`. ``pool=""``: runs queued for no pool.
        queue_oldest_age: ``starflow_queue_oldest_age_seconds{pool}``: how long
            the longest-waiting of those has been queued (0 with none).
        runs_running: ``starflow_runs_running{pool}``: runs executing now in
            every process (claimed or running).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = registry
        self.runs = Counter("starflow_runs", "Engine executions by how they ended.",
                            ["workflow", "status"], registry=registry)
        self.active_runs = Gauge("starflow_active_runs",
                                 "Engine executions in progress in this process.",
                                 registry=registry)
        self.step_attempts = Histogram("starflow_step_attempt_duration_seconds",
                                       "Latency of one step attempt.", ["step", "outcome"],
                                       buckets=STEP_BUCKETS, registry=registry)
        self.lease_refreshes = Counter("starflow_lease_refreshes",
                                       "Heartbeat lease refreshes by result.", ["result"],
                                       registry=registry)
        self.leases_lost = Counter("starflow_leases_lost",
                                   "Executions that found their lease taken.", registry=registry)
        self.sweep_actions = Counter("starflow_sweep_actions",
                                     "Runs the lease sweep requeued or abandoned.", ["action"],
                                     registry=registry)
        self.outbox_lag = Gauge("starflow_outbox_lag_rows",
                                "Unapplied mirror_outbox rows by age bucket.", ["age_bucket"],
                                registry=registry)
        self.queue_depth = Gauge("starflow_queue_depth",
                                 "Queued runs claimable now, per pool.", ["pool"],
                                 registry=registry)
        self.queue_oldest_age = Gauge("starflow_queue_oldest_age_seconds",
                                      "Age of the oldest claimable queued run, per pool.",
                                      ["pool"], registry=registry)
        self.runs_running = Gauge("starflow_runs_running",
                                  "Runs executing now (all processes), per pool.", ["pool"],
                                  registry=registry)


class Execution:
    """One engine execution as the observers see it; :meth:`finish` records its outcome."""

    __slots__ = ("_metrics", "_span", "_status", "_workflow")

    def __init__(self, workflow: str, metrics: StarflowMetrics | None, span: Any) -> None:
        self._workflow = workflow
        self._metrics = metrics
        self._span = span
        self._status: str | None = None

    def finish(self, status: str, error: str | None = None) -> None:
        """Record how the execution ended (an ``Outcome.status``)."""
        self._status = status
        if self._span is not None:
            self._span.set_attribute("starflow.outcome", status)
            if status in ("error", "storage", "lease_lost"):
                from opentelemetry.trace import Status, StatusCode

                self._span.set_status(Status(StatusCode.ERROR, error or status))

    def _close(self) -> None:
        if self._metrics is not None:
            self._metrics.runs.labels(self._workflow, self._status or "interrupted").inc()
            self._metrics.active_runs.dec()


class _NoopExecution(Execution):
    def finish(self, status: str, error: str | None = None) -> None:
        pass


_NOOP_EXECUTION = _NoopExecution("", None, None)
_NULL: contextlib.nullcontext[Any] = contextlib.nullcontext()


class Observability:
    """The hooks the engine and runner call at their boundaries.

    Obtain the active one with :func:`current`; an instance with neither a
    tracer nor metrics does nothing.
    """

    __slots__ = ("metrics", "tracer")

    def __init__(self, tracer: Any = None, metrics: StarflowMetrics | None = None) -> None:
        self.tracer = tracer
        self.metrics = metrics

    @property
    def enabled(self) -> bool:
        return self.tracer is not None or self.metrics is not None

    def execution(self, scope: RunScope) -> contextlib.AbstractContextManager[Execution]:
        """Around one engine execution: a ``starflow.run`` span, run counters."""
        if not self.enabled:
            return contextlib.nullcontext(_NOOP_EXECUTION)
        return self._execution(scope)

    @contextlib.contextmanager
    def _execution(self, scope: RunScope) -> Iterator[Execution]:
        metrics = self.metrics
        if metrics is not None:
            metrics.active_runs.inc()
        with contextlib.ExitStack() as stack:
            span = None
            if self.tracer is not None:
                span = stack.enter_context(self.tracer.start_as_current_span(
                    "starflow.run", context=_parent_context(scope.traceparent),
                    attributes={
                        "starflow.run_id": scope.run_id,
                        "starflow.workflow": scope.workflow,
                        "starflow.workflow_version": scope.version,
                        "starflow.runner_id": scope.runner_id,
                        "starflow.workspace": scope.workspace,
                        "starflow.env": scope.env,
                        "starflow.replay": scope.replay,
                    },
                ))
            execution = Execution(scope.workflow, metrics, span)
            try:
                yield execution
            finally:
                execution._close()

    def step_attempt(self, run_id: str, node_id: str, step: str,
                     attempt: int) -> contextlib.AbstractContextManager[Any]:
        """Around one attempt of a step handler: a ``starflow.step`` span, its latency."""
        if not self.enabled:
            return _NULL
        return self._step_attempt(run_id, node_id, step, attempt)

    @contextlib.contextmanager
    def _step_attempt(self, run_id: str, node_id: str, step: str, attempt: int
                      ) -> Iterator[None]:
        started = monotonic()
        outcome = "failure"
        with contextlib.ExitStack() as stack:
            if self.tracer is not None:
                stack.enter_context(self.tracer.start_as_current_span(
                    "starflow.step",
                    attributes={"starflow.run_id": run_id, "starflow.node_id": node_id,
                                "starflow.step": step, "starflow.attempt": attempt},
                ))
            try:
                yield
                outcome = "success"
            finally:
                if self.metrics is not None:
                    self.metrics.step_attempts.labels(step, outcome).observe(
                        monotonic() - started)

    def lease_refreshed(self, ok: bool) -> None:
        """A heartbeat refreshed the lease (``ok``) or failed to write (it retries)."""
        if self.metrics is not None:
            self.metrics.lease_refreshes.labels("ok" if ok else "failed").inc()

    def lease_lost(self) -> None:
        """An execution found its lease taken and stopped writing."""
        if self.metrics is not None:
            self.metrics.leases_lost.inc()

    def sweep_action(self, action: str) -> None:
        """The lease sweep requeued or abandoned one run."""
        if self.metrics is not None:
            self.metrics.sweep_actions.labels(action).inc()

    def outbox_lag(self, rows_by_age: Mapping[str, int]) -> None:
        """Set the outbox-lag gauge; see :func:`set_outbox_lag`."""
        if self.metrics is not None:
            for bucket in OUTBOX_AGE_BUCKETS:
                self.metrics.outbox_lag.labels(bucket).set(rows_by_age.get(bucket, 0))


    def queue_stats(self, stats: Iterable[QueueStats], now: datetime) -> None:
        """Set the queue gauges; see :func:`set_queue_stats`."""
        metrics = self.metrics
        if metrics is None:
            return
        seen: set[str] = set()
        for s in stats:
            pool = s.pool or ""
            seen.add(pool)
            age = (max(0.0, (now - s.oldest_queued_at).total_seconds())
                   if s.queued and s.oldest_queued_at is not None else 0.0)
            metrics.queue_depth.labels(pool).set(s.queued)
            metrics.queue_oldest_age.labels(pool).set(age)
            metrics.runs_running.labels(pool).set(s.running)
        # A pool that emptied reads 0 (not its last value) until the process ends.
        for gauge in (metrics.queue_depth, metrics.queue_oldest_age, metrics.runs_running):
            for (pool,) in list(_label_values(gauge)):
                if pool not in seen:
                    gauge.labels(pool).set(0)


def _label_values(gauge: Any) -> list[tuple[str, ...]]:
    """The label values a labelled gauge has children for."""
    return [tuple(sample.labels.values()) for metric in gauge.collect()
            for sample in metric.samples]


# -- the active instance ---------------------------------------------------------

_NOOP = Observability()


class _State:
    explicit_tracer: Any = None
    metrics: StarflowMetrics | None = None
    #: (provider id, tracer) of the global provider seen last.
    auto: tuple[int, Any] | None = None
    active: Observability = _NOOP


def _global_tracer() -> Any:
    """The tracer of the application's global provider, or None if it set none.

    An application that configured OpenTelemetry has imported
    ``opentelemetry.trace``; if it is not in ``sys.modules`` there is nothing
    to look up, and nothing is imported.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    cached = _State.auto
    if cached is not None and cached[0] == id(provider):
        return cached[1]
    tracer = provider.get_tracer("starflow", _version())
    _State.auto = (id(provider), tracer)
    return tracer


def _version() -> str:
    return __version__


def _parent_context(traceparent: str | None) -> Any:
    """The OpenTelemetry context a stored ``traceparent`` names (None: the current one)."""
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current in the caller, if any.

    Read when a run starts (``sf.run`` / ``sf.start``) and stored with the run,
    so that every execution and wake of the run continues the caller's trace.
    None when OpenTelemetry is not imported by the application or no span is
    recording: importing starflow never imports it.
    """
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def current() -> Observability:
    """The observability hooks in effect now (a no-op unless something is enabled)."""
    tracer = _State.explicit_tracer if _State.explicit_tracer is not None else _global_tracer()
    active = _State.active
    if active.tracer is not tracer or active.metrics is not _State.metrics:
        active = _State.active = (Observability(tracer, _State.metrics)
                                  if tracer is not None or _State.metrics is not None else _NOOP)
    return active


def enable_tracing(tracer_provider: Any = None) -> None:
    """Trace with ``tracer_provider`` (default: the global one, even if set later).

    Not needed when the application sets a global provider: starflow picks it
    up. Use it to trace with a provider that is not the global one.

    Raises:
        ConfigError: ``opentelemetry-api`` is not installed.
    """
    try:
        from opentelemetry import trace
    except ImportError:
        raise ConfigError("tracing needs opentelemetry-api: install it with "
                          "pip install 'starflow-durable[otel]'") from None
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    _State.explicit_tracer = provider.get_tracer("starflow", _version())


def enable_metrics(registry: CollectorRegistry | None = None) -> StarflowMetrics:
    """Register starflow's Prometheus collectors and start updating them.

    Args:
        registry: Where to register (default: ``prometheus_client.REGISTRY``,
            which ``prometheus_client.start_http_server`` exposes).

    Returns:
        The collectors. Calling it again with the same registry returns the
        same collectors; with another registry it moves to that one.

    Raises:
        ConfigError: ``prometheus-client`` is not installed.
    """
    try:
        import prometheus_client
    except ImportError:
        raise ConfigError("metrics need prometheus-client: install it with "
                          "pip install 'starflow-durable[metrics]'") from None
    target = registry if registry is not None else prometheus_client.REGISTRY
    if _State.metrics is not None and _State.metrics.registry is target:
        return _State.metrics
    _State.metrics = StarflowMetrics(target)
    return _State.metrics


def disable() -> None:
    """Stop explicit tracing and metrics (a global tracer provider is still used)."""
    _State.explicit_tracer = None
    _State.metrics = None
    _State.auto = None


def set_outbox_lag(rows_by_age: Mapping[str, int]) -> None:
    """Publish outbox lag: unapplied ``mirror_outbox`` rows per age bucket.

    The outbox drainer calls this after each pass with counts keyed by
    :data:`OUTBOX_AGE_BUCKETS` (missing buckets are set to 0). It is the
    state model's drift signal: climbing lag means the warm tier drifts.
    """
    current().outbox_lag(rows_by_age)


def set_queue_stats(stats: Iterable[QueueStats], now: datetime) -> None:
    """Publish the queue per pool (``adapter.queue_stats``), ages as of ``now``.

    Workers call this every ``queue_metrics_interval`` when metrics are
    enabled: ``starflow_queue_depth``, ``starflow_queue_oldest_age_seconds``
    and ``starflow_runs_running``, labelled by pool. Pools missing from
    ``stats`` are set to 0.
    """
    current().queue_stats(stats, now)
