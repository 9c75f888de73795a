"""The ASGI app behind ``starflow ui``: runs, a run, operations, and actions.

Server-rendered HTML (Jinja2) with a little hand-written CSS and JS shipped in
the package: no build step, nothing fetched from elsewhere, so the page works
offline. Reads go through the open :class:`~starflow.Starflow` (cold state, the
authority); actions write through the same methods the CLI uses
(``signal``, ``cancel``, ``retry``, ``resume``).

Who may do what:

* With ``token``, every request needs it (``Authorization: Bearer``, or the
  cookie set when the printed ``?token=`` address is opened); without it the
  answer is 401. Without ``token`` (the CLI allows that on 127.0.0.1 only),
  ``allowed_hosts`` keeps other sites from reaching it by DNS rebinding.
* Actions are POST only, carry a CSRF token, and are confirmed on a second
  page. A GET never changes state.
* Bad input is answered with a readable message on the page, and nothing is
  written: every check runs before the write.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

import anyio
import msgspec

from ..adapters.pages import COUNT_CAP, MAX_PAGE, RunCursor, RunPage, RunPageQuery
from ..errors import (
    InvalidWakeToken,
    RunFinished,
    RunNotFound,
    SerializationError,
    StarflowError,
    WarmTierError,
    WorkflowDefinitionError,
)
from ..records import RUN_STATUSES, RunInfo
from ..waits import check_event
from . import views

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ..app import Starflow
    from .scopes import Scopes

__all__ = ["create_app"]

TOKEN_COOKIE = "starflow_ui_token"
#: Host names a loopback server without a token answers to.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
#: A run's page shows its first and last this many events (a long run's page stays small).
TIMELINE_EDGE = 1000
#: Child runs a run page lists (the newest; `starflow runs show` lists more).
CHILDREN_SHOWN = 200
#: Stuck runs the operations page lists (oldest first).
STUCK_SHOWN = 100
#: The largest form accepted (a signal payload included).
MAX_FORM_BYTES = 1024 * 1024
#: How long a confirmation page for a wake by token stays valid.
PENDING_TTL = 300.0
_DONE = {
    "signal": "Signal sent.",
    "cancel": "Run cancelled.",
    "retry": "Run retried.",
    "wake": "Run woken through its token.",
}


class BadInput(Exception):
    """Input the page answers with a message (nothing was written)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _require_deps() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
    except ImportError as exc:
        raise StarflowError(
            f"starflow ui needs {exc.name}: install it with pip install 'starflow-durable[ui]'"
        ) from exc


class TokenAuth:
    """Refuse (401) every request without the access token.

    Accepted: ``Authorization: Bearer TOKEN``, the ``starflow_ui_token``
    cookie, or ``?token=TOKEN`` on a GET, which sets the cookie and redirects
    to the same address without the token (so it leaves the address bar).
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    def _matches(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.datastructures import URL, Headers, QueryParams
        from starlette.requests import cookie_parser
        from starlette.responses import PlainTextResponse, RedirectResponse

        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        cookie = cookie_parser(headers.get("cookie", "")).get(TOKEN_COOKIE)
        if self._matches(bearer) or self._matches(cookie):
            await self.app(scope, receive, send)
            return
        url = URL(scope=scope)
        params = QueryParams(scope.get("query_string", b""))
        if scope.get("method") == "GET" and self._matches(params.get("token")):
            rest = [(k, v) for k, v in params.multi_items() if k != "token"]
            response: Response = RedirectResponse(
                url.path + (f"?{urlencode(rest)}" if rest else ""), status_code=303)
            response.set_cookie(TOKEN_COOKIE, self._token.decode(), httponly=True,
                                samesite="strict", path=scope.get("root_path") or "/")
            await response(scope, receive, send)
            return
        response = PlainTextResponse(
            "401 Unauthorized: this starflow ui needs its access token. Open the address "
            "`starflow ui` printed (it ends in ?token=…), or send Authorization: Bearer "
            "TOKEN.\n", status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


@dataclass
class _Pending:
    token: str
    payload: Any
    expires: float


class UI:
    """The pages and actions of one Starflow (one workspace and env)."""

    def __init__(self, sf: Starflow, *, poll_interval: float, page_size: int,
                 title: str | None, switch: bool = False) -> None:
        from jinja2 import Environment, PackageLoader, select_autoescape
        from starlette.templating import Jinja2Templates

        self.sf = sf
        self.poll_interval = poll_interval
        self.page_size = page_size
        self.title = title or "starflow"
        self.switch = switch
        self._secret = secrets.token_bytes(32)
        self._pending: dict[str, _Pending] = {}
        env = Environment(loader=PackageLoader("starflow.ui", "templates"),
                          autoescape=select_autoescape(default=True), trim_blocks=True,
                          lstrip_blocks=True)
        env.filters.update(iso=views.iso, duration=views.human_duration,
                           bucket=views.bucket_label,
                           count=lambda n: f"{COUNT_CAP:,}+" if n > COUNT_CAP else f"{n:,}")
        env.globals.update(statuses=RUN_STATUSES)
        self.templates = Jinja2Templates(env=env)

    # -- helpers ---------------------------------------------------------------

    @property
    def csrf(self) -> str:
        """This server's CSRF token (pages are not readable cross-origin)."""
        return hmac.new(self._secret, b"csrf", hashlib.sha256).hexdigest()

    def render(self, request: Request, name: str, status: int = 200, **context: Any
               ) -> Response:
        context.update(
            title=self.title, csrf=self.csrf, workspace_id=self.sf.adapter.workspace_id,
            env=self.sf.adapter.env, now=self.sf.clock.now(),
            warm=self.sf.warm is not None,
            switch_url=request.scope.get("starflow_ui_switch") if self.switch else None,
        )
        return self.templates.TemplateResponse(request, name, context, status_code=status,
                                               headers={"Cache-Control": "no-store"})

    async def form(self, request: Request) -> Mapping[str, str]:
        """The POSTed form, after the CSRF and same-origin checks."""
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            from urllib.parse import urlsplit

            if urlsplit(origin).netloc != request.headers.get("host"):
                raise BadInput(f"refused: a form posted from another site ({origin}); "
                               "nothing was written", 403)
        # The pages post urlencoded forms only: parsed with the standard library
        # (Starlette's form parser would pull in python-multipart for nothing).
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            raise BadInput(f"refused: expected a form (application/x-www-form-urlencoded), "
                           f"got {kind or 'no content type'}; nothing was written", 415)
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise BadInput(f"refused: the form is over {MAX_FORM_BYTES // 1024} KiB; nothing "
                           "was written", 413)
        try:
            form = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise BadInput("refused: the form is not UTF-8; nothing was written") from None
        given = form.get("csrf")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(),
                                                                 self.csrf.encode()):
            raise BadInput("refused: the form's CSRF token is missing or stale (reload the "
                           "page and try again); nothing was written", 403)
        return form

    async def run_or_404(self, run_id: str) -> RunInfo:
        try:
            return await self.sf.get_run(run_id)
        except RunNotFound:
            raise BadInput(f"no run {run_id!r} in workspace "
                           f"{self.sf.adapter.workspace_id}/{self.sf.adapter.env}", 404) from None

    def query_from(self, params: Mapping[str, str]) -> tuple[RunPageQuery, dict[str, str]]:
        """The page query of the runs table's filters, and the filters as given."""
        filters = {k: params.get(k, "").strip() for k in
                   ("status", "workflow", "pool", "from", "to", "id")}
        problems = []
        now = self.sf.clock.now()
        when: dict[str, datetime | None] = {"from": None, "to": None}
        for key in ("from", "to"):
            if filters[key]:
                try:
                    when[key] = views.parse_when(filters[key], now)
                except ValueError as exc:
                    problems.append(f"{key}: {exc}")
        if filters["status"] and filters["status"] not in RUN_STATUSES:
            problems.append(f"status must be one of {', '.join(RUN_STATUSES)}: "
                            f"{filters['status']!r}")
        after = None
        if params.get("after"):
            try:
                after = RunCursor.decode(params["after"])
            except StarflowError as exc:
                problems.append(str(exc))
        limit = self.page_size
        if params.get("limit"):
            try:
                limit = int(params["limit"])
            except ValueError:
                problems.append(f"limit must be a number: {params['limit']!r}")
            else:
                if not 1 <= limit <= MAX_PAGE:
                    problems.append(f"limit must be from 1 to {MAX_PAGE}: {limit}")
        if problems:
            raise BadInput("; ".join(problems))
        query = RunPageQuery(
            status=filters["status"] or None, template_id=filters["workflow"] or None,
            pool=filters["pool"] or None, started_from=when["from"],
            started_before=when["to"], id_prefix=filters["id"] or None, after=after,
            limit=limit, counts=after is None)
        return query, {k: v for k, v in filters.items() if v}

    # -- pages -------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        params = dict(request.query_params)
        try:
            query, filters = self.query_from(params)
            page = await self.sf.adapter.list_runs_page(query)
        except (BadInput, StarflowError) as exc:
            filters = {k: params.get(k, "") for k in
                       ("status", "workflow", "pool", "from", "to", "id")}
            return self.render(request, "runs.html", 400, filters=filters, page=RunPage(runs=[]),
                               error=str(exc), qs="", next_qs=None, first=True,
                               partial=bool(params.get("partial")))
        qs = urlencode(filters)
        status_links = {s: urlencode({**filters, "status": s}) for s in RUN_STATUSES}
        next_qs = (urlencode({**filters, "after": page.next.encode(),
                              **({"limit": str(query.limit)} if params.get("limit") else {})})
                   if page.next else None)
        name = "_runs.html" if params.get("partial") else "runs.html"
        return self.render(request, name, filters=filters, page=page, qs=qs, next_qs=next_qs,
                           version=page_version(page),
                           status_links=status_links,
                           first=query.after is None, error=None, limit=query.limit)

    async def run_page(self, request: Request, *, message: str | None = None,
                       error: str | None = None, status: int = 200,
                       run_id: str | None = None) -> Response:
        run_id = run_id or request.path_params["run_id"]
        try:
            run = await self.run_or_404(run_id)
        except BadInput as exc:
            return self.render(request, "error.html", exc.status, error=str(exc))
        sf = self.sf
        events = await sf.adapter.list_events(run_id)
        waits = [] if run.is_terminal else await sf.adapter.list_waits(run_id)
        children = await sf.adapter.list_runs(parent_run_id=run.id, limit=CHILDREN_SHOWN)
        now = sf.clock.now()
        session = []
        for session_id, key in views.session_keys(events):
            value = await sf.session_get(session_id, key)
            session.append((session_id, key, views.fold_json(value)))
        timeline = views.timeline(run, events)
        hidden = max(0, len(timeline) - 2 * TIMELINE_EDGE)
        done = request.query_params.get("done")
        if message is None and done in _DONE:
            message = _DONE[done]
        context = {
            "run": run,
            "run_error": views.scrub(run.error) if run.error else None,
            "cause": views.failure_cause(run, events) if run.status == "error" else None,
            "timeline": timeline[:TIMELINE_EDGE] + timeline[-TIMELINE_EDGE:]
            if hidden else timeline,
            "timeline_total": len(timeline), "timeline_hidden": hidden,
            "waiting": views.waiting_on(run, waits, now),
            "input": views.fold_json(run.input_json),
            "result": views.fold_json(run.result_json) if run.status == "success" else None,
            "session": session,
            "lease_expired": run.lease_until is not None and run.lease_until < now,
            "parent_run_id": run.parent_run_id,
            "children": sorted(children, key=lambda c: (c.started_at is None, c.started_at,
                                                       c.id)),
            "message": message, "error": error,
            "live": not run.is_terminal,
            "version": run_version(run.status, events[-1].id if events else 0),
            "signal_event": request.query_params.get("event", ""),
        }
        name = "_run.html" if request.query_params.get("partial") else "run.html"
        return self.render(request, name, status, **context)

    async def ops(self, request: Request, *, error: str | None = None, status: int = 200
                  ) -> Response:
        sf = self.sf
        now = sf.clock.now()
        outbox = None
        outbox_error = None
        try:
            outbox = await sf.outbox_status()
        except StarflowError as exc:
            outbox_error = str(exc)
        expired = await sf.adapter.list_runs_page(
            RunPageQuery(lease_expired_at=now, limit=MAX_PAGE))
        queued = await sf.adapter.list_runs_page(RunPageQuery(status="queued", limit=MAX_PAGE,
                                                              counts=True))
        running = await sf.adapter.list_runs_page(RunPageQuery(status="running",
                                                               limit=MAX_PAGE))
        stuck = await sf.stuck_runs()  # of the newest 1,000 queued runs
        pools: dict[str, dict[str, int]] = {}
        for run in [*queued.runs, *running.runs]:
            entry = pools.setdefault(run.runner_pool or "(any)", {"queued": 0, "running": 0})
            entry[run.status] = entry.get(run.status, 0) + 1
        holders: dict[str, dict[str, Any]] = {}
        for run in running.runs:
            if run.leased_by:
                held = holders.setdefault(run.leased_by, {"runs": 0, "heartbeat": None})
                held["runs"] += 1
                beat = run.last_heartbeat
                if beat is not None and (held["heartbeat"] is None or beat > held["heartbeat"]):
                    held["heartbeat"] = beat
        return self.render(request, "ops.html", status, error=error, outbox=outbox,
                           outbox_error=outbox_error,
                           expired=expired, pools=pools, holders=holders,
                           stuck=stuck[:STUCK_SHOWN], stuck_more=len(stuck) > STUCK_SHOWN,
                           stuck_after=sf.config.stuck_after.total_seconds(),
                           counts=queued.counts or {}, sampled=MAX_PAGE,
                           queued_more=queued.next is not None,
                           running_more=running.next is not None)

    # -- live updates --------------------------------------------------------------

    def sse(self, events: AsyncIterator[str]) -> Response:
        from starlette.responses import StreamingResponse

        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    async def run_stream(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            await self.run_or_404(run_id)
        except BadInput as exc:
            from starlette.responses import PlainTextResponse

            return PlainTextResponse(str(exc), status_code=exc.status)
        return self.sse(self._run_changes(run_id, request.query_params.get("seen")))

    async def _run_changes(self, run_id: str, seen: str | None = None) -> AsyncIterator[str]:
        """``changed`` whenever the run's row or events move; ``end`` once it ended.

        ``seen`` is the version the page was rendered at (:func:`run_version`):
        a change between the render and this stream's first read is reported
        too. Fed by the warm tier when there is one (pushed), else by a short
        poll of the cold row and its newest events."""
        yield "retry: 2000\n\n"
        if self.sf.warm is not None:
            try:
                async for live in self.sf.watch(run_id):
                    yield _event("changed", {"status": live.status})
                    if live.is_terminal:
                        yield _event("end", {"status": live.status})
                        return
            except WarmTierError:
                pass  # the warm tier is a hint: fall back to reading cold
        last: tuple[Any, ...] | None = None
        last_event = 0
        idle = 0
        while True:
            run = await self.sf.adapter.get_run(run_id)
            if run is None:
                yield _event("end", {"status": "gone"})
                return
            fresh = await self.sf.adapter.list_events(run_id, after_id=last_event)
            if fresh:
                last_event = fresh[-1].id
            state = (run.status, last_event, run.leased_by, run.lease_until, run.claim_attempts)
            if state != last:
                stale = seen is not None and seen != run_version(run.status, last_event)
                if last is not None or stale:
                    yield _event("changed", {"status": run.status})
                last = state
                idle = 0
            if run.is_terminal:
                yield _event("end", {"status": run.status})
                return
            idle += 1
            if idle * self.poll_interval >= 15:
                yield ": keep-alive\n\n"
                idle = 0
            await anyio.sleep(self.poll_interval)

    async def runs_stream(self, request: Request) -> Response:
        try:
            query, _ = self.query_from(dict(request.query_params))
        except BadInput as exc:
            from starlette.responses import PlainTextResponse

            return PlainTextResponse(str(exc), status_code=exc.status)
        query = msgspec.structs.replace(query, counts=False)
        return self.sse(self._table_changes(query, request.query_params.get("seen")))

    async def _table_changes(self, query: RunPageQuery, seen: str | None = None
                             ) -> AsyncIterator[str]:
        """``changed`` whenever the first page's rows or their statuses change
        (``seen``: the page's version when it was rendered, :func:`page_version`)."""
        yield "retry: 2000\n\n"
        last = None
        idle = 0
        while True:
            page = await self.sf.adapter.list_runs_page(query)
            state = page_version(page)
            if state != last:
                if last is not None or (seen is not None and seen != state):
                    yield _event("changed", {"rows": len(page.runs)})
                last = state
                idle = 0
            idle += 1
            if idle * self.poll_interval >= 15:
                yield ": keep-alive\n\n"
                idle = 0
            await anyio.sleep(self.poll_interval)

    # -- actions -------------------------------------------------------------------

    async def _inline_code(self, run: RunInfo, action: str) -> None:
        """An inline run is driven by whoever wakes it: refuse before writing if this
        server cannot import its workflow."""
        try:
            await self.sf.runner.resolve(run)
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
            form = await self.form(request)
            run = await self.run_or_404(run_id)
            handler = {"signal": self._signal, "cancel": self._cancel,
                       "retry": self._retry}.get(verb)
            if handler is None:
                raise BadInput(f"no action {verb!r}: signal, cancel or retry", 404)
            return await handler(request, run, form)
        except BadInput as exc:
            return await self.run_page(request, error=str(exc), status=exc.status)
        except StarflowError as exc:
            return await self.run_page(request, error=_failure(exc), status=409)

    def _confirm(self, request: Request, description: str, fields: Mapping[str, str],
                 run: RunInfo | None = None, payload: views.FoldedJSON | None = None
                 ) -> Response:
        return self.render(request, "confirm.html", description=description,
                           fields=dict(fields), run=run, payload=payload,
                           action=str(request.url.path))

    async def _signal(self, request: Request, run: RunInfo, form: Mapping[str, str]
                      ) -> Response:
        event = form.get("event", "").strip()
        raw = form.get("payload", "").strip() or "null"
        problems = []
        try:
            check_event(event, "signal", run_id=run.id)
        except StarflowError as exc:
            problems.append(str(exc))
        try:
            payload = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            problems.append(f"the payload is not valid JSON ({exc}): write e.g. "
                            '{"ok": true}, or "text" for a string')
            payload = None
        if problems:
            raise BadInput("; ".join(problems) + "; nothing was written")
        if run.is_terminal:
            raise BadInput(f"run {run.id} has ended ({run.status}): no wait can take a "
                           "signal; nothing was written", 409)
        if run.status == "paused":
            waits = views.waiting_on(run, await self.sf.adapter.list_waits(run.id),
                                     self.sf.clock.now())
            events = sorted({w.event for w in waits if w.event})
            if event not in events:
                raise BadInput(
                    f"run {run.id} is paused waiting for "
                    f"{', '.join(repr(e) for e in events) or 'a timer (sleeping)'}, not "
                    f"{event!r}: no wait of it can take this signal now; nothing was written",
                    409)
            if run.start_mode == "inline":
                await self._inline_code(run, "signal")
        if form.get("confirmed") != "yes":
            return self._confirm(request, f"Send signal {event!r} to run {run.id}?",
                                 {"event": event, "payload": raw}, run=run,
                                 payload=views.fold_json(payload))
        await self.sf.signal(run.id, event, payload)
        return _see_other(request, run.id, "signal")

    async def _cancel(self, request: Request, run: RunInfo, form: Mapping[str, str]
                      ) -> Response:
        if run.is_terminal:
            raise BadInput(f"run {run.id} has already ended ({run.status}); nothing was "
                           "written", 409)
        if form.get("confirmed") != "yes":
            return self._confirm(request, f"Cancel run {run.id} ({run.template_id}, now "
                                 f"{run.status})? It gets RunCancelled where it waits "
                                 "or runs and may run its cleanup steps.", {}, run=run)
        await self.sf.cancel(run.id)
        return _see_other(request, run.id, "cancel")

    async def _retry(self, request: Request, run: RunInfo, form: Mapping[str, str]
                     ) -> Response:
        if run.status != "error":
            raise BadInput(f"run {run.id} is {run.status}: only a run that ended in error "
                           "can be retried; nothing was written", 409)
        if run.start_mode == "inline":
            await self._inline_code(run, "retry")
        if form.get("confirmed") != "yes":
            return self._confirm(request, f"Retry run {run.id} ({run.template_id}) from its "
                                 "recorded history? Recorded steps are not run again.", {},
                                 run=run)
        await self.sf.retry(run.id)
        return _see_other(request, run.id, "retry")

    async def wake(self, request: Request) -> Response:
        """Wake by token: checked (signature, scope, expiry, the run) before the
        confirmation; the token is kept here, never put back into a page."""
        try:
            form = await self.form(request)
            self._expire_pending()
            pending_id = form.get("pending")
            if pending_id:
                pending = self._pending.pop(pending_id, None)
                if pending is None:
                    raise BadInput("this confirmation has expired (5 minutes) or was used; "
                                   "enter the token again; nothing was written")
                handle = await self.sf.resume(pending.token, pending.payload)
                return _see_other(request, handle.run_id, "wake")
            token = "".join(form.get("token", "").split())
            raw = form.get("payload", "").strip() or "null"
            try:
                payload = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise BadInput(f"the payload is not valid JSON ({exc}); nothing was "
                               "written") from None
            if not token:
                raise BadInput("paste the wake token to use; nothing was written")
            adapter = self.sf.adapter
            claims = self.sf.runner.keyring.verify(token, workspace_id=adapter.workspace_id,
                                                   env=adapter.env, now=self.sf.clock.now())
            run = await self.run_or_404(claims.r)
            if run.is_terminal:
                raise BadInput(f"run {run.id} has ended ({run.status}): its token cannot "
                               "wake it; nothing was written", 409)
            if run.start_mode == "inline" and run.status == "paused":
                await self._inline_code(run, "wake")
            if len(self._pending) >= 1000:
                raise BadInput("too many wakes waiting for confirmation; try again in a few "
                               "minutes", 429)
            pending_id = secrets.token_urlsafe(24)
            self._pending[pending_id] = _Pending(token, payload,
                                                 time.monotonic() + PENDING_TTL)
            return self._confirm(request, f"Wake run {run.id} at {claims.n} with this "
                                 "payload?", {"pending": pending_id}, run=run,
                                 payload=views.fold_json(payload))
        except BadInput as exc:
            return await self.ops(request, error=str(exc), status=exc.status)
        except InvalidWakeToken as exc:
            return await self.ops(request, error=_failure(exc), status=400)
        except StarflowError as exc:
            return await self.ops(request, error=_failure(exc), status=409)

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for key in [k for k, p in self._pending.items() if p.expires < now]:
            del self._pending[key]


#: Errors the API raises before it writes anything.
_REFUSED_BEFORE_WRITING = (InvalidWakeToken, RunFinished, RunNotFound, SerializationError,
                           WorkflowDefinitionError)


def _failure(exc: StarflowError) -> str:
    """An API error as the page shows it: whether anything was written, never a token."""
    text = views.scrub(str(exc))
    if isinstance(exc, _REFUSED_BEFORE_WRITING):
        return f"{text} (nothing was written)"
    return (f"{type(exc).__name__}: {text} (the action may have been applied in part: "
            "the page below shows the run as it is now)")


def run_version(status: str, last_event_id: int) -> str:
    """What a run page was rendered from: its status and its newest event."""
    return f"{status}.{last_event_id}"


def page_version(page: RunPage) -> str:
    """What a runs table was rendered from: its rows' ids and states."""
    rows = [(r.id, r.status, r.claim_state) for r in page.runs]
    raw = msgspec.json.encode([rows, page.next.encode() if page.next else None])
    return hashlib.sha256(raw).hexdigest()[:16]


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {msgspec.json.encode(data).decode()}\n\n"


def _see_other(request: Request, run_id: str, done: str) -> Response:
    from starlette.responses import RedirectResponse

    url = request.url_for("run", run_id=run_id).include_query_params(done=done)
    return RedirectResponse(str(url), status_code=303)


def create_app(sf: Starflow, *, token: str | None = None,
               allowed_hosts: Sequence[str] | None = None, poll_interval: float = 1.0,
               page_size: int = 50, title: str | None = None,
               scopes: Scopes | None = None) -> Starlette:
    """The web UI of one open :class:`~starflow.Starflow`, as a Starlette app.

    Serve it with uvicorn, or mount it in your own Starlette/FastAPI app
    (``app.mount("/starflow", create_app(sf, token=...))``); ``sf`` must be open
    (``async with Starflow.open(...)``) while it serves.

    Args:
        sf: The application whose workspace and env the pages show and act on.
        token: Access token every request must carry (Bearer header, or the
            cookie set by opening ``/?token=TOKEN``). None: no check (only for a
            server bound to 127.0.0.1, or mounted behind your own auth).
        allowed_hosts: Host headers accepted (e.g. ``["127.0.0.1", "localhost"]``
            against DNS rebinding). None: any.
        poll_interval: Seconds between cold reads of the live views when there is
            no warm tier to push changes.
        page_size: Runs per page of the runs table (1 to 500).
        title: Shown in the header and the window title.
        scopes: Serve every workspace and env through these (an entered
            :class:`~starflow.ui.scopes.Scopes`), under ``/w/WORKSPACE/ENV/``;
            ``sf``'s own scope is the one ``/`` leads to.

    Raises:
        StarflowError: the ``ui`` extra is not installed, or an argument is invalid.
    """
    _require_deps()
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import RedirectResponse
    from starlette.routing import Mount, Route

    problems = []
    if not (isinstance(poll_interval, int | float) and poll_interval > 0):
        problems.append(f"poll_interval must be > 0 seconds: {poll_interval!r}")
    if isinstance(page_size, bool) or not isinstance(page_size, int) \
            or not 1 <= page_size <= MAX_PAGE:
        problems.append(f"page_size must be an int from 1 to {MAX_PAGE}: {page_size!r}")
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        problems.append("token must be a string of at least 16 characters")
    if problems:
        raise StarflowError("create_app: " + "; ".join(problems))

    def build(one: Starflow, switch: bool) -> Starlette:
        return _scope_app(UI(one, poll_interval=float(poll_interval), page_size=page_size,
                             title=title, switch=switch))

    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    if token is not None:
        middleware.append(Middleware(TokenAuth, token=token))
    if scopes is None:
        inner = build(sf, switch=False)
        app = Starlette(routes=inner.routes, middleware=middleware)
        app.state.ui = inner.state.ui
        return app

    scopes.add(sf)
    apps: dict[tuple[str, str], Starlette] = {}

    async def scoped(scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.responses import PlainTextResponse

        params = scope.get("path_params", {})
        try:
            one = await scopes.get(params.get("workspace", ""), params.get("env", ""))
        except StarflowError as exc:
            await PlainTextResponse(f"{exc}\n", status_code=404)(scope, receive, send)
            return
        key = (one.adapter.workspace_id, one.adapter.env)
        if key not in apps:
            apps[key] = build(one, switch=True)
        inner = apps[key]
        # The inner app's own router names its pages; the switch form is the outer one's.
        switch_url = str(Request(scope).url_for("switch"))
        # and its URLs start at this mount (Starlette builds them from app_root_path)
        await inner({**scope, "router": inner.router, "starflow_ui_switch": switch_url,
                     "app_root_path": scope.get("root_path", "")}, receive, send)

    def scope_url(request: Request, workspace_id: str, env: str) -> str:
        return str(request.url_for("scoped", workspace=workspace_id, env=env,
                                   path="/runs"))

    async def home(request: Request) -> Response:
        return RedirectResponse(scope_url(request, sf.adapter.workspace_id, sf.adapter.env),
                                status_code=303)

    async def switch(request: Request) -> Response:
        from starlette.responses import PlainTextResponse

        from .scopes import check_scope

        workspace_id = request.query_params.get("workspace", "").strip()
        env = request.query_params.get("env", "").strip()
        try:
            check_scope(workspace_id, env)
        except StarflowError as exc:
            return PlainTextResponse(f"{exc}\n", status_code=400)
        return RedirectResponse(scope_url(request, workspace_id, env), status_code=303)

    app = Starlette(routes=[
        Route("/", home, name="home"),
        Route("/switch", switch, name="switch"),
        Mount("/w/{workspace}/{env}", app=scoped, name="scoped"),
    ], middleware=middleware)
    app.state.scoped_apps = apps
    return app


def _scope_app(ui: UI) -> Starlette:
    """The pages of one scope (no middleware: the outer app carries it)."""
    from starlette.applications import Starlette
    from starlette.responses import RedirectResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    def page(fn: Callable[[Request], Awaitable[Response]]
             ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except BadInput as exc:
                return ui.render(request, "error.html", exc.status, error=str(exc))
        return endpoint

    async def home(request: Request) -> Response:
        return RedirectResponse(str(request.url_for("runs")), status_code=303)

    async def run(request: Request) -> Response:
        return await ui.run_page(request)

    routes = [
        Route("/", home, name="home"),
        Route("/runs", page(ui.runs), name="runs"),
        Route("/runs/stream", ui.runs_stream, name="runs_stream"),
        Route("/runs/{run_id}", page(run), name="run"),
        Route("/runs/{run_id}/stream", ui.run_stream, name="run_stream"),
        Route("/runs/{run_id}/{action}", page(ui.action), methods=["POST"], name="action"),
        Route("/wake", page(ui.wake), methods=["POST"], name="wake"),
        Route("/ops", page(ui.ops), name="ops"),
        Mount("/static", StaticFiles(packages=[("starflow.ui", "static")]), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.ui = ui
    return app
