"""``Starflow``: the application object users open, run workflows with and query."""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast, overload

import msgspec

from . import serde
from .adapters.base import WatchWhenWaiting
from .adapters.pages import MAX_PAGE, RunCursor, RunPage, RunPageQuery
from .admin.history import export_run
from .app_core import RunOptions, workflow_definition
from .app_ops import StarflowOps, check_session_names
from .config import int_problem
from .errors import (
    InvalidArgument,
    InvalidWakeToken,
    NodeNotInHistory,
    ResultTimeout,
    RunCancelled,
    RunFinished,
    RunNotEnded,
    RunNotFound,
    StarflowError,
    StorageError,
    TooManyRuns,
    UpdateRejected,
)
from .limits import MAX_DURATION, WAKE_TOKEN_PREFIX, name_problem
from .logs import get_logger
from .records import (
    BULK_STATUSES,
    MAX_REPORTED,
    RUN_STATUSES,
    BulkResult,
    RunEvent,
    RunFilter,
    RunInfo,
    WaitRecord,
)
from .runtime.forks import fork_run
from .runtime.runner import RunHandle
from .workflow.attributes import encode_attributes
from .workflow.events import DataReader

__all__ = ["DEFAULT_BULK_LIMIT", "RunOptions", "Starflow", "bulk_query",
           "check_session_names", "workflow_definition"]


R = TypeVar("R")
_log = get_logger("starflow.bulk")
#: ``cancel_runs``' (``retry_runs``', ``fork_runs``') default cap on the matches.
DEFAULT_BULK_LIMIT = 1000
#: Runs read per page by a bulk action (its memory bound).
BULK_PAGE = MAX_PAGE
_Call = TypeVar("_Call", bound=Callable[..., Awaitable[Any]])


def _names_run_key(method: _Call) -> _Call:
    """A ``RunNotFound`` from ``method(self, run_id, ...)`` given a run key names
    the key, not only the id it derives (``run order-123 not found…``)."""

    @functools.wraps(method)
    async def call(self: StarflowOps, run_id: Any, /, *args: Any, **kwargs: Any) -> Any:
        try:
            return await method(self, run_id, *args, **kwargs)
        except RunNotFound as exc:
            if exc.run_key is not None or not isinstance(run_id, str):
                raise
            try:
                ref = self.adapter.run_ref(run_id)
            except InvalidArgument:
                raise exc from None
            if ref.key is None or ref.id != exc.run_id:
                raise
            raise RunNotFound(ref.id, run_key=ref.key).with_traceback(
                exc.__traceback__) from None

    return cast(_Call, call)


class Starflow(StarflowOps):
    """A connection to one workflow database, scoped to (``workspace_id``, ``env``).

    Open it with ``async with Starflow.open(url) as sf:``. While open, it
    fires the durable timers of the inline runs it paused and drains its own
    warm-tier outbox; with ``maintenance=True`` it also runs the lease sweep,
    every run's timers and session-var GC (see :meth:`open`).

    Every method that takes a ``run_id`` takes the run's *run key* too (the
    string it was started with, ``sf.options(run_id="order-123")``): any
    string that is not a UUID is read as a key (see
    :func:`starflow.limits.run_ref`), and an invalid one raises
    :class:`~starflow.InvalidArgument` before anything is written.
    """

    # -- waking runs ---------------------------------------------------------------

    @_names_run_key
    async def signal(self, run_id: str, event: str, payload: Any = None) -> RunHandle[Any]:
        """Deliver a signal. A run paused on ``event`` wakes: inline runs are driven
        here until they pause again or end, worker runs go back to the queue. A
        signal for a run not yet waiting is kept until it waits.

        A run that continued as new (``starflow.continue_as_new``) passes the
        signal on: it goes to the chain's current (last) run, whose handle is
        returned.

        Raises:
            RunNotFound: no such run.
            RunFinished: the run (the chain's last run) has ended.
            SerializationError: the payload is not JSON-encodable (nothing written).
        """
        return self._track(await self.runner.signal(self._run_id(run_id), event, payload))

    @overload
    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None, type: type[R]) -> R: ...

    @overload
    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None) -> Any: ...

    @_names_run_key
    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None, type: Any = Any) -> Any:
        """Send a request to a running workflow and return its answer.

        The workflow receives it with ``req = await starflow.receive(name)`` and
        answers with ``await req.reply(value)`` (returned here) or ``await
        req.reject(reason)`` (raised here as :class:`UpdateRejected`). Request
        and answer are recorded in the run's history. An inline run paused in
        ``receive`` is driven here; this call returns as soon as the answer is
        recorded (from another process: on PostgreSQL at once, by ``NOTIFY``;
        on SQLite, or behind a transaction pooler without ``listen_url``,
        within ``poll_interval``).

        Retrying with the same ``update_id`` never executes the update twice:
        the request is queued once per id, and every call with that id gets
        the one recorded answer (also after a timeout here).

        A run that continued as new (``starflow.continue_as_new``) passes the
        update on to the chain's current (last) run; a retry with the same
        ``update_id`` finds the answer on whichever run of the chain gave it.

        Args:
            timeout: Give up waiting after this long (:class:`ResultTimeout`);
                the request stays queued.
            update_id: Your id for this update, to retry it safely (default:
                a new UUID).
            type: Convert the answer to this type (a dataclass, Struct, Pydantic
                model…); as stored (JSON builtins) by default.

        Raises:
            UpdateRejected: the workflow rejected the request.
            ResultTimeout: no answer within ``timeout``.
            RunFinished: the run ended without answering.
            RunNotFound: no such run.
            InvalidArgument / SerializationError: bad name, id or payload
                (nothing written).
        """
        run_id = self._run_id(run_id)
        uid = update_id if update_id is not None else str(uuid.uuid4())
        limit = _result_timeout(timeout)
        runner = self.runner
        deadline = None if limit is None else self.clock.now() + timedelta(seconds=limit)
        answer = None
        while True:  # again if the run continued as new before the request was queued
            chain = await runner.chain(run_id)
            if update_id is not None:  # a retry: answered by a run of the chain?
                for run in chain:
                    answer = await runner.update_answer(run.id, uid)
                    if answer is not None:
                        run_id = run.id
                        break
            if answer is not None:
                break
            run_id = chain[-1].id
            try:
                handle = await runner.request_update(run_id, name, payload, uid)
            except RunFinished:
                current = await self.adapter.get_run(run_id)
                if current is not None and current.continued_as is not None:
                    continue
                raise
            if handle is not None:
                self._track(handle)
            break
        poll = self.config.poll_interval.total_seconds()
        async with WatchWhenWaiting(self.adapter, run_id) as watch:
            while answer is None:
                # Taken before the read: a change after it (in this process, or
                # announced by another once watching) wakes us; poll_interval is
                # the fallback. The watch starts only if the first read must wait.
                settled = runner.settled
                changed = watch.arm()
                answer = await runner.update_answer(run_id, uid)
                if answer is not None:
                    break
                run = await self.get_run(run_id)
                if run.is_terminal:
                    answer = await runner.update_answer(run_id, uid)  # answered, then ended
                    if answer is None:
                        raise RunFinished(run_id, run.status, "update")
                    break
                now = self.clock.now()
                if deadline is not None and now >= deadline:
                    raise ResultTimeout(
                        f"run {run_id} did not answer update {name!r} (id {uid}) within "
                        f"{limit:g} s; the request stays queued: call update again with "
                        f"update_id={uid!r} to wait for its answer", run_id=run_id)
                if await watch.start():
                    continue  # announcements reach us from now on: read again first
                wait = poll if deadline is None else min(poll, (deadline - now).total_seconds())
                await runner.wait_settled(wait, settled, *changed)
        node_id, output = answer
        if "rejected" in output:
            raise UpdateRejected(run_id, name, uid, str(output["rejected"]), node_id=node_id)
        return serde.convert(output.get("reply"), type,
                             what=f"answer to update {name!r} of run {run_id}",
                             run_id=run_id, node_id=node_id)

    async def resume(self, wake_token: str, payload: Any = None) -> RunHandle[Any]:
        """Wake the wait a token was issued for, with ``payload``; or, given a run id,
        resume a run an operator paused (:meth:`pause`).

        The three never clash: a run id is a UUID, a wake token starts with
        ``sfw1.`` and a run key (``sf.options(run_id="order-123")``) never
        does. A run id or key takes no ``payload``.

        Resuming a run puts it back where it was: at its wait (a signal that came
        while it was paused is delivered now, a timer past due fires), in the queue
        for workers (a run started with ``sf.start``), or, for an inline run parked
        between steps, driven on in this call until it pauses again or ends (like
        ``sf.signal``). A run that is not paused is left as it is (nothing written);
        a pause still pending (the run has not reached its next step) is withdrawn.

        Raises:
            InvalidWakeToken: forged, expired, used, or for another wait; or text
                that is neither a token nor the key of a run here (nothing written).
            RunNotFound: no run has that id.
            RunFinished: the run has ended (nothing written).
            InvalidArgument: a run id or key with a ``payload``.
        """
        run_id = await self._resumable_run(wake_token)
        if run_id is None:
            return self._track(await self.runner.resume(wake_token, payload))
        if payload is not None:
            raise InvalidArgument(
                f"resume({wake_token!r}, payload=...): a run id resumes a run an operator "
                "paused and takes no payload; send data with sf.signal(run_id, event, "
                "payload), or pass the wait's wake token", run_id=run_id)
        return self._track(await self.runner.resume_run(run_id))

    async def _resumable_run(self, value: object) -> str | None:
        """The run :meth:`resume` is given (a run id, or the key of a run that
        exists), or ``None`` for a wake token (or what is meant as one)."""
        if isinstance(value, str) and value.startswith(WAKE_TOKEN_PREFIX):
            return None
        try:
            ref = self.adapter.run_ref(value)
        except InvalidArgument:
            return None  # not a run id nor a key: a malformed token
        if ref.key is None:
            return ref.id
        if await self.adapter.get_run(ref.id) is None:
            raise InvalidWakeToken(
                "malformed", f"{ref.key[:60]!r} is not a wake token ({WAKE_TOKEN_PREFIX}…), "
                f"nor the key of a run in workspace {self.workspace_id}/{self.env}")
        return ref.id

    @_names_run_key
    async def pause(self, run_id: str) -> RunHandle[Any]:
        """Pause a run: it stops at its next boundary and keeps its state until
        :meth:`resume` (``sf.resume(run_id)``).

        A queued run is held (no worker claims it) and a run paused at a wait is
        held there: a signal sent meanwhile is recorded but does not wake it, its
        timer does not fire. An executing run parks before its next step (a step
        in flight finishes and is recorded first): this call returns at once
        with the run still ``running``, and the run's events show
        ``run_pause_requested`` then ``run_paused_by_operator``. A held run has
        status ``paused`` and ``claim_state`` ``held``. Pausing a paused run (or
        one whose pause is pending) writes nothing. ``sf.cancel`` still cancels
        a paused run.

        Returns:
            The run's handle as it is now.

        Raises:
            RunNotFound: no run has that id.
            RunFinished: the run has ended (nothing written).
        """
        return await self.runner.pause(self._run_id(run_id))

    @_names_run_key
    async def cancel(self, run_id: str, *, force: bool = False) -> RunHandle[Any]:
        """Cancel a run, letting its code clean up.

        The run is woken (paused) or interrupted (running): the workflow code
        gets :class:`~starflow.RunCancelled` at its current await (a step in
        flight is cancelled at its next await), and ``except RunCancelled:`` /
        ``finally:`` may run steps (compensations) within
        ``StarflowConfig.cancel_cleanup_timeout``. The run then ends
        ``cancelled`` (``error`` with its cause if the cleanup raised something
        else or passed the deadline). A run still queued that never ran ends
        at once. Cancelling twice changes nothing.

        Args:
            force: End the run now without running any of its code (its
                current execution is stopped, nothing more is written).

        Returns:
            The run's handle: ``cancelled`` when the cleanup ran here (an inline
            run that was paused) or for a forced cancel; else the run's current
            status (the cancel reaches it where it runs).

        Raises:
            RunNotFound: no such run.
            RunFinished: the run had already ended.
        """
        return self._track(await self.runner.cancel(self._run_id(run_id), force=force))

    @_names_run_key
    async def retry(self, run_id: str) -> RunHandle[Any]:
        """Run a run that ended in ``error`` again from its recorded history.

        Use it after deploying a fix for what failed it. The step whose failure
        ended the run runs again with the code deployed now, and what follows
        it (a wait that timed out waits again; a failed child run is retried
        too); the steps that succeeded before it are kept, not run again. A
        failure of the workflow body itself (a bug, a ``NonDeterminismError``
        after an incompatible deploy, a runner lost too often) replays the
        whole history and runs the body again. A run past its deadline gets a
        new one as long as the first. Inline runs are driven here until they
        pause or end; worker runs go back to the queue.

        Raises:
            RunNotFound: no such run.
            RunFinished: the run succeeded or was cancelled.
            StarflowError: the run has not ended.
        """
        return self._track(await self.runner.retry(self._run_id(run_id)))
    # -- queries -------------------------------------------------------------------

    @_names_run_key
    async def get_run(self, run_id: str) -> RunInfo:
        """The ``workflow_runs`` row (read cold)."""
        run_id = self._run_id(run_id)
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def list_runs(self, status: str | None = None, template_id: str | None = None,
                        limit: int = 50, since: datetime | None = None,
                        attributes: Mapping[str, str | int | bool] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        """Runs newest first, optionally filtered.

        Args:
            status: Only runs in this status (``queued``, ``running``, ``paused``,
                ``success``, ``error`` or ``cancelled``).
            template_id: Only runs of this workflow name.
            limit: At most this many runs (an int from 1 to 2**31 - 1).
            since: Only runs started at or after this timezone-aware time.
            attributes: Only runs whose workflow set every one of these
                (``starflow.set_attributes``), each an index lookup. Values
                match exactly, type included (``"42"`` is not ``42``).
            parent_run_id: Only the child runs of this run (``starflow.start_child``,
                or a ``@workflow`` awaited inside a workflow), detached ones included.

        Raises:
            StarflowError: a filter is invalid (named with its value).
        """
        problems = []
        if status is not None and status not in RUN_STATUSES:
            problems.append(f"status must be one of {', '.join(RUN_STATUSES)}: {status!r}")
        if (problem := int_problem("limit", limit, 1)) is not None:
            problems.append(problem)
        elif limit > MAX_LIST_LIMIT:
            problems.append(f"limit must be at most {MAX_LIST_LIMIT}: {limit!r}")
        if (problem := name_problem("template_id", template_id, optional=True)) is not None:
            problems.append(problem)
        if since is not None and (not isinstance(since, datetime) or since.tzinfo is None):
            problems.append(f"since must be timezone-aware: {since!r}")
        encoded: dict[str, str] | None = None
        if attributes is not None:
            try:
                encoded = encode_attributes(attributes, what="attributes")
            except InvalidArgument as exc:
                problems.append(str(exc))
        if parent_run_id is not None:
            try:
                parent_run_id = self._run_id(parent_run_id)
            except StarflowError as exc:
                problems.append(f"parent_run_id: {exc}")
        if problems:
            raise InvalidArgument("list_runs: " + "; ".join(problems))
        return await self.adapter.list_runs(status=status, template_id=template_id,
                                            parent_run_id=parent_run_id,
                                            since=since, limit=limit, attributes=encoded)

    @_names_run_key
    async def get_attributes(self, run_id: str) -> dict[str, str | int | bool]:
        """The searchable attributes of one run, key -> value (empty: none set).

        Those set at its start (``sf.options(attributes=...)``) and by its
        workflow (``starflow.set_attributes``) once written (with the run's
        next boundary), the latest value of each key.

        Raises:
            RunNotFound: no such run.
        """
        run_id = self._run_id(run_id)
        if await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        stored = await self.adapter.get_run_attributes(run_id)
        return {key: serde.decode(text.encode()) for key, text in stored.items()}

    @_names_run_key
    async def events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        """The run's ``workflow_run_events`` rows in order.

        Args:
            after_id: Only the events after this one (a :attr:`RunEvent.id`):
                what a reader that polls has not seen yet.

        Raises:
            RunNotFound: no such run.
            InvalidArgument: ``after_id`` is not an int >= 0.
        """
        run_id = self._run_id(run_id)
        if (problem := int_problem("after_id", after_id, 0)) is not None:
            raise InvalidArgument(f"events: {problem}")
        events = await self.adapter.list_events(run_id, after_id=after_id)
        if not events and await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return events

    @_names_run_key
    async def waits(self, run_id: str) -> list[WaitRecord]:
        """What the run is registered to wake on: one :class:`~starflow.records.WaitRecord`
        per open wait (the node, its event, its timer's deadline); empty
        unless the run is paused or about to pause.

        Raises:
            RunNotFound: no such run.
        """
        run_id = self._run_id(run_id)
        waits = await self.adapter.list_waits(run_id)
        if not waits and await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return waits

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        """One page of runs, newest first, with the filters, counts and keyset cursor
        of :class:`~starflow.adapters.pages.RunPageQuery` (what ``starflow ui``'s runs
        table reads): pass ``page.next`` as ``after=`` for the next page.

        Unlike :meth:`list_runs`, it filters by time range, lease expiry and run-id
        prefix too, and counts the matching runs by status (``counts=True``).

        Raises:
            StarflowError: the query is invalid (every problem named; nothing read).
        """
        return await self.adapter.list_runs_page(query)

    async def count_due_timers(self, before: datetime, *, limit: int = 100) -> int:
        """How many durable timers fell due at or before ``before`` and have not
        fired: wait deadlines (``sleep``, ``wait_for`` timeouts) and deadlines of
        queued runs, counted up to ``limit``.

        A maintenance loop fires a timer within a poll of its deadline: many
        timers well past due mean none runs (``starflow ui``'s operations page
        asks with ``before`` a little in the past).

        Raises:
            InvalidArgument: ``before`` is naive, or ``limit`` is not an int >= 1.
        """
        problems = []
        if not isinstance(before, datetime) or before.tzinfo is None:
            problems.append(f"before must be a timezone-aware datetime: {before!r}")
        if (problem := int_problem("limit", limit, 1)) is not None:
            problems.append(problem)
        elif limit > MAX_LIST_LIMIT:
            problems.append(f"limit must be at most {MAX_LIST_LIMIT}: {limit!r}")
        if problems:
            raise InvalidArgument("count_due_timers: " + "; ".join(problems))
        waits = await self.adapter.due_waits(before, limit=limit)
        queued = await self.adapter.due_run_deadlines(before, limit=limit)
        return min(len(waits) + len(queued), limit)

    @_names_run_key
    async def export_run(self, run_id: str) -> dict[str, Any]:
        """The run's history as JSON-ready builtins, wake tokens redacted: one
        object of the file ``starflow runs export`` writes and ``starflow replay``
        (:func:`starflow.admin.history.load_history`) reads.

        Raises:
            RunNotFound: no such run.
        """
        return await export_run(self.adapter, self._run_id(run_id))

    @property
    def workspace_id(self) -> str:
        """The workspace every read and write of this app is scoped to."""
        return self.adapter.workspace_id

    @property
    def env(self) -> str:
        """The environment every read and write of this app is scoped to."""
        return self.adapter.env

    @overload
    async def result(self, run_id: RunHandle[R], timeout: timedelta | float | None = None
                     ) -> R: ...

    @overload
    async def result(self, run_id: str, timeout: timedelta | float | None = None) -> Any: ...

    @_names_run_key
    async def result(self, run_id: RunHandle[Any] | str,
                     timeout: timedelta | float | None = None) -> Any:
        """Wait until the run ends and return its value, decoded to the annotated type.

        Given the :class:`RunHandle` that ``run`` or ``start`` returned, a type
        checker knows the value's type (the workflow's return annotation); given
        a run id, it is ``Any``.

        A run that ended with ``starflow.continue_as_new`` is followed to the run
        it continued as, and so on: the value is the chain's last run's.

        Raises:
            WorkflowFailed: the run ended with ``error``; it carries the cause:
                ``node_id`` of the failing step (if a step failure ended the run),
                ``error_type``, ``error_message`` and ``attempts``.
            RunCancelled: the run was cancelled (a ``WorkflowFailed``).
            ResultTimeout: ``timeout`` passed first (the run goes on).
        """
        if isinstance(run_id, RunHandle):
            run_id = run_id.run_id
        runner = self.runner
        run_id = self._run_id(run_id)
        limit = _result_timeout(timeout)
        deadline = None if limit is None else self.clock.now() + timedelta(seconds=limit)
        while True:  # once per run of a continue_as_new chain
            run = await self._await_end(run_id, deadline, limit)
            if run.continued_as is None:
                return runner.decode_result(run)
            run_id = run.continued_as

    async def _await_end(self, run_id: str, deadline: datetime | None,
                         limit: float | None) -> RunInfo:
        """The run's row once it ended with ``success`` (else its error, raised)."""
        runner = self.runner
        poll = self.config.poll_interval.total_seconds()
        async with WatchWhenWaiting(self.adapter, run_id) as watch:
            while True:
                # Taken before the read: a change after it (in this process, or
                # announced by another once watching) wakes us; poll_interval is
                # the fallback. The watch starts only if the first read must wait.
                settled = runner.settled
                changed = watch.arm()
                run = await self.get_run(run_id)
                if run.status == "success":
                    return run
                if run.status == "cancelled":
                    raise RunCancelled(run_id, run.error)
                if run.status == "error":
                    raise runner.failure(run)
                now = self.clock.now()
                if deadline is not None and now >= deadline:
                    raise ResultTimeout(
                        f"run {run_id} is still {run.status} after {limit:g} s; it goes on",
                        run_id=run_id)
                if await watch.start():
                    continue  # announcements reach us from now on: read again first
                wait = poll if deadline is None else min(poll, (deadline - now).total_seconds())
                await runner.wait_settled(wait, settled, *changed)

    # -- events and streams (#17) -------------------------------------------------------

    def _data(self) -> DataReader:
        runner = self.runner
        return DataReader(self.adapter, self.clock, lambda: runner.settled,
                          self.config.poll_interval.total_seconds())

    @overload
    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None, type: type[R]) -> R: ...

    @overload
    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None) -> Any: ...

    @_names_run_key
    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None, type: Any = Any) -> Any:
        """The value the run published under ``key`` (``starflow.set_event``), as
        soon as it is set: at once if it is, else when the unit that writes it
        commits (woken in this process, and on PostgreSQL by ``NOTIFY`` from any
        process). The latest value if it was set more than once.

        Args:
            type: Convert the value to this type (a dataclass, Struct, Pydantic
                model…); as stored (JSON builtins) by default.

        Raises:
            ResultTimeout: not set within ``timeout`` (the run goes on).
            RunFinished: the run ended without setting it.
            RunNotFound: no such run.
            InvalidArgument: a bad key.
            SerializationError: the value does not fit ``type``.
        """
        run_id = self._run_id(run_id)
        value = await self._data().get_event(run_id, key, _result_timeout(timeout))
        return serde.convert(value, type, what=f"event {key!r} of run {run_id}",
                             run_id=run_id)

    @overload
    def read_stream(self, run_id: str, key: str, *, type: type[R]) -> AsyncIterator[R]: ...

    @overload
    def read_stream(self, run_id: str, key: str) -> AsyncIterator[Any]: ...

    def read_stream(self, run_id: str, key: str, *, type: Any = Any) -> AsyncIterator[Any]:
        """Every value the run wrote to stream ``key`` (``starflow.write_stream``),
        in order, from the first; live values as they are written. Ends when
        the run closes the stream (``starflow.close_stream``) or ends.

        ::

            async for token in sf.read_stream(run.run_id, "tokens"):
                print(token)

        Args:
            type: Convert each value to this type (a dataclass, Struct, Pydantic
                model…); as stored (JSON builtins) by default.

        Raises:
            RunNotFound: no such run.
            InvalidArgument: a bad key.
            SerializationError: a value does not fit ``type``.
        """
        return self._read_stream(run_id, key, type)

    async def _read_stream(self, run_id: str, key: str, type_: Any) -> AsyncIterator[Any]:
        run_id = self._run_id(run_id)
        async for value in self._data().read_stream(run_id, key):
            yield serde.convert(value, type_, what=f"stream {key!r} value of run {run_id}",
                                run_id=run_id)

    @_names_run_key
    async def fork(self, run_id: str, *, from_node: str) -> RunHandle[Any]:
        """A new run of an ended run's workflow, version and arguments whose history
        is the source's without ``from_node`` and what followed it; it runs from there.

        For redoing a run after a bug fix from the step that went wrong::

            handle = await sf.fork(run_id, from_node="step:charge#1")

        The recorded outcomes before ``from_node``, and of the nodes that ran
        beside it (started before it ended: the other steps of a ``gather``),
        are replayed, not re-run; ``from_node`` and every node that started after
        it ended run again. The events and stream items the kept nodes published
        are copied. The source is not
        changed. A fork of an inline run is driven here (until it pauses or
        ends), of a queued run goes to the queue of the same pool.

        Raises:
            RunNotEnded: the run is still queued, running or paused.
            NodeNotInHistory: ``from_node`` is not in its history (the error lists
                the nodes it has).
            RunNotFound: no such run.
        """
        handle = await fork_run(self.runner, self._run_id(run_id), from_node)
        return self._track(handle)


    # -- bulk actions (#30) ---------------------------------------------------------

    async def cancel_runs(self, filter: RunFilter, *, dry_run: bool = False,
                          limit: int | None = DEFAULT_BULK_LIMIT,
                          force: bool = False) -> BulkResult:
        """Cancel every queued, running or paused run the filter matches, each with
        :meth:`cancel` (the cancel cascades to its attached children).

        ::

            result = await sf.cancel_runs(RunFilter(template_id="order", since=day_ago))

        The matches are read page by page (newest first, by keyset), never all
        at once. They are counted first: more than ``limit`` raises
        :class:`~starflow.TooManyRuns` before any is cancelled. A run that ended
        between the match and its cancel is skipped (``BulkResult.skipped``
        says why), not an error.

        Args:
            filter: Which runs (at least one criterion, or ``all=True``).
            dry_run: Only count the matching runs; write nothing.
            limit: Refuse when more runs than this match (``None``: no cap).
            force: As :meth:`cancel`'s ``force``: end each run now, no cleanup.

        Raises:
            InvalidArgument: the filter is empty or invalid, or names a status
                a cancel does not apply to (nothing written).
            TooManyRuns: more than ``limit`` runs match (nothing written).
        """
        async def act(run: RunInfo) -> str | None:
            await self.cancel(run.id, force=force)
            return None
        return await self._bulk("cancel", filter, dry_run, limit, act)

    async def retry_runs(self, filter: RunFilter, *, dry_run: bool = False,
                         limit: int | None = DEFAULT_BULK_LIMIT) -> BulkResult:
        """Retry every run in ``error`` the filter matches, each with :meth:`retry`
        (the step that failed runs again with the code deployed now; recorded
        successes are kept). Inline runs are driven here, one after another.

        Paged, counted and capped as :meth:`cancel_runs`; a run retried or
        ended otherwise between the match and its retry is skipped.

        Raises:
            InvalidArgument: the filter is empty or invalid, or names a status
                other than ``error`` (nothing written).
            TooManyRuns: more than ``limit`` runs match (nothing written).
        """
        async def act(run: RunInfo) -> str | None:
            await self.retry(run.id)
            return None
        return await self._bulk("retry", filter, dry_run, limit, act)

    async def fork_runs(self, filter: RunFilter, *, from_node: str, dry_run: bool = False,
                        limit: int | None = DEFAULT_BULK_LIMIT) -> BulkResult:
        """Fork every ended run the filter matches from ``from_node``, each with
        :meth:`fork`: for redoing a batch of runs after a fix from the step they
        share. A matched run whose history lacks ``from_node`` is skipped (and
        listed with the reason), not an error. ``BulkResult.forks`` maps each
        source run to its new run.

        Paged, counted and capped as :meth:`cancel_runs`; the new runs are never
        matched themselves.

        Raises:
            InvalidArgument: the filter is empty or invalid, names a status that
                has not ended, or ``from_node`` is blank (nothing written).
            TooManyRuns: more than ``limit`` runs match (nothing written).
        """
        if not isinstance(from_node, str) or not from_node.strip():
            raise InvalidArgument(f"fork_runs: from_node must be a node id such as "
                                  f"'step:charge#1': {from_node!r}")
        made: set[str] = set()  # the forks are ended runs too: never fork a fork made here

        async def act(run: RunInfo) -> str | None:
            if run.id in made:
                return "a run forked by this call"
            handle = await self.fork(run.id, from_node=from_node)
            made.add(handle.run_id)
            return handle.run_id
        return await self._bulk("fork", filter, dry_run, limit, act, skip_ids=made)

    async def _bulk(self, action: str, run_filter: RunFilter, dry_run: bool,
                    limit: int | None, act: Callable[[RunInfo], Awaitable[str | None]],
                    skip_ids: set[str] | None = None) -> BulkResult:
        """Count the matches (up to ``limit + 1``), then act on each, page by page."""
        query = bulk_query(action, run_filter, limit)
        if dry_run or limit is not None:
            # Counted before anything is written: past the cap, nothing is.
            counted = 0
            async for _ in self._matches(query, None if dry_run or limit is None
                                         else limit + 1):
                counted += 1
            if dry_run:
                return BulkResult(action=action, dry_run=True, matched=counted)
            if limit is not None and counted > limit:
                raise TooManyRuns(action, limit)
        matched = acted = skipped_count = failed_count = 0
        skipped: dict[str, str] = {}
        failed: dict[str, str] = {}
        forks: dict[str, str] = {}
        async for run in self._matches(query, None):
            if skip_ids is not None and run.id in skip_ids:
                continue  # made by this call: not a match
            matched += 1
            reason: str | None = None
            try:
                made = await act(run)
            except (RunFinished, RunNotEnded, RunNotFound, NodeNotInHistory) as exc:
                reason = str(exc)  # it moved on since the match, or lacks the node
            except StorageError:
                raise
            except StarflowError as exc:
                now = await self.adapter.get_run(run.id)
                if now is not None and now.status not in BULK_STATUSES[action]:
                    reason = f"{now.status}: {exc}"  # it moved on since the match
                else:
                    _log.warning("bulk action failed for a run", action=action,
                                 run_id=run.id, error=str(exc))
                    failed_count += 1
                    if len(failed) < MAX_REPORTED:
                        failed[run.id] = f"{type(exc).__name__}: {exc}"
                    continue
            else:
                acted += 1
                if made is not None and len(forks) < MAX_REPORTED:
                    forks[run.id] = made
                continue
            skipped_count += 1
            if len(skipped) < MAX_REPORTED:
                skipped[run.id] = reason
        _log.info("bulk action done", action=action, matched=matched, acted=acted,
                  skipped=skipped_count, failed=failed_count)
        return BulkResult(action=action, dry_run=False, matched=matched, acted=acted,
                          skipped=skipped, skipped_count=skipped_count, failed=failed,
                          failed_count=failed_count, forks=forks)

    async def _matches(self, query: RunPageQuery, most: int | None) -> AsyncIterator[RunInfo]:
        """The runs ``query`` matches, newest first, one page at a time (at most
        ``most`` of them)."""
        after: RunCursor | None = None
        seen = 0
        while True:
            page = await self.adapter.list_runs_page(
                msgspec.structs.replace(query, after=after))
            for run in page.runs:
                yield run
                seen += 1
                if most is not None and seen >= most:
                    return
            if page.next is None:
                return
            after = page.next



def bulk_query(action: str, run_filter: RunFilter, limit: int | None) -> RunPageQuery:
    """The page query of a bulk action's filter.

    Raises:
        InvalidArgument: every problem of the filter and limit, named with its value.
    """
    what = f"{action}_runs"
    if not isinstance(run_filter, RunFilter):
        raise InvalidArgument(f"{what}: the filter must be a starflow.RunFilter, got "
                              f"{type(run_filter).__name__}")
    problems: list[str] = []
    applies = BULK_STATUSES[action]
    f = run_filter
    if f.empty and not f.all:
        problems.append("the filter has no criterion: give status, template_id, since, "
                        "until, attributes or pool, or RunFilter(all=True) to act on every "
                        f"{' / '.join(applies)} run")
    if f.status is not None and f.status not in applies:
        if f.status in RUN_STATUSES:
            problems.append(f"status {f.status!r}: {action} applies only to "
                            f"{', '.join(applies)} runs")
        else:
            problems.append(f"status must be one of {', '.join(applies)}: {f.status!r}")
    if limit is not None and (problem := int_problem("limit", limit, 1)) is not None:
        problems.append(problem + " (or None for no cap)")
    for key in ("template_id", "pool"):
        if (problem := name_problem(key, getattr(f, key), optional=True)) is not None:
            problems.append(problem)
    for key in ("since", "until"):
        value = getattr(f, key)
        if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
            problems.append(f"{key} must be a timezone-aware datetime: {value!r}")
    encoded: dict[str, str] | None = None
    if f.attributes:
        try:
            encoded = encode_attributes(f.attributes, what="attributes")
        except InvalidArgument as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidArgument(f"{what}: " + "; ".join(problems) + "; nothing was written")
    return RunPageQuery(status=f.status, statuses=applies, template_id=f.template_id,
                        pool=f.pool, started_from=f.since, started_before=f.until,
                        attributes=encoded, limit=BULK_PAGE)


#: The largest ``list_runs(limit=)``: a 32-bit count, which both databases'
#: LIMIT takes (past 2**63 SQLite raised a raw OverflowError).
MAX_LIST_LIMIT = 2**31 - 1


def _result_timeout(timeout: object) -> float | None:
    """``Starflow.result``'s timeout in seconds: None, or a finite number >= 0 (a
    timedelta or seconds) no longer than :data:`~starflow.limits.MAX_DURATION`."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, int | float) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise InvalidArgument(f"result timeout must be a timedelta or seconds: {timeout!r}")
    longest = MAX_DURATION.total_seconds()
    if not math.isfinite(seconds) or seconds < 0 or seconds > longest:
        raise InvalidArgument(
            f"result timeout must be between 0 and {longest:.0f} seconds (100 years): "
            f"{timeout!r}")
    return seconds
