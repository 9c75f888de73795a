"""The pages that write: signal, cancel, retry, fork, pause and resume a run, wake one
by token, pause and resume a pool, cancel or retry every run the runs table's filters
match.

Each is a POST with the CSRF token (:meth:`Site.form`), confirmed on a second
page before anything is written, and writes through the same
:class:`~starflow.Starflow` methods the CLI uses (``signal``, ``cancel``,
``retry``, ``fork``, ``resume``). Every check runs before the write: bad input is
answered on the page, with nothing written.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ..app_bulk import DEFAULT_BULK_LIMIT
from ..errors import (
    InvalidArgument,
    InvalidWakeToken,
    StarflowError,
    TooManyRuns,
    UnexpectedSignal,
    WorkflowDefinitionError,
)
from ..records import HELD, RunFilter, RunInfo
from ..serde import check_json_depth
from ..workflow.context import checkpoint_wait
from ..workflow.waits import check_event
from . import views
from .site import BadInput, Site, failure, see_other

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from .pages import Pages

__all__ = ["Actions"]

#: How long a confirmation page for a wake by token stays valid.
PENDING_TTL = 300.0
#: Most wakes by token awaiting confirmation at once.
PENDING_MAX = 1000


@dataclass
class _Pending:
    token: str
    payload: Any
    expires: float


class Actions:
    """The actions of one scope; a refused one is shown on the page it came from
    (a run's page, or the operations page for a wake by token)."""

    def __init__(self, site: Site, pages: Pages) -> None:
        self.site = site
        self.pages = pages
        self._pending: dict[str, _Pending] = {}

    async def _inline_code(self, run: RunInfo, action: str) -> None:
        """An inline run is driven by whoever wakes it: refuse before writing if this
        server cannot import its workflow."""
        try:
            await self.site.sf.runner.resolve(run)
        except WorkflowDefinitionError:
            raise BadInput(
                f"run {run.id} was started inline, so whoever wakes it drives it, and "
                f"workflow {run.template_id!r} v{run.workflow_version} is not registered "
                f"in this server: start starflow ui with --app MODULE (the module that "
                f"defines it), or {action} it from a process that has the code; nothing "
                "was written", 409) from None

    async def action(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        verb = request.path_params["action"]
        try:
            form = await self.site.form(request)
            run = await self.site.run_or_404(run_id)
            handler = {"signal": self._signal, "cancel": self._cancel,
                       "retry": self._retry, "fork": self._fork, "pause": self._pause,
                       "resume": self._resume}.get(verb)
            if handler is None:
                raise BadInput(f"no action {verb!r}: signal, cancel, retry, fork, pause or "
                               "resume", 404)
            return await handler(request, run, form)
        except BadInput as exc:
            return await self.pages.run(request, error=str(exc), status=exc.status)
        except StarflowError as exc:
            return await self.pages.run(request, error=failure(exc), status=409)

    def _confirm(self, request: Request, description: str, fields: Mapping[str, str],
                 run: RunInfo | None = None, payload: views.FoldedJSON | None = None
                 ) -> Response:
        return self.site.render(request, "confirm.html", description=description,
                                fields=dict(fields), run=run, payload=payload,
                                action=str(request.url.path))

    async def _signal(self, request: Request, run: RunInfo, form: Mapping[str, str]
                      ) -> Response:
        sf = self.site.sf
        event = form.get("event", "").strip()
        raw = form.get("payload", "").strip() or "null"
        problems = []
        try:
            check_event(event, "signal", run_id=run.id)
        except StarflowError as exc:
            problems.append(str(exc))
        payload = None
        try:
            check_json_depth(raw, what="the payload")
            payload = msgspec.json.decode(raw)
        except StarflowError as exc:
            problems.append(str(exc))
        except msgspec.DecodeError as exc:
            problems.append(f"the payload is not valid JSON ({exc}): write e.g. "
                            '{"ok": true}, or "text" for a string')
        if problems:
            raise BadInput("; ".join(problems) + "; nothing was written")
        if run.is_terminal:
            raise BadInput(f"run {run.id} has ended ({run.status}): no wait can take a "
                           "signal; nothing was written", 409)
        # The rule Starflow.signal applies (the CLI's too), told before the
        # confirmation: a name outside the workflow's declared signals.
        try:
            await sf.runner.check_signal_name(run, event)
        except UnexpectedSignal as exc:
            raise BadInput(str(exc), 409) from None
        if run.status == "paused" and run.start_mode == "inline":
            await self._inline_code(run, "signal")
        if form.get("confirmed") != "yes":
            return self._confirm(request, f"Send signal {event!r} to run {run.id}?",
                                 {"event": event, "payload": raw}, run=run,
                                 payload=views.fold_json(payload))
        await sf.signal(run.id, event, payload)
        return see_other(request, run.id, "signal")

    async def _cancel(self, request: Request, run: RunInfo, form: Mapping[str, str]
                      ) -> Response:
        if run.is_terminal:
            raise BadInput(f"run {run.id} has already ended ({run.status}); nothing was "
                           "written", 409)
        if form.get("confirmed") != "yes":
            return self._confirm(request, f"Cancel run {run.id} ({run.template_id}, now "
                                 f"{run.status})? It gets RunCancelled where it waits "
                                 "or runs and may run its cleanup steps.", {}, run=run)
        await self.site.sf.cancel(run.id)
        return see_other(request, run.id, "cancel")

    async def _pause(self, request: Request, run: RunInfo, form: Mapping[str, str]
                     ) -> Response:
        if run.is_terminal:
            raise BadInput(f"run {run.id} has already ended ({run.status}); nothing was "
                           "written", 409)
        if run.claim_state == HELD:
            raise BadInput(f"run {run.id} is paused by an operator already; nothing was "
                           "written", 409)
        if form.get("confirmed") != "yes":
            return self._confirm(request, f"Pause run {run.id} ({run.template_id}, now "
                                 f"{run.status})? It stops at its next step (a step in flight "
                                 "finishes first) and keeps its state until resumed; "
                                 "signals sent meanwhile are kept.", {}, run=run)
        await self.site.sf.pause(run.id)
        return see_other(request, run.id, "pause")

    async def _resume(self, request: Request, run: RunInfo, form: Mapping[str, str]
                      ) -> Response:
        if run.is_terminal:
            raise BadInput(f"run {run.id} has already ended ({run.status}); nothing was "
                           "written", 409)
        if run.claim_state != HELD:
            raise BadInput(f"run {run.id} is not paused by an operator (it is {run.status}); "
                           "nothing was written", 409)
        if run.start_mode == "inline" and checkpoint_wait(run.checkpoint_json) is None:
            await self._inline_code(run, "resume")
        if form.get("confirmed") != "yes":
            return self._confirm(request, f"Resume run {run.id} ({run.template_id})? It goes "
                                 "on where it was paused.", {}, run=run)
        await self.site.sf.resume(run.id)
        return see_other(request, run.id, "resume")

    async def pool_action(self, request: Request) -> Response:
        """Pause or resume a pool (``sf.pause_pool`` / ``sf.resume_pool``), confirmed first."""
        from starlette.responses import RedirectResponse

        pool = request.path_params["pool"]
        verb = request.path_params["action"]
        try:
            form = await self.site.form(request)
            if verb not in ("pause", "resume"):
                raise BadInput(f"no pool action {verb!r}: pause or resume", 404)
            if form.get("confirmed") != "yes":
                what = ("no worker claims its queued runs until it is resumed; its running "
                        "runs finish" if verb == "pause" else "workers claim its queued runs "
                        "again")
                return self._confirm(request, f"{verb.capitalize()} pool {pool!r}? {what}.",
                                     {})
            if verb == "pause":
                await self.site.sf.pause_pool(pool)
            else:
                await self.site.sf.resume_pool(pool)
            return RedirectResponse(str(request.url_for("ops")) + "#pools", status_code=303)
        except BadInput as exc:
            return await self.pages.ops(request, error=str(exc), status=exc.status)
        except StarflowError as exc:
            return await self.pages.ops(request, error=failure(exc), status=409)

    async def _retry(self, request: Request, run: RunInfo, form: Mapping[str, str]
                     ) -> Response:
        if run.status != "error":
            raise BadInput(f"run {run.id} is {run.status}: only a run that ended in error "
                           "can be retried; nothing was written", 409)
        if run.start_mode == "inline":
            await self._inline_code(run, "retry")
        if form.get("confirmed") != "yes":
            from_node, _ = await self.site.sf.runner.retry_point(run)
            where = (f"From its failed node: {from_node} and what follows it run again "
                     "with the code deployed now; the steps recorded before it are not "
                     "run again." if from_node else
                     "Its recorded steps replay and the workflow body runs again with the "
                     "code deployed now.")
            return self._confirm(request, f"Retry run {run.id} ({run.template_id})? {where}",
                                 {}, run=run)
        await self.site.sf.retry(run.id)
        return see_other(request, run.id, "retry")

    async def _fork(self, request: Request, run: RunInfo, form: Mapping[str, str]
                    ) -> Response:
        from_node = form.get("from_node", "").strip()
        if not run.is_terminal:
            raise BadInput(f"run {run.id} is still {run.status}: only an ended run can be "
                           "forked; nothing was written", 409)
        nodes = views.recorded_nodes(await self.site.sf.events(run.id))
        if from_node not in nodes:
            raise BadInput(f"run {run.id} has no node {from_node!r} to fork from: choose one "
                           f"of its recorded nodes ({', '.join(nodes[:10]) or 'none'}); "
                           "nothing was written")
        if run.start_mode == "inline":
            await self._inline_code(run, "fork")
        if form.get("confirmed") != "yes":
            return self._confirm(
                request, f"Fork run {run.id} ({run.template_id}) from {from_node}? A new run "
                "replays the history before it (and the steps that ran beside it), then "
                f"runs {from_node} and what follows with the code deployed now. This run is "
                "not changed.", {"from_node": from_node}, run=run)
        handle = await self.site.sf.fork(run.id, from_node=from_node)
        return see_other(request, handle.run_id, "fork")

    async def bulk(self, request: Request) -> Response:
        """Cancel or retry every run the runs table's filters (in the address) match:
        the confirmation shows the dry-run count, and the action is refused if
        more runs match by then (a new run matched: confirm again)."""
        verb = request.path_params["action"]
        sf = self.site.sf
        try:
            form = await self.site.form(request)
            if verb not in ("cancel", "retry"):
                raise BadInput(f"no bulk action {verb!r}: cancel or retry", 404)
            query, _ = self.site.query_from(dict(request.query_params))
            if query.id_prefix is not None:
                raise BadInput("a bulk action does not take the run-id filter: clear it; "
                               "nothing was written")
            run_filter = RunFilter(status=query.status, template_id=query.template_id,
                                   pool=query.pool, since=query.started_from,
                                   until=query.started_before)
            method = sf.cancel_runs if verb == "cancel" else sf.retry_runs
            counted = await method(run_filter, dry_run=True, limit=None)
            n = counted.matched
            if n == 0:
                raise BadInput(f"no runs match these filters that {verb} applies to; "
                               "nothing was written", 409)
            if n > DEFAULT_BULK_LIMIT:
                raise BadInput(f"{n:,} runs match: the page acts on at most "
                               f"{DEFAULT_BULK_LIMIT:,} at once; narrow the filters, or use "
                               f"starflow runs {verb} with --limit N; nothing was written",
                               409)
            if form.get("confirmed") != "yes":
                what = ("Each gets RunCancelled where it waits or runs and may run its "
                        "cleanup steps; their child runs are cancelled too."
                        if verb == "cancel" else
                        "In each, the step that failed (and what follows) runs again with "
                        "the code deployed now; the steps recorded before it are kept.")
                return self.site.render(
                    request, "confirm.html", description=f"{verb.capitalize()} the {n} "
                    f"runs these filters match? {what}", fields={"count": str(n)}, run=None,
                    payload=None, action=f"{request.url.path}?{request.url.query}")
            try:
                confirmed = int(form.get("count", ""))
            except ValueError:
                raise BadInput("the confirmation lost its count: start again; nothing was "
                               "written") from None
            try:
                result = await method(run_filter, limit=max(confirmed, 1))
            except TooManyRuns:
                raise BadInput(f"more runs match now than the {confirmed} you confirmed: "
                               "confirm again; nothing was written", 409) from None
        except BadInput as exc:
            return await self.pages.runs(request, error=str(exc), status=exc.status)
        except InvalidArgument as exc:  # the filters: refused before anything is read
            return await self.pages.runs(request, error=str(exc), status=400)
        except StarflowError as exc:
            return await self.pages.runs(request, error=failure(exc), status=409)
        # Post/redirect/get: reloading the page that says what was done acts again never.
        from starlette.responses import RedirectResponse

        url = request.url_for("runs").include_query_params(
            **dict(request.query_params), done=verb, acted=result.acted,
            skipped=result.skipped_count, failed=result.failed_count)
        return RedirectResponse(str(url), status_code=303)

    async def wake(self, request: Request) -> Response:
        """Wake by token: checked (signature, scope, expiry, the run) before the
        confirmation; the token is kept here, never put back into a page."""
        sf = self.site.sf
        try:
            form = await self.site.form(request)
            self._expire_pending()
            pending_id = form.get("pending")
            if pending_id:
                pending = self._pending.pop(pending_id, None)
                if pending is None:
                    raise BadInput("this confirmation has expired (5 minutes) or was used; "
                                   "enter the token again; nothing was written")
                handle = await sf.resume(pending.token, pending.payload)
                return see_other(request, handle.run_id, "wake")
            token = "".join(form.get("token", "").split())
            raw = form.get("payload", "").strip() or "null"
            try:
                check_json_depth(raw, what="the payload")
                payload = msgspec.json.decode(raw)
            except StarflowError as exc:
                raise BadInput(f"{exc}; nothing was written") from None
            except msgspec.DecodeError as exc:
                raise BadInput(f"the payload is not valid JSON ({exc}); nothing was "
                               "written") from None
            if not token:
                raise BadInput("paste the wake token to use; nothing was written")
            claims = sf.runner.keyring.verify(token, workspace_id=sf.workspace_id,
                                              env=sf.env, now=sf.clock.now())
            run = await self.site.run_or_404(claims.r)
            if run.is_terminal:
                raise BadInput(f"run {run.id} has ended ({run.status}): its token cannot "
                               "wake it; nothing was written", 409)
            if run.start_mode == "inline" and run.status == "paused":
                await self._inline_code(run, "wake")
            if len(self._pending) >= PENDING_MAX:
                raise BadInput("too many wakes waiting for confirmation; try again in a few "
                               "minutes", 429)
            pending_id = secrets.token_urlsafe(24)
            self._pending[pending_id] = _Pending(token, payload,
                                                 time.monotonic() + PENDING_TTL)
            return self._confirm(request, f"Wake run {run.id} at {claims.n} with this "
                                 "payload?", {"pending": pending_id}, run=run,
                                 payload=views.fold_json(payload))
        except BadInput as exc:
            return await self.pages.ops(request, error=str(exc), status=exc.status)
        except InvalidWakeToken as exc:
            return await self.pages.ops(request, error=failure(exc), status=400)
        except StarflowError as exc:
            return await self.pages.ops(request, error=failure(exc), status=409)

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for key in [k for k, p in self._pending.items() if p.expires < now]:
            del self._pending[key]
