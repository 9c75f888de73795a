"""Every error starflow raises.

All of them derive from :class:`StarflowError`, carry the ``run_id`` and
``node_id`` they concern (``None`` when not applicable), and say what to do::

    StarflowError
    ├── ConfigError               invalid configuration or URL
    ├── InvalidArgument           a bad argument to a public call (a name too long…)
    ├── WorkflowDefinitionError   a function that is not a valid workflow / step
    ├── SerializationError        a value that cannot be stored as JSON
    │   └── CodecError            a stored payload the codec cannot decode (missing key…)
    ├── ReservedKeyError          a write to a ``__celestial…`` context key
    ├── NonDeterminismError       replayed code diverged from the recorded history
    ├── WaitTimeout               a ``wait_for`` deadline passed before its signal
    ├── ConcurrentWaits           timed durable waits in concurrent branches of one run
    ├── UnexpectedSignal          a signal name outside the workflow's declared signals
    ├── WorkflowTimeout           a run passed its ``@workflow(timeout=)`` deadline
    ├── StepTimeout               a step attempt ran past its ``@step(timeout=)``
    ├── StepFailed                a step raised past its last retry
    ├── LeaseLostError            another runner (or a cancel) took the run
    ├── RunnerKilled              a test harness killed the run's runner (simulated SIGKILL)
    ├── RunNotFound               no run with that id in this workspace
    ├── RunFinished               a signal / resume / cancel / update for an ended run
    ├── RunIdConflict             a start whose run id names a run of another workflow
    ├── DuplicateRun              a start whose dedup key names an active run of the pool
    ├── CallerTransactionError    a start in the caller's transaction was refused
    │   ├── NotInTransaction      … the caller's connection has no open transaction
    │   ├── ForeignConnection     … another driver's connection, or another database
    │   └── TransactionalStartUnsupported  … with sf.run, debounce, the warm tier…
    ├── ScheduleNotFound          no schedule with that id in this workspace
    ├── InvalidWakeToken          a forged, expired or used wake token
    ├── UpdateRejected            the workflow rejected a ``Starflow.update``
    ├── WorkflowFailed            ``Starflow.result`` of a run that ended in error
    │   └── RunCancelled          … or was cancelled
    ├── ResultTimeout             ``Starflow.result(timeout=…)`` gave up waiting
    ├── OutsideWorkflow           a workflow-only call (``set_event``…) outside a workflow
    ├── StreamClosed              ``write_stream`` to a stream the run closed
    ├── NodeNotInHistory          ``Starflow.fork`` from a node the run's history lacks
    ├── RunNotEnded               ``Starflow.fork`` of a run that has not ended
    ├── TooManyRuns               a bulk action's filter matches more runs than its ``limit``
    ├── StorageError              the database failed (driver errors are wrapped)
    ├── CopyRefused               ``starflow copy`` while a run holds a live lease
    └── WarmTierError             the warm tier (Redis…) failed; cold state is unaffected
"""

from __future__ import annotations

from .driver_errors import is_transient

__all__ = [
    "CallerTransactionError",
    "CodecError",
    "ConcurrentWaits",
    "ConfigError",
    "CopyRefused",
    "DuplicateRun",
    "ForeignConnection",
    "InvalidArgument",
    "InvalidWakeToken",
    "LeaseLostError",
    "NodeNotInHistory",
    "NonDeterminismError",
    "NotInTransaction",
    "OutsideWorkflow",
    "ReservedKeyError",
    "ResultTimeout",
    "RunCancelled",
    "RunFinished",
    "RunIdConflict",
    "RunNotEnded",
    "RunNotFound",
    "RunnerKilled",
    "ScheduleNotFound",
    "SerializationError",
    "StarflowError",
    "StepFailed",
    "StepTimeout",
    "StorageError",
    "StreamClosed",
    "TooManyRuns",
    "TransactionalStartUnsupported",
    "UnexpectedSignal",
    "UpdateRejected",
    "WaitTimeout",
    "WarmTierError",
    "WorkflowDefinitionError",
    "WorkflowFailed",
    "WorkflowTimeout",
]


class StarflowError(Exception):
    """Root of every starflow error.

    Attributes:
        run_id: The run concerned, if any.
        node_id: The node (step, wait, sleep) concerned, if any.
    """

    def __init__(
        self, message: str, *, run_id: str | None = None, node_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.node_id = node_id

    def __reduce__(self) -> tuple[object, ...]:  # keep picklable with keyword args
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


def _rebuild(cls: type[StarflowError], message: str, state: dict[str, object]) -> StarflowError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class ConfigError(StarflowError):
    """A configuration value, URL or option is invalid."""


class InvalidArgument(StarflowError, ValueError):
    """An argument to a public call cannot be accepted (a name too long, a NUL
    character, a timeout out of range…); the message names the parameter and
    its value. Nothing was written."""


class WorkflowDefinitionError(StarflowError):
    """A function is not a valid workflow or step, or is not registered."""


class SerializationError(StarflowError):
    """A value cannot be encoded to, or decoded from, the JSON stored in the database."""


class CodecError(SerializationError):
    """A stored payload cannot be decoded by the codec given to ``Starflow.open``
    (a key or codec it lacks, a wrong key, altered data), or a process without
    a codec met an encoded payload. ``run_id`` / ``node_id`` name where it is."""


class ReservedKeyError(StarflowError):
    """User code wrote a context variable in the engine's ``__celestial`` namespace."""

    def __init__(self, key: str, *, run_id: str | None = None) -> None:
        super().__init__(
            f"context variable {key!r} is reserved: keys starting with '__celestial' belong "
            "to the engine; rename it",
            run_id=run_id,
        )
        self.key = key


class NonDeterminismError(StarflowError):
    """Replayed workflow code did not match the recorded history.

    Attributes:
        recorded: What the history holds at this node.
        current: What the code did this time.
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        node_id: str | None = None,
        recorded: str | None = None,
        current: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, node_id=node_id)
        self.recorded = recorded
        self.current = current


class WaitTimeout(StarflowError):
    """A ``wait_for`` with a timeout reached its deadline before a signal came."""


class ConcurrentWaits(StarflowError):
    """Two durable waits of one run were reached at once (concurrent branches of a
    task group or ``asyncio.gather``) and one of them is timed (a ``sleep``, or a
    ``wait_for`` / ``wait_for_any`` with a timeout).

    A run pauses at one wait at a time; untimed waits in concurrent branches
    pause one after another, but a timer that starts only when the wait before
    it ends would fire late, so the run fails with this error instead.

    Attributes:
        node_ids: The waits that were reached at once.
    """

    def __init__(self, message: str, *, run_id: str | None = None,
                 node_ids: tuple[str, ...] = ()) -> None:
        super().__init__(message, run_id=run_id, node_id=node_ids[-1] if node_ids else None)
        self.node_ids = node_ids


class UnexpectedSignal(StarflowError):
    """A signal for a name the run is not waiting for and never declared.

    Raised by ``Starflow.signal`` (the CLI's ``starflow signal``, the web page)
    before anything is written, for a workflow that declares its signals
    (``@workflow(signals=...)``): the name is none of them, nor an event of
    the run's current wait or of a wait recorded in its history.

    Attributes:
        event: The signal name that was refused.
        expected: The names the run accepts now.
    """

    def __init__(self, message: str, *, run_id: str | None = None, event: str = "",
                 expected: tuple[str, ...] = ()) -> None:
        super().__init__(message, run_id=run_id)
        self.event = event
        self.expected = expected


class WorkflowTimeout(StarflowError):
    """A run passed its deadline (``@workflow(timeout=)`` or ``sf.options(timeout=)``).

    The run ends with status ``error``; ``sf.result`` raises
    :class:`WorkflowFailed` with ``error_type == "WorkflowTimeout"``, and the
    run's attached children are cancelled.
    """


class StepTimeout(StarflowError, TimeoutError):
    """A step attempt ran past its ``@step(timeout=)``: it was cancelled, and counts
    as a failed attempt for the step's retry policy."""


class StepFailed(StarflowError):
    """A step raised an exception past its last retry.

    The same error is raised live and on replay, so workflow code that catches
    it behaves identically both times.

    Attributes:
        error_type: Qualified name of the original exception type.
        error_message: ``str()`` of the original exception.
        attempts: How many attempts were made.
    """

    def __init__(
        self,
        error_type: str,
        error_message: str,
        *,
        run_id: str | None = None,
        node_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(
            f"step {node_id} failed after {attempts} attempt(s): {error_type}: {error_message}",
            run_id=run_id,
            node_id=node_id,
        )
        self.error_type = error_type
        self.error_message = error_message
        self.attempts = attempts


class LeaseLostError(StarflowError):
    """This runner no longer holds the run's lease; it stopped driving the run."""


class RunnerKilled(StarflowError):
    """The execution was killed as with SIGKILL (``WorkflowEnvironment.kill_runner``).

    Only a test harness raises it, to the caller that was driving the run: a
    real SIGKILL'd process has no caller left to tell. Nothing more was written
    for the run, which keeps its lease until it expires; then the lease sweep
    recovers it (``runner_lost``) like any run whose runner died. Distinct from
    :class:`LeaseLostError`: no other runner took the run over.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id}: its runner was killed (simulated SIGKILL) and wrote nothing more; "
            "the run keeps its lease until it expires, then the lease sweep recovers it "
            "(runner_lost): advance the clock past lease_ttl and the next sweep",
            run_id=run_id,
        )


class RunNotFound(StarflowError):
    """No run with this id exists in the adapter's workspace and environment.

    Attributes:
        run_key: The run key the caller named the run by (``"order-123"``),
            whose derived id is ``run_id``; ``None`` when given the id itself.
    """

    def __init__(self, run_id: str, *, run_key: str | None = None) -> None:
        named = (f"run {run_key} not found in this workspace/env (a run key; the run it "
                 f"names here would have id {run_id}): check the key"
                 if run_key is not None else
                 f"run {run_id} not found in this workspace/env: check the id")
        super().__init__(
            f"{named}, the database URL and the workspace_id/env the app was opened with",
            run_id=run_id,
        )
        self.run_key = run_key


class RunFinished(StarflowError):
    """A signal, resume, cancel or update reached a run that has already ended.

    Attributes:
        status: The run's final status.
    """

    def __init__(self, run_id: str, status: str, action: str, hint: str | None = None) -> None:
        super().__init__(
            f"cannot {action} run {run_id}: it has already ended with status {status!r}"
            + (f"; {hint}" if hint else ""),
            run_id=run_id,
        )
        self.status = status


class RunIdConflict(StarflowError):
    """A start passed a ``run_id`` that already names a run of another workflow.

    An idempotent start returns the existing run only for the same workflow
    (name); nothing was written.

    Attributes:
        run_key: The run key the start named the run by, else ``None``.
        existing_workflow: The workflow of the run that has this id.
        requested_workflow: The workflow the start asked for.
        status: The existing run's status.
    """

    def __init__(self, run_id: str, existing_workflow: str, requested_workflow: str,
                 status: str, *, run_key: str | None = None) -> None:
        named = (f"run key {run_key!r} (run {run_id})" if run_key is not None
                 else f"run_id {run_id}")
        super().__init__(
            f"{named} already names a run of workflow {existing_workflow!r} "
            f"(status {status!r}), so it cannot start workflow {requested_workflow!r}: "
            "passing the same run_id again returns the existing run only for the same "
            "workflow. Nothing was started; use another run_id for this workflow (one "
            "per workflow, e.g. the run key f'{workflow}:{key}')",
            run_id=run_id,
        )
        self.run_key = run_key
        self.existing_workflow = existing_workflow
        self.requested_workflow = requested_workflow
        self.status = status


class DuplicateRun(StarflowError):
    """A start with ``dedup_key`` found an active run with that key in its pool.

    Nothing was started. ``run_id`` is the active run's id.

    Attributes:
        dedup_key: The key.
        pool: The pool (``None``: runs queued for any pool).
    """

    def __init__(self, run_id: str, dedup_key: str, pool: str | None) -> None:
        super().__init__(
            f"run {run_id} is already active with dedup_key {dedup_key!r} in pool "
            f"{pool!r}: nothing was started. Wait for it (sf.result({run_id!r})), or start "
            "without dedup_key (or with another) to run twice",
            run_id=run_id,
        )
        self.dedup_key = dedup_key
        self.pool = pool


class CallerTransactionError(StarflowError):
    """A start in the caller's own database transaction
    (``sf.start(wf, …, connection=conn)``) was refused before anything was
    written; the caller's transaction is as it was. The subclasses say why."""


class NotInTransaction(CallerTransactionError):
    """The connection passed as ``connection=`` has no open transaction: the run
    would be committed on its own, not with the caller's rows."""


class ForeignConnection(CallerTransactionError):
    """The connection passed as ``connection=`` is not one this app can write
    through: another driver's (PostgreSQL takes an asyncpg connection, SQLite an
    aiosqlite one), or connected to another database than the app's."""


class TransactionalStartUnsupported(CallerTransactionError):
    """``connection=`` was combined with what cannot join a caller's transaction:
    ``sf.run`` (it waits for a result the uncommitted run cannot have),
    ``debounce``, the warm tier, a memory or null adapter, or the blocking
    facade."""


class ScheduleNotFound(StarflowError):
    """No schedule with this id exists in the app's workspace and environment.

    Attributes:
        schedule_id: The id asked for.
    """

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} not found in this workspace/env: list them with "
            "sf.schedules() or `starflow schedules list`")
        self.schedule_id = schedule_id


class InvalidWakeToken(StarflowError):
    """A wake token failed verification; nothing was written.

    Attributes:
        reason: One of ``malformed``, ``bad_signature``, ``unknown_key``,
            ``expired``, ``wrong_workspace``, ``already_used``, ``wrong_wait``,
            ``not_found``.
    """

    def __init__(
        self, reason: str, detail: str, *, run_id: str | None = None, node_id: str | None = None
    ) -> None:
        super().__init__(f"invalid wake token ({reason}): {detail}", run_id=run_id, node_id=node_id)
        self.reason = reason


class WorkflowFailed(StarflowError):
    """``Starflow.result`` of a run that ended with status ``error`` or ``cancelled``.

    Attributes:
        status: ``error`` or ``cancelled``.
        error: The error message stored on the run row.
        node_id: The step (or wait) whose recorded failure ended the run, if one did.
        error_type: Type of the cause: the qualified name of the exception a step
            raised (as recorded in its ``node_error``), else the name of the
            exception the workflow raised; ``None`` when the run did not end
            with an exception (``runner_lost``).
        error_message: ``str()`` of the cause (the run's error when there is no
            exception).
        attempts: Attempts the failing step made (``None`` without a failing step).
        traceback: The cause's formatted traceback, bounded (the last frames of
            each exception, 16 KiB at most); ``None`` without an exception.

    All of them are read from the run's recorded failure (``RunInfo.failure``),
    never parsed out of the ``error`` text.
    """

    def __init__(self, run_id: str, status: str, error: str | None, *,
                 node_id: str | None = None, error_type: str | None = None,
                 error_message: str | None = None, attempts: int | None = None,
                 traceback: str | None = None) -> None:
        if node_id is not None:
            tries = f" after {attempts} attempt(s)" if attempts else ""
            message = (
                f"run {run_id} ended with status {status!r}: {node_id} failed{tries}: "
                f"{error_type}: {error_message}. See sf.events(run_id) for its history; "
                f"once the cause is fixed, sf.retry(run_id) runs {node_id} again (the steps "
                "recorded before it are kept), or handle it in the workflow (except "
                "StepFailed / WaitTimeout)")
        else:
            message = (
                f"run {run_id} ended with status {status!r}: {error}. See sf.events(run_id) "
                "for where it stopped; once the cause is fixed (the workflow code, a deploy), "
                "sf.retry(run_id) runs it again from its recorded history")
        super().__init__(message, run_id=run_id, node_id=node_id)
        self.status = status
        self.error = error
        self.error_type = error_type
        self.error_message = error_message if error_message is not None else error
        self.attempts = attempts
        self.traceback = traceback


class UpdateRejected(StarflowError):
    """The workflow answered a ``Starflow.update`` with ``request.reject(reason)``.

    Attributes:
        update: The update's name.
        update_id: The update's id (a retry with it gets this same answer).
        reason: What the workflow said.
    """

    def __init__(self, run_id: str, update: str, update_id: str, reason: str, *,
                 node_id: str | None = None) -> None:
        super().__init__(
            f"run {run_id} rejected update {update!r} (id {update_id}): {reason}",
            run_id=run_id, node_id=node_id)
        self.update = update
        self.update_id = update_id
        self.reason = reason


class RunCancelled(WorkflowFailed):
    """A run was cancelled with ``Starflow.cancel``.

    Raised by ``Starflow.result`` for a run that ended ``cancelled``, and inside
    the workflow at the await where a (non-forced) cancel reached it: catch it
    (or use ``finally``) to run compensation steps before the run ends.
    """

    def __init__(self, run_id: str, error: str | None = "cancelled", *,
                 node_id: str | None = None, message: str | None = None) -> None:
        StarflowError.__init__(
            self, message or f"run {run_id} ended with status 'cancelled': {error}",
            run_id=run_id, node_id=node_id)
        self.status = "cancelled"
        self.error = error
        self.error_type = None
        self.error_message = error
        self.attempts = None
        self.traceback = None


class ResultTimeout(StarflowError, TimeoutError):
    """``Starflow.result`` waited ``timeout`` and the run had not ended; it goes on."""


class OutsideWorkflow(StarflowError):
    """A call that only workflow code may make (``starflow.set_event``,
    ``write_stream``, ``close_stream``, ``continue_as_new``) was made outside a
    workflow function: outside any run, or inside a step. Nothing was written.

    Attributes:
        call: The call (``"set_event"``).
    """

    def __init__(self, call: str, *, run_id: str | None = None,
                 node_id: str | None = None) -> None:
        where = (f"inside step {node_id} of run {run_id}" if node_id is not None
                 else "outside a workflow run")
        super().__init__(
            f"starflow.{call}() called {where}: call it from the @workflow function itself "
            "(a step may run more than once; the workflow's calls are recorded once)",
            run_id=run_id, node_id=node_id)
        self.call = call


class StreamClosed(StarflowError):
    """``starflow.write_stream`` (or a second ``close_stream``) on a stream this run
    has closed. Nothing was written.

    Attributes:
        key: The stream's key.
    """

    def __init__(self, key: str, *, run_id: str | None = None, closing: bool = False) -> None:
        action = "close" if closing else "write to"
        super().__init__(
            f"run {run_id}: cannot {action} stream {key!r}: the run already closed it; "
            "write every value before close_stream, or use another key",
            run_id=run_id)
        self.key = key


class NodeNotInHistory(StarflowError):
    """``Starflow.fork(run_id, from_node=…)`` names a node the run's history does
    not hold. Nothing was written.

    Attributes:
        known: The run's node ids in history order (at most 20).
    """

    def __init__(self, run_id: str, node_id: str, known: tuple[str, ...]) -> None:
        listed = ", ".join(known[:20]) + (", …" if len(known) > 20 else "")
        super().__init__(
            f"run {run_id} has no node {node_id!r} in its history: fork from one of its "
            f"nodes ({listed or 'it has none'}); see them with starflow runs show {run_id}",
            run_id=run_id, node_id=node_id)
        self.known = known[:20]


class RunNotEnded(StarflowError):
    """``Starflow.fork`` of a run that is still active (queued, running or paused):
    its history is still growing. Nothing was written.

    Attributes:
        status: The run's status.
    """

    def __init__(self, run_id: str, status: str, action: str = "fork") -> None:
        super().__init__(
            f"cannot {action} run {run_id}: it is still {status!r}; wait for it to end "
            f"(sf.result), or cancel it (sf.cancel / starflow cancel {run_id}) first",
            run_id=run_id)
        self.status = status


class TooManyRuns(StarflowError):
    """A bulk action (``Starflow.cancel_runs``, ``retry_runs``, ``fork_runs``) whose
    filter matches more runs than its ``limit``. Nothing was written.

    Attributes:
        action: ``cancel``, ``retry`` or ``fork``.
        limit: The cap that was passed.
    """

    def __init__(self, action: str, limit: int) -> None:
        super().__init__(
            f"{action}_runs: the filter matches more than limit={limit} runs; nothing was "
            f"written: narrow the filter (see the count with dry_run=True, or --dry-run), "
            f"or raise the cap (limit=N, or limit=None for no cap; --limit N / --no-limit)")
        self.action = action
        self.limit = limit


class StorageError(StarflowError):
    """The database failed; the driver's exception is chained as ``__cause__``.

    Attributes:
        transient: Whether trying the write again may succeed (a lost
            connection, a busy lock) or not (the database refused the values
            or the statement). Classified once, from the driver's exception
            (:func:`starflow.driver_errors.is_transient`), unless given.
    """

    def __init__(self, message: str, *, run_id: str | None = None,
                 node_id: str | None = None, transient: bool | None = None) -> None:
        super().__init__(message, run_id=run_id, node_id=node_id)
        self._transient = transient

    @property
    def transient(self) -> bool:
        if self._transient is not None:
            return self._transient
        return is_transient(self.__cause__)


class WarmTierError(StarflowError):
    """The warm tier (live-state overlay) failed. Cold state, the authority, is
    unaffected: the outbox keeps the changes and the drainer retries."""


class CopyRefused(StarflowError):
    """``starflow copy`` found runs (or worker jobs) holding a live lease in the
    source: a runner is mid-step and could still write an outcome there.

    Attributes:
        run_ids: The leased runs (a leased job's run included), sorted.
    """

    def __init__(self, message: str, *, run_ids: tuple[str, ...] = ()) -> None:
        super().__init__(message, run_id=run_ids[0] if len(run_ids) == 1 else None)
        self.run_ids = run_ids
