"""The ASGI app behind ``starflow ui``: the server that puts the pages together.

Server-rendered HTML (Jinja2) with a little hand-written CSS and JS shipped in
the package: no build step, nothing fetched from elsewhere, so the page works
offline. This module builds the Starlette app: the routes of one scope (a
workspace and env), the middleware, and with ``scopes`` one set of routes per
scope under ``/w/WORKSPACE/ENV/``. The parts it routes to each have one job:

* :mod:`.site`: what every page of a scope shares (templates, CSRF, forms);
* :mod:`.pages`: the pages that read (runs, a run, operations), with
  :mod:`.operations` loading the operations page's data;
* :mod:`.live`: the event streams that keep open pages fresh;
* :mod:`.actions`: the pages that write (signal, cancel, retry, wake);
* :mod:`.auth`: the access token.

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

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ..adapters.pages import MAX_PAGE
from ..errors import StarflowError
from .actions import Actions
from .auth import TokenAuth
from .live import Live
from .pages import Pages
from .site import BadInput, Site

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import Receive, Scope, Send

    from ..app import Starflow
    from .scopes import Scopes

__all__ = ["UI", "create_app"]


def _require_deps() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
    except ImportError as exc:
        raise StarflowError(
            f"starflow ui needs {exc.name}: install it with pip install 'starflow-durable[ui]'"
        ) from exc


class UI:
    """The pages, streams and actions of one Starflow (one workspace and env)."""

    def __init__(self, sf: Starflow, *, poll_interval: float, page_size: int,
                 title: str | None, switch: bool = False) -> None:
        self.site = Site(sf, poll_interval=poll_interval, page_size=page_size, title=title,
                         switch=switch)
        self.pages = Pages(self.site)
        self.live = Live(self.site)
        self.actions = Actions(self.site, self.pages)


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
        key = (one.workspace_id, one.env)
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
        return RedirectResponse(scope_url(request, sf.workspace_id, sf.env),
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
                return ui.site.render(request, "error.html", exc.status, error=str(exc))
        return endpoint

    async def home(request: Request) -> Response:
        return RedirectResponse(str(request.url_for("runs")), status_code=303)

    routes = [
        Route("/", home, name="home"),
        Route("/runs", page(ui.pages.runs), name="runs"),
        Route("/runs/stream", ui.live.runs_stream, name="runs_stream"),
        Route("/runs/{run_id}", page(ui.pages.run), name="run"),
        Route("/runs/{run_id}/stream", ui.live.run_stream, name="run_stream"),
        Route("/runs/{run_id}/{action}", page(ui.actions.action), methods=["POST"],
              name="action"),
        Route("/bulk/{action}", page(ui.actions.bulk), methods=["POST"], name="bulk"),
        Route("/wake", page(ui.actions.wake), methods=["POST"], name="wake"),
        Route("/pools/{pool}/{action}", page(ui.actions.pool_action), methods=["POST"],
              name="pool_action"),
        Route("/ops", page(ui.pages.ops), name="ops"),
        Mount("/static", StaticFiles(packages=[("starflow.ui", "static")]), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.ui = ui
    return app
