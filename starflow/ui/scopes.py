"""Several workspaces and envs behind one server (``starflow ui --all-workspaces``).

A :class:`~starflow.Starflow` is bound to one (workspace, env). To show
another, :class:`Scopes` opens one more on the same database, the first time
a page of that scope is asked for, and keeps it open until the server stops.
Each is opened by a task of the server's own task group (a Starflow runs its
heartbeat task in a task group, which must be left by the task that entered
it), never by the request that first needed it.
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


class Scopes:
    """Opens a Starflow per (workspace, env) on demand, in ``task_group``.

    Args:
        task_group: The server's task group; each opened app lives in a task of it.
        open_app: Makes the (not yet open) Starflow of a scope, e.g.
            ``lambda ws, env: Starflow.open(url, workspace_id=ws, env=env,
            maintenance=False)``.
        limit: Most scopes open at once (each holds a connection or a pool).
    """

    def __init__(self, task_group: anyio.abc.TaskGroup,
                 open_app: Callable[[str, str], Starflow], *, limit: int = 32) -> None:
        self._tg = task_group
        self._open_app = open_app
        self._limit = limit
        self._apps: dict[tuple[str, str], Starflow] = {}
        self._lock = anyio.Lock()

    def add(self, sf: Starflow) -> None:
        """Serve an app opened elsewhere for its own scope (the server's default one)."""
        self._apps[(sf.adapter.workspace_id, sf.adapter.env)] = sf

    async def get(self, workspace_id: str, env: str) -> Starflow:
        """The open Starflow of this scope, opened now if it is the first time.

        Raises:
            StarflowError: a bad name, too many scopes open, or the app failed to open.
        """
        check_scope(workspace_id, env)
        key = (workspace_id, env)
        if key in self._apps:
            return self._apps[key]
        async with self._lock:
            if key in self._apps:
                return self._apps[key]
            if len(self._apps) >= self._limit:
                raise StarflowError(f"this server already shows {self._limit} workspaces/envs; "
                                    "restart it to show others")
            sf: Starflow = await self._tg.start(self._own, workspace_id, env)
            self._apps[key] = sf
            return sf

    async def _own(self, workspace_id: str, env: str, *,
                   task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._open_app(workspace_id, env) as sf:
            task_status.started(sf)
            await anyio.sleep_forever()
