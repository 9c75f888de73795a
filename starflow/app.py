"""``Starflow``: the application object users open, run workflows with and query."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from . import serde
from .adapters.base import WatchWhenWaiting
from .app_core import RunOptions, workflow_definition
from .app_ops import StarflowOps, check_session_names
from .config import int_problem
from .errors import (
    InvalidArgument,
    ResultTimeout,
    RunCancelled,
    RunFinished,
    RunNotFound,
    StarflowError,
    UpdateRejected,
)
from .limits import MAX_DURATION, name_problem, normalize_run_id
from .records import RUN_STATUSES, RunEvent, RunInfo
from .runtime.forks import fork_run
from .runtime.runner import RunHandle
from .workflow.attributes import encode_attributes
from .workflow.events import DataReader

__all__ = ["RunOptions", "Starflow", "check_session_names", "workflow_definition"]


R = TypeVar("R")


class Starflow(StarflowOps):
    """A connection to one workflow database, scoped to (``workspace_id``, ``env``).

    Open it with ``async with Starflow.open(url) as sf:``. While open, it
    fires the durable timers of the inline runs it paused and drains its own
    warm-tier outbox; with ``maintenance=True`` it also runs the lease sweep,
    every run's timers and session-var GC (see :meth:`open`).
    """

    # -- waking runs ---------------------------------------------------------------

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
        return self._track(await self.runner.signal(normalize_run_id(run_id), event, payload))

    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None) -> Any:
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

        Raises:
            UpdateRejected: the workflow rejected the request.
            ResultTimeout: no answer within ``timeout``.
            RunFinished: the run ended without answering.
            RunNotFound: no such run.
            InvalidArgument / SerializationError: bad name, id or payload
                (nothing written).
        """
        run_id = normalize_run_id(run_id)
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
        return output.get("reply")

    async def resume(self, wake_token: str, payload: Any = None) -> RunHandle[Any]:
        """Wake the wait a token was issued for, with ``payload``.

        Raises:
            InvalidWakeToken: forged, expired, used, or for another wait (nothing written).
        """
        return self._track(await self.runner.resume(wake_token, payload))

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
        return self._track(await self.runner.cancel(normalize_run_id(run_id), force=force))

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
        return self._track(await self.runner.retry(normalize_run_id(run_id)))
    # -- queries -------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunInfo:
        """The ``workflow_runs`` row (read cold)."""
        run_id = normalize_run_id(run_id)
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
                parent_run_id = normalize_run_id(parent_run_id)
            except StarflowError as exc:
                problems.append(f"parent_run_id: {exc}")
        if problems:
            raise InvalidArgument("list_runs: " + "; ".join(problems))
        return await self.adapter.list_runs(status=status, template_id=template_id,
                                            parent_run_id=parent_run_id,
                                            since=since, limit=limit, attributes=encoded)

    async def get_attributes(self, run_id: str) -> dict[str, str | int | bool]:
        """The searchable attributes of one run, key -> value (empty: none set).

        Those set at its start (``sf.options(attributes=...)``) and by its
        workflow (``starflow.set_attributes``) once written (with the run's
        next boundary), the latest value of each key.

        Raises:
            RunNotFound: no such run.
        """
        run_id = normalize_run_id(run_id)
        if await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        stored = await self.adapter.get_run_attributes(run_id)
        return {key: serde.decode(text.encode()) for key, text in stored.items()}

    async def events(self, run_id: str) -> list[RunEvent]:
        """The run's ``workflow_run_events`` rows in order."""
        run_id = normalize_run_id(run_id)
        if await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return await self.adapter.list_events(run_id)

    @overload
    async def result(self, run_id: RunHandle[R], timeout: timedelta | float | None = None
                     ) -> R: ...

    @overload
    async def result(self, run_id: str, timeout: timedelta | float | None = None) -> Any: ...

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
        run_id = normalize_run_id(run_id)
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

    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None) -> Any:
        """The value the run published under ``key`` (``starflow.set_event``), as
        soon as it is set: at once if it is, else when the unit that writes it
        commits (woken in this process, and on PostgreSQL by ``NOTIFY`` from any
        process). The latest value if it was set more than once.

        Raises:
            ResultTimeout: not set within ``timeout`` (the run goes on).
            RunFinished: the run ended without setting it.
            RunNotFound: no such run.
            InvalidArgument: a bad key.
        """
        return await self._data().get_event(normalize_run_id(run_id), key,
                                            _result_timeout(timeout))

    async def read_stream(self, run_id: str, key: str) -> AsyncIterator[Any]:
        """Every value the run wrote to stream ``key`` (``starflow.write_stream``),
        in order, from the first; live values as they are written. Ends when
        the run closes the stream (``starflow.close_stream``) or ends.

        ::

            async for token in sf.read_stream(run.run_id, "tokens"):
                print(token)

        Raises:
            RunNotFound: no such run.
            InvalidArgument: a bad key.
        """
        async for value in self._data().read_stream(normalize_run_id(run_id), key):
            yield value

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
        handle = await fork_run(self.runner, normalize_run_id(run_id), from_node)
        return self._track(handle)


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
