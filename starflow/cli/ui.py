"""``starflow ui``: serve the web page (:mod:`starflow.ui`) with uvicorn.

A command group of :mod:`starflow.cli` (registers ``ui`` when imported). Bound to
127.0.0.1 by default; any other address needs an access token (``--token`` or
``$STARFLOW_UI_TOKEN``, else a random one is made and printed), and without it
every request gets 401.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc

from ..config import database_url_from_env
from ._base import EXIT_OK, EXIT_USAGE, CommandError, app_args, command, db_args, resolve_app

__all__ = ["is_loopback"]

DEFAULT_PORT = 8233


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address or ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535: {value}")
    return value


def _poll(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds: {text}")
    return value


def _ui_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; any other needs a token)")
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT,
                        help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--token", default=None,
                        help="access token every request must carry (default "
                             "$STARFLOW_UI_TOKEN; made up and printed when binding beyond "
                             "127.0.0.1 without one)")
    parser.add_argument("--warm", metavar="URL", default=None,
                        help="warm tier (memory:// or redis://…) feeding the live views")
    parser.add_argument("--all-workspaces", action="store_true",
                        help="show every workspace and env of the database (under "
                             "/w/WORKSPACE/ENV/), not only --workspace/--env")
    parser.add_argument("--poll", type=_poll, default=1.0, metavar="SECONDS",
                        help="without a warm tier, how often live views read the database "
                             "(default 1)")


def _token(ns: argparse.Namespace) -> tuple[str | None, bool]:
    """The access token to require, and whether it was made up here."""
    token = ns.token or os.environ.get("STARFLOW_UI_TOKEN") or None
    if token is not None and len(token) < 16:
        raise CommandError("--token (or STARFLOW_UI_TOKEN) must be at least 16 characters",
                           EXIT_USAGE)
    if token is None and not is_loopback(ns.host):
        return secrets.token_urlsafe(24), True
    return token, False


async def _serve(server: Any, scope: anyio.CancelScope, *,
                 task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    try:
        await server.serve()
    except SystemExit:
        pass  # uvicorn exits this way when it cannot bind: reported by the caller
    finally:
        scope.cancel()  # stops the signal watcher too


async def _stop_on_signals(server: Any) -> None:
    """SIGINT/SIGTERM: finish open requests and stop (exit 0); a second one: stop now."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            if server.should_exit:
                server.force_exit = True
            server.should_exit = True


class _StartupErrors(logging.Filter):
    """Holds back uvicorn's error records until the server started, keeping their text."""

    def __init__(self) -> None:
        super().__init__()
        self.server: Any = None
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if (self.server is not None and self.server.started) or record.levelno < logging.ERROR:
            return True
        self.messages.append(" ".join(record.getMessage().split()))
        return False


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server with the signals left to this command (uvicorn would
        re-raise them at exit, turning a clean stop into a KeyboardInterrupt)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server


@command("ui", help="serve the web page: runs, a run's history, operations, and actions",
         args=[app_args, db_args], configure=_ui_args)
async def _ui(ns: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError as exc:
        raise CommandError("starflow ui needs uvicorn, starlette and jinja2: install them "
                           "with pip install 'starflow-durable[ui]'") from exc
    from ..ui import create_app

    token, made_up = _token(ns)
    allowed = None if token is not None else ["127.0.0.1", "localhost", "[::1]", "::1"]
    url = ns.db or database_url_from_env()
    if ns.all_workspaces and url is None:
        raise CommandError("--all-workspaces needs --db URL (or STARFLOW_URL)",
                           EXIT_USAGE)
    # --warm goes with --db: resolve_app opens the warm tier, or says it needs --db.
    sf = await resolve_app(ns, must_exist=True)
    from ..app import Starflow
    from ..ui.scopes import Scopes

    def open_scope(workspace_id: str, env: str) -> Starflow:
        return Starflow.open(url, workspace_id=workspace_id, env=env, config=sf.config,
                             warm=ns.warm, maintenance=False)

    scopes = Scopes(open_scope) if ns.all_workspaces else None
    # uvicorn logs why it could not start (a port in use) before exiting; the
    # command says it once, in its own error line, instead.
    startup_errors = _StartupErrors()
    uvicorn_log = logging.getLogger("uvicorn.error")
    try:
        async with sf, scopes or contextlib.nullcontext(), anyio.create_task_group() as tg:
            app = create_app(sf, token=token, allowed_hosts=allowed, poll_interval=ns.poll,
                             scopes=scopes)
            config = uvicorn.Config(app, host=ns.host, port=ns.port, log_level="warning",
                                    lifespan="off", timeout_graceful_shutdown=2,
                                    access_log=False)
            server = _server_class()(config)
            startup_errors.server = server
            uvicorn_log.addFilter(startup_errors)
            tg.start_soon(_stop_on_signals, server)
            await tg.start(_serve, server, tg.cancel_scope)
            while not server.started:
                if server.should_exit:
                    break
                await anyio.sleep(0.05)
            if server.started:
                port = server.servers[0].sockets[0].getsockname()[1]
                host = ns.host
                if host in ("0.0.0.0", "::", ""):  # every interface: name this machine
                    import socket

                    host = socket.gethostname()
                host = f"[{host}]" if ":" in host else host
                address = f"http://{host}:{port}/"
                scope = ("every workspace and env" if ns.all_workspaces else
                         f"{sf.workspace_id}/{sf.env}")
                if token is not None:
                    address += f"?token={token}"
                sys.stdout.write(f"starflow ui for {scope}: open {address}\n")
                if made_up:
                    sys.stdout.write("(a token was made up for this run: pass --token or set "
                                     "STARFLOW_UI_TOKEN to keep one)\n")
                sys.stdout.write("press Ctrl+C to stop\n")
                sys.stdout.flush()
    finally:
        uvicorn_log.removeFilter(startup_errors)
    if not server.started:
        why = "; ".join(startup_errors.messages) or "is the port in use?"
        raise CommandError(f"the ui could not listen on {ns.host}:{ns.port}: {why} "
                           "(try another --port, or --port 0 for any free one)")
    return EXIT_OK
