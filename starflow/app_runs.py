"""Talking to runs for :class:`~starflow.Starflow`: the waits of ``update`` and
``result``, what ``resume`` is given, and the checks of its queries.

:class:`Runs` holds the bodies; ``Starflow``'s methods (signatures, docstrings)
call it, so the class stays one place to read what it offers.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from . import serde
from .adapters.base import WatchWhenWaiting, WorkflowStateAdapter
from .app_start import AppParts
from .config import int_problem
from .errors import (
    InvalidArgument,
    InvalidWakeToken,
    ResultTimeout,
    RunCancelled,
    RunFinished,
    RunNotFound,
    StarflowError,
    UpdateRejected,
)
from .limits import MAX_DURATION, WAKE_TOKEN_PREFIX, name_problem
from .records import RUN_STATUSES, RunInfo
from .runtime.runner import RunHandle, Runner
from .workflow.attributes import encode_attributes

__all__ = ["MAX_LIST_LIMIT", "Runs", "check_due_timers", "check_list_runs", "names_run_key",
           "result_timeout"]

_Call = TypeVar("_Call", bound=Callable[..., Awaitable[Any]])

#: The largest ``list_runs(limit=)``: a 32-bit count, which both databases'
#: LIMIT takes (past 2**63 SQLite raised a raw OverflowError).
MAX_LIST_LIMIT = 2**31 - 1


def names_run_key(method: _Call) -> _Call:
    """A ``RunNotFound`` from ``method(self, run_id, ...)`` given a run key names
    the key, not only the id it derives (``run order-123 not found…``)."""

    @functools.wraps(method)
    async def call(self: AppParts, run_id: Any, /, *args: Any, **kwargs: Any) -> Any:
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


class Runs:
    """The bodies of ``Starflow``'s calls that wait on a run or read what it is."""

    def __init__(self, app: AppParts) -> None:
        self._app = app

    async def get(self, run_id: str) -> RunInfo:
        """The run's row (``run_id`` canonical), read cold.

        Raises:
            RunNotFound: no such run.
        """
        run = await self._app.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    # -- update ----------------------------------------------------------------------

    async def update(self, run_id: str, name: str, payload: Any,
                     timeout: timedelta | float | None, update_id: str | None,
                     type_: Any) -> Any:
        """:meth:`Starflow.update <starflow.Starflow.update>`: queue the request
        (once per ``update_id``) on the chain's current run, then wait for its answer."""
        app = self._app
        run_id = app.adapter.normalize_run_id(run_id)
        uid = update_id if update_id is not None else str(uuid.uuid4())
        limit = result_timeout(timeout)
        runner = app.runner
        deadline = None if limit is None else app.clock.now() + timedelta(seconds=limit)
        run_id, answer = await self._request(runner, run_id, name, payload, uid,
                                             retry=update_id is not None)
        if answer is None:
            answer = await self._await_answer(runner, run_id, name, uid, deadline, limit)
        node_id, output = answer
        if "rejected" in output:
            raise UpdateRejected(run_id, name, uid, str(output["rejected"]), node_id=node_id)
        return serde.convert(output.get("reply"), type_,
                             what=f"answer to update {name!r} of run {run_id}",
                             run_id=run_id, node_id=node_id)

    async def _request(self, runner: Runner, run_id: str, name: str, payload: Any, uid: str,
                       *, retry: bool) -> tuple[str, tuple[str, dict[str, Any]] | None]:
        """Queue the update on the chain's current run (the run, no answer yet), or,
        for a ``retry``, find the answer a run of the chain gave (that run, its answer)."""
        app = self._app
        while True:  # again if the run continued as new before the request was queued
            chain = await runner.chain(run_id)
            if retry:  # a retry: answered by a run of the chain?
                for run in chain:
                    answer = await runner.update_answer(run.id, uid)
                    if answer is not None:
                        return run.id, answer
            run_id = chain[-1].id
            try:
                handle = await runner.request_update(run_id, name, payload, uid)
            except RunFinished as exc:
                current = await app.adapter.get_run(run_id)
                if current is not None and current.continued_as is not None:
                    continue
                if not retry:
                    raise
                # A retry of a request the run may have taken before it ended.
                raise RunFinished(run_id, exc.status, "update", await self._unanswered(
                    runner, [run.id for run in chain], name, uid)) from None
            if handle is not None:
                app._track(handle)
            return run_id, None

    async def _await_answer(self, runner: Runner, run_id: str, name: str, uid: str,
                            deadline: datetime | None, limit: float | None
                            ) -> tuple[str, dict[str, Any]]:
        """The update's recorded answer (node id, output), once there is one."""
        app = self._app
        poll = app.config.poll_interval.total_seconds()
        async with WatchWhenWaiting(app.adapter, run_id) as watch:
            while True:
                # Taken before the read: a change after it (in this process, or
                # announced by another once watching) wakes us; poll_interval is
                # the fallback. The watch starts only if the first read must wait.
                settled = runner.settled
                changed = watch.arm()
                answer = await runner.update_answer(run_id, uid)
                if answer is not None:
                    return answer
                run = await self.get(run_id)
                if run.is_terminal:
                    answer = await runner.update_answer(run_id, uid)  # answered, then ended
                    if answer is None:
                        raise RunFinished(run_id, run.status, "update", await self._unanswered(
                            runner, [run_id], name, uid))
                    return answer
                now = app.clock.now()
                if deadline is not None and now >= deadline:
                    raise ResultTimeout(
                        f"run {run_id} did not answer update {name!r} (id {uid}) within "
                        f"{limit:g} s; the request stays queued: call update again with "
                        f"update_id={uid!r} to wait for its answer", run_id=run_id)
                if await watch.start():
                    continue  # announcements reach us from now on: read again first
                wait = poll if deadline is None else min(poll, (deadline - now).total_seconds())
                await runner.wait_settled(wait, settled, *changed)

    @staticmethod
    async def _unanswered(runner: Runner, run_ids: list[str], name: str, uid: str) -> str:
        """Why the ended runs ``run_ids`` (a chain) never answered update ``name`` (id ``uid``)."""
        for run_id in run_ids:
            node = await runner.update_receipt(run_id, uid)
            if node is not None:
                break
        else:
            return f"it ended before it received update {name!r} (id {uid})"
        return (f"the workflow (run {run_id}) received update {name!r} (id {uid}) at {node} "
                "but returned without answering it: answer each request with "
                "`await request.reply(value)` "
                "or `await request.reject(reason)` (for a `wait_for_message` result, "
                "`message.update.reply(...)`) before the workflow returns")

    # -- result ----------------------------------------------------------------------

    async def result(self, run_id: RunHandle[Any] | str,
                     timeout: timedelta | float | None) -> Any:
        """:meth:`Starflow.result <starflow.Starflow.result>`: the value of the
        chain's last run, once it ended."""
        app = self._app
        if isinstance(run_id, RunHandle):
            run_id = run_id.run_id
        runner = app.runner
        run_id = app.adapter.normalize_run_id(run_id)
        limit = result_timeout(timeout)
        deadline = None if limit is None else app.clock.now() + timedelta(seconds=limit)
        while True:  # once per run of a continue_as_new chain
            run = await self._await_end(run_id, deadline, limit)
            if run.continued_as is None:
                return runner.decode_result(run)
            run_id = run.continued_as

    async def _await_end(self, run_id: str, deadline: datetime | None,
                         limit: float | None) -> RunInfo:
        """The run's row once it ended with ``success`` (else its error, raised)."""
        app = self._app
        runner = app.runner
        poll = app.config.poll_interval.total_seconds()
        async with WatchWhenWaiting(app.adapter, run_id) as watch:
            while True:
                # Taken before the read: a change after it (in this process, or
                # announced by another once watching) wakes us; poll_interval is
                # the fallback. The watch starts only if the first read must wait.
                settled = runner.settled
                changed = watch.arm()
                run = await self.get(run_id)
                if run.status == "success":
                    return run
                if run.status == "cancelled":
                    raise RunCancelled(run_id, run.error)
                if run.status == "error":
                    raise runner.failure(run)
                now = app.clock.now()
                if deadline is not None and now >= deadline:
                    raise ResultTimeout(
                        f"run {run_id} is still {run.status} after {limit:g} s; it goes on",
                        run_id=run_id)
                if await watch.start():
                    continue  # announcements reach us from now on: read again first
                wait = poll if deadline is None else min(poll, (deadline - now).total_seconds())
                await runner.wait_settled(wait, settled, *changed)

    # -- resume ----------------------------------------------------------------------

    async def resumable_run(self, value: object) -> str | None:
        """The run :meth:`Starflow.resume <starflow.Starflow.resume>` is given (a
        run id, or the key of a run that exists), or ``None`` for a wake token
        (or what is meant as one)."""
        if isinstance(value, str) and value.startswith(WAKE_TOKEN_PREFIX):
            return None
        adapter = self._app.adapter
        try:
            ref = adapter.run_ref(value)
        except InvalidArgument:
            return None  # not a run id nor a key: a malformed token
        if ref.key is None:
            return ref.id
        if await adapter.get_run(ref.id) is None:
            raise InvalidWakeToken(
                "malformed", f"{ref.key[:60]!r} is not a wake token ({WAKE_TOKEN_PREFIX}…), "
                f"nor the key of a run in workspace {adapter.workspace_id}/{adapter.env}")
        return ref.id


def check_list_runs(adapter: WorkflowStateAdapter, status: object, template_id: object,
                    limit: object, since: object,
                    attributes: Mapping[str, str | int | bool] | None,
                    parent_run_id: object) -> tuple[dict[str, str] | None, str | None]:
    """``list_runs``' filters: the encoded attributes and the parent's run id.

    Raises:
        InvalidArgument: every problem, named with its value.
    """
    problems = []
    if status is not None and status not in RUN_STATUSES:
        problems.append(f"status must be one of {', '.join(RUN_STATUSES)}: {status!r}")
    problems += _limit_problems(limit)
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
    parent: str | None = None
    if parent_run_id is not None:
        try:
            parent = adapter.normalize_run_id(parent_run_id)
        except StarflowError as exc:
            problems.append(f"parent_run_id: {exc}")
    if problems:
        raise InvalidArgument("list_runs: " + "; ".join(problems))
    return encoded, parent


def check_due_timers(before: object, limit: object) -> None:
    """``count_due_timers``' arguments.

    Raises:
        InvalidArgument: ``before`` is naive, or ``limit`` is not an int >= 1.
    """
    problems = []
    if not isinstance(before, datetime) or before.tzinfo is None:
        problems.append(f"before must be a timezone-aware datetime: {before!r}")
    problems += _limit_problems(limit)
    if problems:
        raise InvalidArgument("count_due_timers: " + "; ".join(problems))


def _limit_problems(limit: object) -> list[str]:
    """A read's ``limit``: an int from 1 to :data:`MAX_LIST_LIMIT`."""
    if (problem := int_problem("limit", limit, 1)) is not None:
        return [problem]
    if cast(int, limit) > MAX_LIST_LIMIT:
        return [f"limit must be at most {MAX_LIST_LIMIT}: {limit!r}"]
    return []


def result_timeout(timeout: object) -> float | None:
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
