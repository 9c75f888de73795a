"""What every page of one scope (a workspace and env) shares.

:class:`Site` holds the open :class:`~starflow.Starflow` the pages read and
act on, the Jinja2 templates, and this server's CSRF secret; it renders a
page, reads a POSTed form after the CSRF and same-origin checks, finds a run,
and turns the runs table's filters into a page query. :class:`BadInput` is
input a page answers with a message, nothing written.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from ..adapters.pages import COUNT_CAP, MAX_PAGE, RunCursor, RunPageQuery, uuid_bounds
from ..errors import (
    InvalidArgument,
    InvalidWakeToken,
    RunFinished,
    RunNotFound,
    SerializationError,
    StarflowError,
    WorkflowDefinitionError,
)
from ..limits import normalize_run_id
from ..records import RUN_STATUSES, RunInfo
from . import views

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from ..app import Starflow

__all__ = ["FILTERS", "BadInput", "Site", "failure", "see_other"]

#: The largest form accepted (a signal payload included).
MAX_FORM_BYTES = 1024 * 1024
#: The runs table's filters, as named in its address.
FILTERS = ("status", "workflow", "pool", "from", "to", "id")


class BadInput(Exception):
    """Input the page answers with a message (nothing was written)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Site:
    """One Starflow (one workspace and env) as the pages see it."""

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
        env = Environment(loader=PackageLoader("starflow.ui", "templates"),
                          autoescape=select_autoescape(default=True), trim_blocks=True,
                          lstrip_blocks=True)
        env.filters.update(iso=views.iso, duration=views.human_duration,
                           bucket=views.bucket_label, period=views.period,
                           count=lambda n: f"{COUNT_CAP:,}+" if n > COUNT_CAP else f"{n:,}")
        env.globals.update(statuses=RUN_STATUSES)
        self.templates = Jinja2Templates(env=env)

    @property
    def csrf(self) -> str:
        """This server's CSRF token (pages are not readable cross-origin)."""
        return hmac.new(self._secret, b"csrf", hashlib.sha256).hexdigest()

    def render(self, request: Request, name: str, status: int = 200, **context: Any
               ) -> Response:
        context.update(
            title=self.title, csrf=self.csrf, workspace_id=self.sf.workspace_id,
            env=self.sf.env, now=self.sf.clock.now(),
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
                           f"{self.sf.workspace_id}/{self.sf.env}", 404) from None

    def query_from(self, params: Mapping[str, str]) -> tuple[RunPageQuery, dict[str, str]]:
        """The page query of the runs table's filters, and the filters as given."""
        filters = {k: params.get(k, "").strip() for k in FILTERS}
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
        id_prefix = filters["id"] or None
        if id_prefix is not None and uuid_bounds(id_prefix) is None:
            # No run id starts so: a run key, then (#30), naming one run's id; if
            # not a key either, no run matches, as for any other text.
            with contextlib.suppress(InvalidArgument):
                id_prefix = normalize_run_id(
                    id_prefix, workspace_id=self.sf.workspace_id, env=self.sf.env)
        query = RunPageQuery(
            status=filters["status"] or None, template_id=filters["workflow"] or None,
            pool=filters["pool"] or None, started_from=when["from"],
            started_before=when["to"], id_prefix=id_prefix, after=after,
            limit=limit, counts=after is None)
        return query, {k: v for k, v in filters.items() if v}


#: Errors the API raises before it writes anything.
_REFUSED_BEFORE_WRITING = (InvalidWakeToken, RunFinished, RunNotFound, SerializationError,
                           WorkflowDefinitionError)


def failure(exc: StarflowError) -> str:
    """An API error as the page shows it: whether anything was written, never a token."""
    text = views.scrub(str(exc))
    if isinstance(exc, _REFUSED_BEFORE_WRITING):
        return f"{text} (nothing was written)"
    return (f"{type(exc).__name__}: {text} (the action may have been applied in part: "
            "the page below shows the run as it is now)")


def see_other(request: Request, run_id: str, done: str) -> Response:
    """After an action: to the run's page, which says what was done."""
    from starlette.responses import RedirectResponse

    url = request.url_for("run", run_id=run_id).include_query_params(done=done)
    return RedirectResponse(str(url), status_code=303)
