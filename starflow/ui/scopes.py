"""Several workspaces and envs behind one server (``starflow ui --all-workspaces``).

A :class:`~starflow.Starflow` is bound to one (workspace, env). To show
another, :class:`Scopes` opens one more on the same database, the first time
a page of that scope is asked for, and keeps it open until ``Scopes`` is
left. A scope the database holds nothing of (no run, schedule or wake key) is
refused before any app is opened for it: a GET of a made-up name writes no row
and takes no slot. Each is opened by a task of the ``Scopes``' own task group (a Starflow
runs its heartbeat task in a task group, which must be left by the task that
entered it), never by the request that first needed it, and each closes
shielded from cancellation, so stopping the server never skips closing a
database.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..errors import StarflowError

if TYPE_CHECKING:
    from ..app import Starflow

__all__ = ["Scopes", "check_scope"]

_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,100}$")


def check_scope(workspace_id: str, env: str) -> None:
    """Raise :class:`StarflowError` unless both are plain names (letters, digits, ``_.:@-``)."""
    bad = [f"{what} must be 1 to 100 letters, digits or _.:@-: {value!r}"
           for what, value in (("workspace", workspace_id), ("env", env))
           if not _NAME.match(value)]
    if bad:
        raise StarflowError("; ".join(bad))


async def _holds(sf: Starflow) -> bool:
    """Whether the database has anything of ``sf``'s scope, read without writing.

    Only its adapter is opened (``Starflow.__aenter__`` would store a wake key for a
    scope that has none); a scope that is shown keeps it open, one that is not
    closes it.
    """
    adapter = sf.adapter
    await adapter.open()
    try:
        return bool(await adapter.list_runs(limit=1)) or bool(await adapter.list_schedules()) \
            or await adapter.get_secret("default", now=sf.clock.now(), create=False) is not None
    except BaseException:
        await adapter.close()
        raise


class Scopes:
    """Opens a Starflow per (workspace, env) on demand; ``async with`` it around the
    server (leaving it closes every app it opened).

    Args:
        open_app: Makes the (not yet open) Starflow of a scope, e.g.
            ``lambda ws, env: Starflow.open(url, workspace_id=ws, env=env,
            maintenance=False)``.
        limit: Most scopes open at once (each holds a connection or a pool).
    """

    def __init__(self, open_app: Callable[[str, str], Starflow], *, limit: int = 32) -> None:
        self._open_app = open_app
        self._limit = limit
        self._apps: dict[tuple[str, str], Starflow] = {}
        self._lock = anyio.Lock()
        self._stop = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Scopes:
        self._tg = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._stop.set()
        tg, self._tg = self._tg, None
        if tg is not None:
            await tg.__aexit__(*exc)

    def add(self, sf: Starflow) -> None:
        """Serve an app opened elsewhere for its own scope (the server's default one)."""
        self._apps[(sf.workspace_id, sf.env)] = sf

    async def get(self, workspace_id: str, env: str) -> Starflow:
        """The open Starflow of this scope, opened now if it is the first time.

        Raises:
            StarflowError: a bad name, a scope the database holds nothing of (no run,
                schedule or wake key: nothing is opened or written), too many scopes
                open, ``Scopes`` not entered, or the app failed to open.
        """
        check_scope(workspace_id, env)
        key = (workspace_id, env)
        if key in self._apps:
            return self._apps[key]
        async with self._lock:
            if key in self._apps:
                return self._apps[key]
            if self._tg is None:
                raise StarflowError("Scopes opens apps only inside `async with Scopes(...)`")
            if len(self._apps) >= self._limit:
                raise StarflowError(f"this server already shows {self._limit} workspaces/envs; "
                                    "restart it to show others")
            candidate = self._open_app(workspace_id, env)
            if not await _holds(candidate):
                await candidate.adapter.close()
                raise StarflowError(f"workspace {workspace_id!r} env {env!r} has no runs, "
                                    "schedules or keys in this database: check the names "
                                    "(a scope appears once something runs in it)")
            sf: Starflow = await self._tg.start(self._own, candidate)
            self._apps[key] = sf
            return sf

    async def _own(self, candidate: Starflow, *,
                   task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
        # Shielded: the app closes when Scopes is left, not half-way through a
        # cancellation (which would skip closing its database).
        with anyio.CancelScope(shield=True):
            async with candidate as sf:
                task_status.started(sf)
                await self._stop.wait()
