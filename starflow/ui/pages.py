"""The pages that read: the runs table, a run, and the operations page.

Each is a GET that never changes state; it reads through the scope's open
:class:`~starflow.Starflow` (the cold tier, the authority) and renders a
template. A page that lives (the runs table, a run) carries the version it
was rendered at, for its event stream (:mod:`starflow.ui.live`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from ..adapters.pages import RunPage, RunPageQuery
from ..errors import RunNotFound, StarflowError
from ..records import BULK_STATUSES, RUN_STATUSES
from . import views
from .live import page_version, run_version
from .operations import load_operations
from .site import FILTERS, BadInput, Site

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["Pages", "bulk_counts"]

#: A run's page shows its first and last this many events (a long run's page stays small).
TIMELINE_EDGE = 1000
#: Child runs a run page lists (the newest; `starflow runs show` lists more).
CHILDREN_SHOWN = 200
#: What a run's page says after an action redirected to it (``?done=``).
DONE = {
    "signal": "Signal sent.",
    "cancel": "Run cancelled.",
    "retry": "Run retried.",
    "fork": "Forked: this new run replays the other run's history before the chosen node "
            "and runs from there.",
    "wake": "Run woken through its token.",
    "pause": "Pause requested: the run is held at its next step (a queued or waiting run "
             "at once); signals sent meanwhile are kept until it is resumed.",
    "resume": "Run resumed.",
}


#: The bulk actions the runs table offers on its filtered runs.
PAGE_BULK_ACTIONS = ("cancel", "retry")


def bulk_counts(query: RunPageQuery, counts: dict[str, int] | None) -> dict[str, int]:
    """How many of the filtered runs each bulk action applies to, from the page's
    counts per status (none when no filter is set, or with the run-id filter,
    which a bulk action does not take)."""
    if counts is None or query.id_prefix is not None or (
            query.status is None and query.template_id is None and query.pool is None
            and query.started_from is None and query.started_before is None):
        return {}
    found = {}
    for action in PAGE_BULK_ACTIONS:
        applies = BULK_STATUSES[action]
        chosen = (query.status,) if query.status is not None else applies
        n = sum(counts.get(st, 0) for st in chosen if st in applies)
        if n:
            found[action] = n
    return found


def _bulk_done(params: dict[str, str]) -> str:
    """What the runs table says after a bulk action redirected to it."""
    done = {"cancel": "cancelled", "retry": "retried"}[params["done"]]
    n = {k: params.get(k, "0") if params.get(k, "0").isdigit() else "?"
         for k in ("acted", "skipped", "failed")}
    text = f"{n['acted']} runs {done}"
    if n["skipped"] != "0":
        text += f", {n['skipped']} skipped (they changed in the meantime)"
    if n["failed"] != "0":
        text += f", {n['failed']} failed (the server's log names them)"
    return text + "."


class Pages:
    """The read-only pages of one scope."""

    def __init__(self, site: Site) -> None:
        self.site = site

    async def runs(self, request: Request, *, message: str | None = None,
                   error: str | None = None, status: int = 200) -> Response:
        site = self.site
        params = dict(request.query_params)
        try:
            query, filters = site.query_from(params)
            page = await site.sf.list_runs_page(query)
        except (BadInput, StarflowError) as exc:
            filters = {k: params.get(k, "") for k in FILTERS}
            return site.render(request, "runs.html", 400, filters=filters, page=RunPage(runs=[]),
                               error=str(exc), qs="", next_qs=None, first=True,
                               partial=bool(params.get("partial")))
        qs = urlencode(filters)
        status_links = {s: urlencode({**filters, "status": s}) for s in RUN_STATUSES}
        next_qs = (urlencode({**filters, "after": page.next.encode(),
                              **({"limit": str(query.limit)} if params.get("limit") else {})})
                   if page.next else None)
        name = "_runs.html" if params.get("partial") else "runs.html"
        if message is None and params.get("done") in PAGE_BULK_ACTIONS:
            message = _bulk_done(params)
        return site.render(request, name, status, filters=filters, page=page, qs=qs,
                           next_qs=next_qs, version=page_version(page),
                           status_links=status_links, bulk=bulk_counts(query, page.counts),
                           first=query.after is None, error=error, message=message,
                           limit=query.limit)

    async def run(self, request: Request, *, message: str | None = None,
                  error: str | None = None, status: int = 200,
                  run_id: str | None = None) -> Response:
        site = self.site
        run_id = run_id or request.path_params["run_id"]
        try:
            run = await site.run_or_404(run_id)
        except BadInput as exc:
            return site.render(request, "error.html", exc.status, error=str(exc))
        sf = site.sf
        run_id = run.id  # as stored: the address may spell it in upper case
        try:
            events = await sf.events(run_id)
            waits = [] if run.is_terminal else await sf.waits(run_id)
        except RunNotFound:  # pruned since it was read: shown as read, without its history
            events, waits = [], []
        children = await sf.list_runs(parent_run_id=run.id, limit=CHILDREN_SHOWN)
        now = sf.clock.now()
        session = []
        for session_id, key in views.session_keys(events):
            value = await sf.session_get(session_id, key)
            session.append((session_id, key, views.fold_json(value)))
        timeline = views.timeline(run, events)
        hidden = max(0, len(timeline) - 2 * TIMELINE_EDGE)
        done = request.query_params.get("done")
        if message is None and done in DONE:
            message = DONE[done]
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
            "nodes": views.recorded_nodes(events) if run.is_terminal else [],
            "fork_from": run.failure.node_id if run.failure is not None else None,
        }
        name = "_run.html" if request.query_params.get("partial") else "run.html"
        return site.render(request, name, status, **context)

    async def ops(self, request: Request, *, error: str | None = None, status: int = 200
                  ) -> Response:
        ops = await load_operations(self.site.sf)
        return self.site.render(request, "ops.html", status, error=error, **ops.context())
