"""The ``starflow`` command's registry and what every command group shares.

Subcommands are :class:`Command` objects registered with :func:`command`; a
command group (``starflow runs list``) is a command with children. Each
handler is an ``async`` function taking the parsed arguments and returning
the exit code. To add one::

    @command("cancel", help="cancel a run", args=[app_args, db_args],
             configure=lambda p: p.add_argument("run_id"))
    async def _cancel(ns: argparse.Namespace) -> int:
        async with open_app(ns) as sf:
            await sf.cancel(ns.run_id)
        return 0

Each command group is a module of :mod:`starflow.cli` that registers its
commands when imported (``worker``, ``admin``, ``runs``, ``control``,
``outbox``, ``replay``, ``ui``); :func:`starflow.cli.main` imports them all. Errors
users can fix (a bad ``--app``, an unreachable database, an unknown
run) print one line on stderr and exit non-zero, never a traceback; set
``STARFLOW_TRACEBACK=1`` to see one anyway.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn

import anyio

from ..config import database_url_from_env
from ..errors import RunNotFound, StarflowError
from ..urls import normalize_scheme

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "Command",
    "CommandError",
    "app_args",
    "build_parser",
    "command",
    "db_args",
    "load_app_object",
    "nonnegative_seconds",
    "on_signals",
    "open_app",
    "positive_int",
    "positive_seconds",
    "redact_url",
    "resolve_app",
    "say",
]

#: Exit codes: 0 success, 1 a runtime failure, 2 bad input (usage).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """A failure to report as one line on stderr, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, not usage plus a message."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("starflow").strip()
        raise CommandError(f"{where + ': ' if where else ''}{message} "
                           f"(see {self.prog} --help)", EXIT_USAGE)


# ---------------------------------------------------------------------------
# Command registry
# ---------------------------------------------------------------------------

Handler = Callable[[argparse.Namespace], Awaitable[int]]
Configure = Callable[[argparse.ArgumentParser], None]


@dataclass
class Command:
    """One subcommand, or a group of them (``children``, no handler)."""

    name: str
    help: str
    handler: Handler | None = None
    configure: list[Configure] = field(default_factory=list)
    children: dict[str, Command] = field(default_factory=dict)

    def add_to(self, subparsers: Any) -> None:
        parser = subparsers.add_parser(self.name, help=self.help, description=self.help)
        for conf in self.configure:
            conf(parser)
        if self.children:
            sub = parser.add_subparsers(dest=f"_{self.name}_command", metavar="COMMAND",
                                        parser_class=_Parser)
            # A command with subcommands of its own (`starflow pools`, `starflow
            # pools pause NAME`) runs its handler when none is given.
            sub.required = self.handler is None
            for child in self.children.values():
                child.add_to(sub)
        if self.handler is not None:
            parser.set_defaults(_handler=self.handler)


#: One-line descriptions of command groups, for `starflow --help`.
_GROUP_HELP = {
    "runs": "list, show, export and retry runs",
    "outbox": "the warm tier's mirror outbox",
    "schedules": "list, show, pause, resume, delete and trigger schedules",
}
_COMMANDS: dict[str, Command] = {}


def command(name: str, *, help: str, args: Sequence[Configure] = (),
            configure: Configure | None = None, group: str | None = None
            ) -> Callable[[Handler], Handler]:
    """Register ``starflow NAME`` (or ``starflow GROUP NAME``) with its handler.

    Args:
        name: The subcommand name.
        help: One line for ``--help``.
        args: Shared option sets (:data:`app_args`, :data:`db_args`).
        configure: Adds the command's own arguments to its parser.
        group: Register under this command group (created on first use).
    """
    def register(handler: Handler) -> Handler:
        confs = [*args, *([configure] if configure else [])]
        cmd = Command(name=name, help=help, handler=handler, configure=confs)
        if group is None:
            _COMMANDS[name] = cmd
        else:
            parent = _COMMANDS.setdefault(
                group, Command(name=group, help=_GROUP_HELP.get(group, f"{group} commands")))
            parent.children[name] = cmd
        return handler

    return register


def build_parser() -> argparse.ArgumentParser:
    """The ``starflow`` parser with every registered subcommand (the command
    modules register theirs when imported: :mod:`starflow.cli` imports them)."""
    from .._version import __version__

    parser = _Parser(prog="starflow", description="starflow: durable execution for Python.")
    parser.add_argument("--version", action="version", version=f"starflow {__version__}")
    parser.add_argument("--log-level", default=None, metavar="LEVEL",
                        help="debug, info, warning or error (default: $STARFLOW_LOG_LEVEL "
                             "or info for long-running commands)")
    parser.add_argument("--log-format", choices=("console", "json"), default="console",
                        help="log lines on stderr as console text or JSON (default console)")
    sub = parser.add_subparsers(dest="_command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for cmd in _COMMANDS.values():
        cmd.add_to(sub)
    return parser


# ---------------------------------------------------------------------------
# Shared options and the app they describe
# ---------------------------------------------------------------------------


def app_args(parser: argparse.ArgumentParser) -> None:
    """``--app module:attr``: user code that registers workflows (and maybe builds the app)."""
    parser.add_argument(
        "--app", metavar="MODULE[:ATTR]",
        help="import MODULE (registering its workflows); ATTR, if given, is a Starflow "
             "instance or a zero-argument factory returning one")


def db_args(parser: argparse.ArgumentParser) -> None:
    """``--db``, ``--workspace``, ``--env``: where the runs live."""
    parser.add_argument("--db", metavar="URL",
                        help="database URL (default: the app's, else $STARFLOW_URL, else "
                             "$STARFLOW_DATABASE_URL)")
    parser.add_argument("--workspace", metavar="ID", default=None,
                        help="workspace_id scope (default: the app's, else "
                             "$STARFLOW_WORKSPACE, else celestial)")
    parser.add_argument("--env", default=None,
                        help="env scope (default: the app's, else $STARFLOW_ENV, else prod)")
    parser.add_argument("--codec", metavar="MODULE:ATTR", default=None,
                        help="the payload codec (a PayloadCodec, or a zero-argument factory "
                             "returning one) to decode encrypted or compressed values with "
                             "(default: the app's, else $STARFLOW_CODEC; without one they "
                             "show as 'encrypted')")


def load_app_object(spec: str, flag: str = "--app") -> Any:
    """Import ``module[:attr]``; return the attribute (or None for a bare module)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or (":" in spec and not attr) or ":" in attr:
        raise CommandError(f"{flag} must be MODULE or MODULE:ATTR, got {spec!r}", EXIT_USAGE)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the app module sits beside you
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise CommandError(f"{flag} {spec}: no module named {exc.name!r} (is it on "
                               "PYTHONPATH, or run from its directory?)", EXIT_USAGE) from exc
        raise CommandError(f"{flag} {spec}: importing {module_name!r} failed: {exc}") from exc
    except StarflowError as exc:
        raise CommandError(f"{flag} {spec}: {exc}") from exc
    except Exception as exc:
        raise CommandError(f"{flag} {spec}: importing {module_name!r} raised "
                           f"{type(exc).__name__}: {exc}") from exc
    if not attr:
        return None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CommandError(f"{flag} {spec}: module {module_name!r} has no attribute "
                               f"{attr!r}", EXIT_USAGE)
        obj = getattr(obj, part)
    return obj


def load_codec(ns: argparse.Namespace) -> Any:
    """The codec ``--codec`` (else ``$STARFLOW_CODEC``) names, or None.

    ``MODULE:ATTR`` is a :class:`~starflow.PayloadCodec` or a zero-argument
    factory that returns one (so keys can come from a secret store).
    """
    from ..codec import PayloadCodec

    spec = getattr(ns, "codec", None) or os.environ.get("STARFLOW_CODEC") or None
    if spec is None:
        return None
    flag = "--codec" if getattr(ns, "codec", None) else "STARFLOW_CODEC"
    if ":" not in spec:
        raise CommandError(f"{flag} must be MODULE:ATTR, got {spec!r}", EXIT_USAGE)
    obj = load_app_object(spec, flag)
    if not isinstance(obj, PayloadCodec) and callable(obj):
        try:
            obj = obj()
        except StarflowError as exc:
            raise CommandError(f"{flag} {spec}: the factory failed: {exc}") from exc
        except Exception as exc:
            raise CommandError(f"{flag} {spec}: the factory raised "
                               f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, PayloadCodec):
        raise CommandError(f"{flag} {spec}: expected a PayloadCodec (encode, decode, name) "
                           f"or a factory returning one, got {type(obj).__name__}",
                           EXIT_USAGE)
    return obj


def _missing_sqlite_file(url: str) -> str | None:
    """The path of a ``sqlite:///`` URL whose file does not exist (else None)."""
    url = normalize_scheme(url)
    if not url.startswith("sqlite://"):
        return None
    path = url[len("sqlite://"):]
    path = path[1:] if path.startswith("/") else path
    if not path or path == ":memory:" or os.path.exists(path):
        return None
    return path


def redact_url(url: str) -> str:
    """``url`` without its password (for messages)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


async def resolve_app(ns: argparse.Namespace, *, maintenance: bool = False,
                      must_exist: bool = False) -> Any:
    """The :class:`~starflow.Starflow` (not yet open) the arguments describe.

    ``must_exist``: refuse a ``sqlite:///`` path with no file behind it rather
    than create an empty database (commands that only read or wake runs).
    """
    from ..app import Starflow

    obj = load_app_object(ns.app) if getattr(ns, "app", None) else None
    if obj is not None and not isinstance(obj, Starflow):
        if not callable(obj):
            raise CommandError(f"--app {ns.app}: expected a Starflow instance or a "
                               f"zero-argument factory, got {type(obj).__name__}", EXIT_USAGE)
        try:
            made = obj()
            if inspect.isawaitable(made):
                made = await made
        except StarflowError as exc:
            raise CommandError(f"--app {ns.app}: the factory failed: {exc}") from exc
        except Exception as exc:
            raise CommandError(f"--app {ns.app}: the factory raised "
                               f"{type(exc).__name__}: {exc}") from exc
        if made is not None and not isinstance(made, Starflow):
            raise CommandError(f"--app {ns.app}: the factory returned "
                               f"{type(made).__name__}, not a Starflow", EXIT_USAGE)
        obj = made
    db = getattr(ns, "db", None)
    workspace = getattr(ns, "workspace", None)
    env = getattr(ns, "env", None)
    warm = getattr(ns, "warm", None)  # `starflow server --warm URL`
    app_codec = obj.codec if obj is not None else None
    if app_codec is not None and getattr(ns, "codec", None):
        raise CommandError("--codec and an --app opened with a codec: give one of them",
                           EXIT_USAGE)
    # The app's codec, else --codec / $STARFLOW_CODEC.
    codec = app_codec if app_codec is not None else load_codec(ns)
    if obj is not None and db is None and workspace is None and env is None:
        if warm is not None:
            raise CommandError("--warm goes with --db (an app configures its warm tier "
                               "with Starflow.open(warm=...))", EXIT_USAGE)
        # The user's app as configured, with this process's maintenance choice.
        adapter = obj.adapter
        if obj.codec is None and codec is not None:
            from ..adapters.coding import CodecAdapter
            from ..codec import Payloads

            try:
                adapter = CodecAdapter(adapter, Payloads(codec))
            except StarflowError as exc:
                raise CommandError(str(exc), EXIT_USAGE) from exc
        app = Starflow(adapter, config=obj.config, clock=obj.clock, maintenance=maintenance)
        app.codec = codec
        return app
    url = db or database_url_from_env()
    if obj is not None and url is None:
        raise CommandError("--workspace/--env need a database: pass --db URL too", EXIT_USAGE)
    if url is None:
        raise CommandError("no database: pass --db URL or set STARFLOW_URL "
                           "(e.g. sqlite:///starflow.db or postgresql://user@host/db)",
                           EXIT_USAGE)
    missing = _missing_sqlite_file(url) if must_exist else None
    if missing is not None:
        raise CommandError(f"no SQLite database at {missing}: check --db (or "
                           "$STARFLOW_URL), or create it with starflow migrate")
    kwargs: dict[str, Any] = {}
    if obj is not None:
        kwargs = {"config": obj.config, "clock": obj.clock,
                  "workspace_id": obj.workspace_id, "env": obj.env}
    if workspace is not None:
        kwargs["workspace_id"] = workspace
    if env is not None:
        kwargs["env"] = env
    try:
        return Starflow.open(url, maintenance=maintenance, warm=warm, codec=codec, **kwargs)
    except StarflowError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from exc


@asynccontextmanager
async def open_app(ns: argparse.Namespace, *, maintenance: bool = False,
                   must_exist: bool = False) -> AsyncIterator[Any]:
    """Open the app the arguments describe (``async with open_app(ns) as sf``)."""
    sf = await resolve_app(ns, maintenance=maintenance, must_exist=must_exist)
    async with sf:
        try:
            yield sf
        except RunNotFound as exc:
            if os.environ.get("STARFLOW_TRACEBACK"):
                raise
            raise CommandError(await _run_not_found(sf, exc, ns)) from exc


async def _scopes_of_run(url: str, run_id: str, run_key: str | None = None
                         ) -> list[tuple[str, str]]:
    """The (workspace, env) of every run ``run_id`` (or, given a run key, every run
    with that key) in the database (empty if none or unknown)."""
    from ..adapters.copying import endpoint_for

    try:
        end = endpoint_for(url, "--db")
        await end.connect(readonly=True)
    except Exception:  # a URL the lookup cannot read (memory://…): no hint, the error stands
        return []
    try:
        rows = await (end.fetch("SELECT workspace_id, env FROM workflow_runs WHERE id = "
                                f"{end.dialect.p(1, 'uuid')}", [run_id]) if run_key is None
                      else end.fetch("SELECT workspace_id, env FROM workflow_runs WHERE "
                                     f"run_key = {end.dialect.p(1)}", [run_key]))
    except Exception:  # not a UUID, a role that cannot see other tenants: no hint
        return []
    finally:
        await end.close()
    return sorted((str(ws), str(env)) for ws, env in rows)


async def _run_not_found(sf: Any, exc: RunNotFound, ns: argparse.Namespace) -> str:
    """A RunNotFound that names the scope searched, and where the run is if elsewhere."""
    workspace, env = sf.workspace_id, sf.env
    run_id, key = exc.run_id or "?", exc.run_key
    message = (f"RunNotFound: run {key if key is not None else run_id} not found in "
               f"workspace {workspace!r}, env {env!r}")
    url = getattr(ns, "db", None) or database_url_from_env()
    found = await _scopes_of_run(url, run_id, key) if url else []
    if found:
        where = "; ".join(f"--workspace {ws} --env {e}" for ws, e in found)
        return f"{message}; it is in another scope: pass {where}"
    what = "the id (here a run key)" if key is not None else "the id"
    return (f"{message}: check {what} and the database, or look in another scope with "
            "--workspace W --env E (or $STARFLOW_WORKSPACE/$STARFLOW_ENV)")


async def on_signals(first: Callable[[], None], again: Callable[[], None]) -> None:
    """Call ``first`` on the first SIGTERM/SIGINT, ``again`` on each later one."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        seen = 0
        async for signum in signals:
            seen += 1
            say(f"received {signal.Signals(signum).name}"
                 + ("; draining (send again to stop now)" if seen == 1 else "; stopping now"))
            (first if seen == 1 else again)()


def say(message: str) -> None:
    # One line, whatever the message holds (PostgreSQL appends DETAIL:/HINT: lines).
    message = "; ".join(line.strip() for line in message.splitlines() if line.strip())
    sys.stderr.write(f"starflow: {message}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------
# Argument types
# ---------------------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {value}")
    return value


def positive_seconds(text: str) -> float:
    value = nonnegative_seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds: {text}")
    return value


def nonnegative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds: {text}")
    return value
