"""``RedisWarmTier``: the warm tier on Redis (``redis.asyncio``; hashes + pub/sub).

Install with ``pip install 'starflow-durable[redis]'``. Keys are prefixed with the
scope, ``starflow:{workspace_id}:{env}:``, each part percent-encoded (see
:func:`key_prefix`), so tenants sharing one Redis never see each other's state:

``run:{id}``       hash, one field per ``workflow_runs`` column (JSON values)
``events:{id}``    list of the run's events (JSON), oldest first
``seq:{id}``       the highest outbox id applied to the run (at-most-once)
``progress:{id}``  hash, node id -> latest ``starflow.progress`` data (JSON)
``live``           set of run ids whose status is not terminal

Once a run ends (``success``, ``error``, ``cancelled``), its ``run``,
``events``, ``seq`` and ``progress`` keys expire after ``finished_ttl``
(``StarflowConfig.warm_finished_ttl``, default 24 h): cold keeps every run,
and the warm tier serves live views, so it does not grow for ever. A run that
becomes live again (``sf.retry``) loses the expiry at its next projection.
``sv:{session}``   hash, key -> ``[value, run_id, keep_until]`` (JSON)
``svrun:{id}``     set of the run-scoped session vars a run wrote
``watch:{id}``     pub/sub channel announcing a change to the run

A ``run`` / ``event`` / ``reset`` projection is applied by one Lua script, so
the at-most-once check, the write, the live set and the announcement are one
atomic step; a batch is one pipelined round trip.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import msgspec

from ..errors import ConfigError, WarmTierError
from .base import Projection, WarmTier, redact, state_hash

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisWarmTier"]

_APPLY = """
local p = cjson.decode(ARGV[1])
local runk, evk, seqk, livek, progk = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local function set_columns(cols)
  local args = {}
  for k, v in pairs(cols) do
    args[#args + 1] = k
    args[#args + 1] = v
  end
  if #args > 0 then redis.call('HSET', runk, unpack(args)) end
end
local function refresh_live()
  local st = redis.call('HGET', runk, 'status')
  if (not st) or st == '"success"' or st == '"error"' or st == '"cancelled"' then
    redis.call('SREM', livek, p.run_id)
    if st then
      for _, k in ipairs({runk, evk, seqk, progk}) do redis.call('EXPIRE', k, p.ttl) end
    end
  else
    redis.call('SADD', livek, p.run_id)
    for _, k in ipairs({runk, evk, seqk, progk}) do redis.call('PERSIST', k) end
  end
end
if p.kind == 'reset' then
  redis.call('DEL', runk, evk)
  if p.has_columns then
    set_columns(p.columns)
    for _, e in ipairs(p.events) do redis.call('RPUSH', evk, e) end
  else
    redis.call('DEL', progk, seqk)
  end
  refresh_live()
  redis.call('PUBLISH', p.channel, p.run_id)
  return 1
end
local wm = tonumber(redis.call('GET', seqk) or '0')
if p.seq <= wm then return 0 end
local exists = redis.call('EXISTS', runk) == 1
if p.kind == 'run' then
  if p.op ~= 'insert' and not exists then return 0 end
  set_columns(p.columns)
elseif p.kind == 'event' then
  if not exists then return 0 end
  redis.call('RPUSH', evk, p.event)
else
  return 0
end
redis.call('SET', seqk, p.seq)
refresh_live()
redis.call('PUBLISH', p.channel, p.run_id)
return 1
"""


def _dumps(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _loads(text: str | bytes) -> Any:
    return msgspec.json.decode(text)


def key_prefix(workspace_id: str, env: str) -> str:
    """The prefix of every key of one (workspace, env): ``starflow:{ws}:{env}:``.

    Each part is percent-encoded (``:`` as ``%3A``, ``%`` as ``%25``, glob
    characters too), so the separator cannot be forged: workspace ``acme:prod``
    with env ``eu`` and workspace ``acme`` with env ``prod:eu`` get distinct
    keys, and no tenant's prefix is the start of another's. Names made of
    letters, digits and ``-_.~`` are unchanged.
    """
    return f"starflow:{quote(workspace_id, safe='')}:{quote(env, safe='')}:"


class RedisWarmTier(WarmTier):
    """Warm tier on a Redis server.

    Args:
        url: ``redis://[:password@]host[:port][/db]`` (or ``rediss://``).
        workspace_id: Tenant scope (part of every key).
        env: Environment scope (part of every key).
        finished_ttl: How long an ended run's keys are kept (default 24 h; at
            least one second).
    """

    def __init__(self, url: str, *, workspace_id: str = "celestial", env: str = "prod",
                 finished_ttl: timedelta = timedelta(hours=24)) -> None:
        super().__init__(workspace_id=workspace_id, env=env)
        if not isinstance(finished_ttl, timedelta) or finished_ttl < timedelta(seconds=1):
            raise ConfigError(f"finished_ttl must be a timedelta of at least 1 s: "
                              f"{finished_ttl!r}")
        self.finished_ttl = finished_ttl
        try:
            import redis.asyncio  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                "the Redis warm tier needs the redis package: install it with: "
                "pip install 'starflow-durable[redis]'"
            ) from exc
        self._url = url
        self.url = _redact(url)
        self.prefix = key_prefix(workspace_id, env)
        self._client: Redis | None = None
        self._script: Any = None

    # -- connection ------------------------------------------------------------

    @property
    def client(self) -> Redis:
        if self._client is None:
            import redis.asyncio as aioredis

            self._client = aioredis.Redis.from_url(
                self._url, decode_responses=True, socket_connect_timeout=2, socket_timeout=5)
            self._script = self._client.register_script(_APPLY)
        return self._client

    async def open(self) -> None:
        """Connect and check the server answers (raises :class:`WarmTierError` if not)."""
        async with self._errors("ping"):
            await self.client.ping()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                await client.aclose()

    def _errors(self, action: str) -> _Translate:
        return _Translate(self, action)

    def _k(self, kind: str, ident: str = "") -> str:
        return f"{self.prefix}{kind}:{ident}" if ident else f"{self.prefix}{kind}"

    def _run_keys(self, run_id: str) -> list[str]:
        return [self._k("run", run_id), self._k("events", run_id), self._k("seq", run_id),
                self._k("live"), self._k("progress", run_id)]

    # -- writes ----------------------------------------------------------------

    async def apply(self, batch: Sequence[Projection]) -> None:
        if not batch:
            return
        async with self._errors("apply"), self.client.pipeline(transaction=False) as pipe:
            for p in batch:
                await self._queue(pipe, p)
            await pipe.execute()

    async def _queue(self, pipe: Any, p: Projection) -> None:
        data = p.payload
        if p.kind == "session_var":
            if data.get("op") == "delete_run":
                # Read-then-delete: session vars are not fenced by a high-water mark.
                members = await self.client.smembers(self._k("svrun", data["run_id"]))
                for member in members:
                    session_id, key = _loads(member)
                    pipe.hdel(self._k("sv", session_id), key)
                pipe.delete(self._k("svrun", data["run_id"]))
            else:
                session_id, key, run_id = data["session_id"], data["key"], data.get("run_id")
                keep = data.get("keep_until")
                pipe.hset(self._k("sv", session_id), key,
                          _dumps([data.get("value"), run_id, keep]))
                if run_id is not None:
                    member = _dumps([session_id, key])
                    if keep is None:
                        pipe.sadd(self._k("svrun", run_id), member)
                    else:
                        pipe.srem(self._k("svrun", run_id), member)
            return
        run_id = data["run_id"]
        arg: dict[str, Any] = {"kind": p.kind, "seq": p.seq, "run_id": run_id,
                               "channel": self._k("watch", run_id),
                               "ttl": max(1, int(self.finished_ttl.total_seconds()))}
        if p.kind == "run":
            arg["op"] = data.get("op", "update")
            arg["columns"] = {k: _dumps(v) for k, v in data["columns"].items()}
        elif p.kind == "event":
            arg["event"] = _dumps(data["event"])
        elif p.kind == "reset":
            columns = data.get("columns")
            arg["has_columns"] = columns is not None
            arg["columns"] = {k: _dumps(v) for k, v in (columns or {}).items()}
            arg["events"] = [_dumps(e) for e in data.get("events") or []]
        else:
            return
        # cjson turns an empty object into an empty array: harmless for pairs().
        await self._script(keys=self._run_keys(run_id), args=[json.dumps(arg)], client=pipe)

    async def put_progress(self, run_id: str, node_id: str, data: Any) -> None:
        async with self._errors("put_progress"), self.client.pipeline(transaction=True) as pipe:
            pipe.hset(self._k("progress", run_id), node_id, _dumps(redact(data)))
            pipe.publish(self._k("watch", run_id), run_id)
            await pipe.execute()

    # -- reads -----------------------------------------------------------------

    async def _states(self, run_ids: Sequence[str]) -> list[dict[str, Any] | None]:
        if not run_ids:
            return []
        async with self._errors("get_run"), self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(self._k("run", run_id))
                pipe.hgetall(self._k("progress", run_id))
                pipe.lindex(self._k("events", run_id), -1)
                pipe.llen(self._k("events", run_id))
            raw = await pipe.execute()
        out: list[dict[str, Any] | None] = []
        for i in range(len(run_ids)):
            cols, progress, last, count = raw[4 * i: 4 * i + 4]
            if not cols:
                out.append(None)
                continue
            state: dict[str, Any] = {k: _loads(v) for k, v in cols.items()}
            state["progress"] = {k: _loads(v) for k, v in progress.items()}
            state["last_event"] = _loads(last) if last is not None else None
            state["event_count"] = int(count)
            out.append(state)
        return out

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        return (await self._states([run_id]))[0]

    async def live_runs(self) -> list[dict[str, Any]]:
        async with self._errors("live_runs"):
            ids = sorted(str(i) for i in await self.client.smembers(self._k("live")))
        return [s for s in await self._states(ids) if s is not None]

    async def subscribe(self, run_id: str) -> AsyncIterator[dict[str, Any]]:
        async with self._errors("subscribe"):
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            await pubsub.subscribe(self._k("watch", run_id))
        try:
            state = await self.get_run(run_id)
            if state is not None:
                yield state
            while True:
                async with self._errors("subscribe"):
                    message = await pubsub.get_message(timeout=None)
                if message is None or message.get("type") != "message":
                    continue
                state = await self.get_run(run_id)
                if state is not None:
                    yield state
        finally:
            with contextlib.suppress(Exception):  # the connection may already be gone
                await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]

    async def hashes(self, run_ids: Sequence[str]) -> dict[str, str | None]:
        if not run_ids:
            return {}
        async with self._errors("hashes"), self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(self._k("run", run_id))
                pipe.lrange(self._k("events", run_id), 0, -1)
            raw = await pipe.execute()
        out: dict[str, str | None] = {}
        for i, run_id in enumerate(run_ids):
            cols, events = raw[2 * i], raw[2 * i + 1]
            out[run_id] = state_hash({k: _loads(v) for k, v in cols.items()} if cols else None,
                                     [_loads(e) for e in events])
        return out

    async def session_var(self, session_id: str, key: str) -> Any:
        async with self._errors("session_var"):
            raw = await self.client.hget(self._k("sv", session_id), key)
        return None if raw is None else _loads(raw)[0]


class _Translate:
    """Turn redis-py errors into :class:`WarmTierError` naming the server and action."""

    def __init__(self, tier: RedisWarmTier, action: str) -> None:
        self.tier = tier
        self.action = action

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> bool:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, WarmTierError):
            return False
        from redis.exceptions import RedisError

        if isinstance(exc, RedisError | OSError):
            raise WarmTierError(
                f"warm tier {self.tier.url} failed during {self.action}: "
                f"{type(exc).__name__}: {exc}. Cold state is unaffected; the drainer "
                "retries with backoff (check that Redis is running and the URL is right)"
            ) from exc
        return False


def _redact(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
