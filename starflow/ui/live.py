"""Live views: server-sent events that tell an open page its data moved.

A run page and the runs table each open a stream; it says ``changed`` when
what the page was rendered from (its *version*) moves, and the page fetches
its fresh view without a reload. Fed by the warm tier when there is one
(pushed), else by a short poll of the cold tier.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..adapters.pages import RunPage, RunPageQuery
from ..errors import RunNotFound, WarmTierError
from .site import BadInput, Site

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["Live", "page_version", "run_version"]

#: Seconds without a change after which a stream sends a keep-alive comment.
KEEP_ALIVE = 15


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


class Live:
    """The event streams of one scope's run pages and runs table."""

    def __init__(self, site: Site) -> None:
        self.site = site

    @staticmethod
    def sse(events: AsyncIterator[str]) -> Response:
        from starlette.responses import StreamingResponse

        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    async def run_stream(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            # as stored: the address may spell it in upper case
            run_id = (await self.site.run_or_404(run_id)).id
        except BadInput as exc:
            from starlette.responses import PlainTextResponse

            return PlainTextResponse(str(exc), status_code=exc.status)
        return self.sse(self.run_changes(run_id, request.query_params.get("seen")))

    async def run_changes(self, run_id: str, seen: str | None = None) -> AsyncIterator[str]:
        """``changed`` whenever the run's row or events move; ``end`` once it ended.

        ``seen`` is the version the page was rendered at (:func:`run_version`):
        a change between the render and this stream's first read is reported
        too. Fed by the warm tier when there is one (pushed), else by a short
        poll of the cold row and its newest events."""
        sf = self.site.sf
        poll = self.site.poll_interval
        yield "retry: 2000\n\n"
        if sf.warm is not None:
            try:
                async for live in sf.watch(run_id):
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
            try:
                run = await sf.get_run(run_id)
                fresh = await sf.events(run_id, after_id=last_event)
            except RunNotFound:
                yield _event("end", {"status": "gone"})
                return
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
            if idle * poll >= KEEP_ALIVE:
                yield ": keep-alive\n\n"
                idle = 0
            await anyio.sleep(poll)

    async def runs_stream(self, request: Request) -> Response:
        try:
            query, _ = self.site.query_from(dict(request.query_params))
        except BadInput as exc:
            from starlette.responses import PlainTextResponse

            return PlainTextResponse(str(exc), status_code=exc.status)
        query = msgspec.structs.replace(query, counts=False)
        return self.sse(self.table_changes(query, request.query_params.get("seen")))

    async def table_changes(self, query: RunPageQuery, seen: str | None = None
                            ) -> AsyncIterator[str]:
        """``changed`` whenever the first page's rows or their statuses change
        (``seen``: the page's version when it was rendered, :func:`page_version`)."""
        sf = self.site.sf
        poll = self.site.poll_interval
        yield "retry: 2000\n\n"
        last = None
        idle = 0
        while True:
            page = await sf.list_runs_page(query)
            state = page_version(page)
            if state != last:
                if last is not None or (seen is not None and seen != state):
                    yield _event("changed", {"rows": len(page.runs)})
                last = state
                idle = 0
            idle += 1
            if idle * poll >= KEEP_ALIVE:
                yield ": keep-alive\n\n"
                idle = 0
            await anyio.sleep(poll)
