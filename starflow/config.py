"""Runtime configuration: a frozen, validated msgspec Struct."""

from __future__ import annotations

import os
import typing
from datetime import timedelta
from typing import Literal

import msgspec

from .errors import ConfigError
from .limits import duration_problem

__all__ = ["StarflowConfig", "check_concurrency", "int_problem"]

SqliteSynchronous = Literal["FULL", "NORMAL", "OFF", "EXTRA"]
PostgresSynchronousCommit = Literal["on", "off", "local", "remote_write", "remote_apply"]
LostRuns = Literal["requeue", "fail"]


_SQLITE_SYNCHRONOUS = typing.get_args(SqliteSynchronous)
_POSTGRES_SYNCHRONOUS_COMMIT = typing.get_args(PostgresSynchronousCommit)
_LOST_RUNS = typing.get_args(LostRuns)


class StarflowConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Timing and behaviour of the runtime. Defaults are the state model's numbers.

    Attributes:
        lease_ttl: How long a runner's lease lasts without a refresh (30 s).
        heartbeat_interval: How often a running engine refreshes its lease (10 s).
            Must be shorter than ``lease_ttl``.
        sweep_interval: How often the lease sweep runs (30 s).
        max_claim_attempts: Claims a run may use before an expired lease abandons
            it instead of requeueing it (3). The lost execution of a run started
            with ``sf.run`` (inline) counts as one.
        lost_runs: What the lease sweep does with a run whose runner was lost:
            ``"requeue"`` (ADR-047: back to the queue for a worker, until
            ``max_claim_attempts``) or ``"fail"`` (the seed's outcome: status
            error, claim_state abandoned, error ``runner_lost``, at once).
        stuck_after: A run queued this long without being claimed is *stuck*
            (no worker can take it): the sweep warns and ``starflow runs list
            --stuck`` lists it (5 min).
        poll_interval: How often workers and the timer loop poll when nothing
            notifies them (1 s).
        wake_keys: HMAC keys for wake tokens, ``{key_id: secret}``. The first key
            signs; all of them verify (rotation). Empty: a per-database key is
            generated and stored on first use.
        wake_token_ttl: Lifetime of a wake token when the wait has no deadline (30 days).
        sqlite_synchronous: SQLite ``PRAGMA synchronous`` for durable commits.
        sqlite_inline_commits: Let a run writing alone commit on the event loop's
            thread instead of hopping to the database thread and back (about
            0.1 ms saved per boundary; the loop waits for the flush meanwhile).
            Set False where the loop must never wait for a disk flush.
        postgres_synchronous_commit: Postgres ``synchronous_commit`` for durable commits.
        fused_boundaries: Commit a step's ``node_complete`` in one transaction with
            the run's next boundary (the next ``node_start``, the pause, the run's
            end) instead of on its own: one commit per step instead of two, every
            commit flushed before anything the step's outcome could affect runs.
            A crash between the step and that boundary runs the step again, as a
            crash just before its ``node_complete`` does (at-least-once either
            way). False: a commit per boundary, as the seed's table lists them.
        storage_retries: How many times a failed boundary write is retried
            before the runner gives up on the run (the sweep then recovers it).
        session_var_gc_interval: How often maintenance deletes expired session vars.
        outbox_retention: How long applied ``mirror_outbox`` rows are kept.
        drift_sweep_interval: How often the warm tier is hash-compared with cold.
        cancel_cleanup_timeout: How long a cancelled run's ``except RunCancelled`` /
            ``finally`` code may run (per execution) before it is cut short and the
            run ends in ``error`` (5 min).
        warm_finished_ttl: How long the Redis warm tier keeps a run after it
            ended (success, error, cancelled): its keys then expire (24 h). Cold
            keeps the run; the warm tier serves live views.
        retention: How long ended runs (success, error, cancelled) are kept after
            they end; maintenance prunes older ones with their events, waits,
            signals, outbox rows, jobs and session vars (``sf.prune``). None
            (the default): keep every run forever.
        prune_interval: How often maintenance prunes when ``retention`` is set (1 h).
        sync_step_threads: How many plain ``def`` steps (run in worker threads)
            may run at once in this application (40, anyio's default thread
            count); more wait for a free thread. Async steps do not count.
        sync_workflow_threads: How many plain ``def`` workflows may execute at once
            in this application, each in a worker thread (40); more wait for a
            free thread. A run paused at a durable wait holds none. Counted apart
            from ``sync_step_threads``, so a workflow's thread never takes the
            one its plain steps need.
    """

    lease_ttl: timedelta = timedelta(seconds=30)
    heartbeat_interval: timedelta = timedelta(seconds=10)
    sweep_interval: timedelta = timedelta(seconds=30)
    max_claim_attempts: int = 3
    lost_runs: LostRuns = "requeue"
    stuck_after: timedelta = timedelta(minutes=5)
    poll_interval: timedelta = timedelta(seconds=1)
    wake_keys: dict[str, str] = msgspec.field(default_factory=dict)
    wake_token_ttl: timedelta = timedelta(days=30)
    sqlite_synchronous: SqliteSynchronous = "FULL"
    sqlite_inline_commits: bool = True
    postgres_synchronous_commit: PostgresSynchronousCommit = "on"
    fused_boundaries: bool = True
    storage_retries: int = 3
    session_var_gc_interval: timedelta = timedelta(seconds=60)
    outbox_retention: timedelta = timedelta(hours=1)
    drift_sweep_interval: timedelta = timedelta(seconds=30)
    cancel_cleanup_timeout: timedelta = timedelta(minutes=5)
    warm_finished_ttl: timedelta = timedelta(hours=24)
    retention: timedelta | None = None
    prune_interval: timedelta = timedelta(hours=1)
    sync_step_threads: int = 40
    sync_workflow_threads: int = 40

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in (
            "lease_ttl",
            "heartbeat_interval",
            "sweep_interval",
            "poll_interval",
            "wake_token_ttl",
            "session_var_gc_interval",
            "outbox_retention",
            "drift_sweep_interval",
            "cancel_cleanup_timeout",
            "warm_finished_ttl",
            "stuck_after",
            "prune_interval",
        ):
            value: timedelta = getattr(self, name)
            if not isinstance(value, timedelta):
                problems.append(f"{name} must be a timedelta, got {value!r}")
            elif value <= timedelta(0):
                problems.append(f"{name} must be positive: {value.total_seconds():g} s")
            elif (problem := duration_problem(name, value)) is not None:
                problems.append(problem)
        if self.retention is not None and (
                not isinstance(self.retention, timedelta) or self.retention <= timedelta(0)):
            problems.append(f"retention must be a positive timedelta or None (keep forever), "
                            f"got {self.retention!r}")
        elif self.retention is not None and (
                problem := duration_problem("retention", self.retention)) is not None:
            problems.append(problem)
        if (
            isinstance(self.heartbeat_interval, timedelta)
            and isinstance(self.lease_ttl, timedelta)
            and self.heartbeat_interval >= self.lease_ttl
        ):
            problems.append(
                f"heartbeat_interval must be < lease_ttl: "
                f"{self.heartbeat_interval.total_seconds():g} s >= "
                f"{self.lease_ttl.total_seconds():g} s"
            )
        if not isinstance(self.fused_boundaries, bool):
            problems.append(f"fused_boundaries must be True or False, got "
                            f"{self.fused_boundaries!r}")
        if not isinstance(self.sqlite_inline_commits, bool):
            problems.append(f"sqlite_inline_commits must be True or False, got "
                            f"{self.sqlite_inline_commits!r}")
        for name, least in (("max_claim_attempts", 1), ("storage_retries", 0),
                            ("sync_step_threads", 1), ("sync_workflow_threads", 1)):
            problem = int_problem(name, getattr(self, name), least)
            if problem is not None:
                problems.append(problem)
        # msgspec checks Literal fields only when decoding, not in the constructor.
        for name, allowed in (("sqlite_synchronous", _SQLITE_SYNCHRONOUS),
                              ("postgres_synchronous_commit", _POSTGRES_SYNCHRONOUS_COMMIT),
                              ("lost_runs", _LOST_RUNS)):
            if getattr(self, name) not in allowed:
                problems.append(f"{name} must be one of {', '.join(allowed)}: "
                                f"{getattr(self, name)!r}")
        if not isinstance(self.wake_keys, dict):
            problems.append(f"wake_keys must be a dict {{key_id: secret}}, got {self.wake_keys!r}")
        else:
            for key_id, secret in self.wake_keys.items():
                if not isinstance(key_id, str) or not key_id or ":" in key_id or "." in key_id:
                    problems.append(
                        f"wake key id {key_id!r} must be a non-empty string without ':' or '.'")
                if not isinstance(secret, str):
                    problems.append(f"wake key {key_id!r} must be a string secret, got "
                                    f"{type(secret).__name__}")
                elif len(secret) < 16:
                    problems.append(
                        f"wake key {key_id!r} is too short: use at least 16 characters")
        if problems:
            raise ConfigError(
                f"invalid StarflowConfig ({len(problems)} problem(s)): " + "; ".join(problems)
            )


#: The environment variables naming the database, in the order they are read by
#: ``Starflow.open()`` and the ``starflow`` command alike.
DATABASE_URL_VARIABLES = ("STARFLOW_URL", "STARFLOW_DATABASE_URL")


def database_url_from_env() -> str | None:
    """The database URL of ``$STARFLOW_URL``, else ``$STARFLOW_DATABASE_URL`` (else None)."""
    for name in DATABASE_URL_VARIABLES:
        value = os.environ.get(name)
        if value:
            return value
    return None


def int_problem(name: str, value: object, least: int) -> str | None:
    """The problem with an option that must be an int >= ``least`` (a bool is not one),
    or None: the one wording every check of such an option uses."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        return f"{name} must be an int >= {least}: {value!r}"
    return None


def check_concurrency(value: object) -> int:
    """A worker's ``concurrency``: an int >= 1 (not a bool), else a ConfigError naming it.

    Shared by :class:`~starflow.runtime.worker.Worker` and
    :class:`~starflow.runtime.jobs.JobWorker`, which call it first, before anything starts.
    """
    problem = int_problem("concurrency", value, 1)
    if problem is not None:
        raise ConfigError(problem)
    assert isinstance(value, int)
    return value
