"""``InMemoryWarmTier``: the warm tier in this process's memory.

For a single process (development, tests, a single-node deployment that wants
``watch``). ``memory://`` gives a private store; ``memory://name`` a store
shared by every tier opened with that name in the process, each still scoped
to its own (workspace, env).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from .base import Projection, WarmTier, is_terminal, redact, state_hash

__all__ = ["InMemoryWarmTier", "MemoryStore"]


@dataclass
class _Run:
    columns: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Scope:
    runs: dict[str, _Run] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)
    session: dict[tuple[str, str], tuple[Any, str | None, Any]] = field(default_factory=dict)
    watchers: dict[str, set[_Watcher]] = field(default_factory=dict)


class _Watcher:
    __slots__ = ("changed",)

    def __init__(self) -> None:
        self.changed = anyio.Event()


class MemoryStore:
    """State of any number of (workspace, env) scopes."""

    def __init__(self) -> None:
        self.scopes: dict[tuple[str, str], _Scope] = {}

    def scope(self, workspace_id: str, env: str) -> _Scope:
        return self.scopes.setdefault((workspace_id, env), _Scope())


_named: dict[str, MemoryStore] = {}


def named_store(name: str) -> MemoryStore:
    """The process-wide store called ``name`` (created on first use)."""
    return _named.setdefault(name, MemoryStore())


class InMemoryWarmTier(WarmTier):
    """Warm tier held in a :class:`MemoryStore`.

    Args:
        store: The store (default: a private one).
        workspace_id: Tenant scope.
        env: Environment scope.
    """

    def __init__(self, store: MemoryStore | None = None, *, workspace_id: str = "celestial",
                 env: str = "prod", url: str = "memory://") -> None:
        super().__init__(workspace_id=workspace_id, env=env)
        self.store = store or MemoryStore()
        self.url = url
        self._closed = False

    @property
    def _s(self) -> _Scope:
        return self.store.scope(self.workspace_id, self.env)

    async def close(self) -> None:
        self._closed = True
        for watchers in self._s.watchers.values():
            for w in watchers:
                w.changed.set()

    # -- writes ----------------------------------------------------------------

    async def apply(self, batch: Sequence[Projection]) -> None:
        touched: set[str] = set()
        for p in batch:
            run_id = self._apply_one(p)
            if run_id is not None:
                touched.add(run_id)
        for run_id in touched:
            self._notify(run_id)

    def _apply_one(self, p: Projection) -> str | None:
        s = self._s
        data = p.payload
        if p.kind == "session_var":
            if data.get("op") == "delete_run":
                owner = data["run_id"]
                for k in [k for k, v in s.session.items() if v[1] == owner and v[2] is None]:
                    del s.session[k]
            else:
                s.session[(data["session_id"], data["key"])] = (
                    copy.deepcopy(data.get("value")), data.get("run_id"), data.get("keep_until"))
            return None
        run_id: str = data["run_id"]
        if p.kind == "reset":
            columns = data.get("columns")
            if columns is None:
                # Forgotten (a pruned run, or one cold no longer has): nothing of
                # it stays, its high-water mark included.
                s.runs.pop(run_id, None)
                s.progress.pop(run_id, None)
                s.seq.pop(run_id, None)
            else:
                s.runs[run_id] = _Run(columns=copy.deepcopy(dict(columns)),
                                      events=copy.deepcopy(list(data.get("events") or [])))
            return run_id
        if p.seq <= s.seq.get(run_id, 0):
            return None  # already applied (a batch re-sent after a failure)
        run = s.runs.get(run_id)
        if p.kind == "run":
            if data.get("op") == "insert":
                if run is None:
                    run = s.runs[run_id] = _Run(columns={})
            elif run is None:
                return None
            run.columns.update(copy.deepcopy(data["columns"]))
        elif p.kind == "event":
            if run is None:
                return None
            run.events.append(copy.deepcopy(data["event"]))
        else:
            return None
        s.seq[run_id] = p.seq
        return run_id

    async def put_progress(self, run_id: str, node_id: str, data: Any) -> None:
        self._s.progress.setdefault(run_id, {})[node_id] = copy.deepcopy(redact(data))
        self._notify(run_id)

    def _notify(self, run_id: str) -> None:
        for w in self._s.watchers.get(run_id, ()):
            w.changed.set()

    # -- reads -----------------------------------------------------------------

    def _state(self, run_id: str) -> dict[str, Any] | None:
        s = self._s
        run = s.runs.get(run_id)
        if run is None:
            return None
        state = copy.deepcopy(run.columns)
        state["progress"] = copy.deepcopy(s.progress.get(run_id, {}))
        state["last_event"] = copy.deepcopy(run.events[-1]) if run.events else None
        state["event_count"] = len(run.events)
        return state

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        return self._state(run_id)

    async def live_runs(self) -> list[dict[str, Any]]:
        out = []
        for run_id, run in self._s.runs.items():
            if not is_terminal(run.columns.get("status")):
                state = self._state(run_id)
                assert state is not None
                out.append(state)
        return out

    async def subscribe(self, run_id: str) -> AsyncIterator[dict[str, Any]]:
        watcher = _Watcher()
        watchers = self._s.watchers.setdefault(run_id, set())
        watchers.add(watcher)
        try:
            state = self._state(run_id)
            if state is not None:
                yield state
            while not self._closed:
                await watcher.changed.wait()
                watcher.changed = anyio.Event()
                if self._closed:
                    return
                state = self._state(run_id)
                if state is not None:
                    yield state
        finally:
            watchers.discard(watcher)

    async def hashes(self, run_ids: Sequence[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for run_id in run_ids:
            run = self._s.runs.get(run_id)
            out[run_id] = None if run is None else state_hash(run.columns, run.events)
        return out

    async def session_var(self, session_id: str, key: str) -> Any:
        entry = self._s.session.get((session_id, key))
        return None if entry is None else copy.deepcopy(entry[0])
