"""Bulk actions by filter: sf.cancel_runs, sf.retry_runs, sf.fork_runs (#30)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

import starflow
import starflow.app_bulk
from starflow import (
    InvalidArgument,
    RunFilter,
    Starflow,
    TooManyRuns,
    set_attributes,
    step,
    wait_for,
    workflow,
)
from starflow.adapters.pages import RunPage, RunPageQuery
from starflow_testing import FakeClock
from tests.core.conftest import SpyAdapter

bug = {"present": True}


@step
async def bulk_reserve(item: int) -> str:
    return f"reserved-{item}"


@workflow(name="bulk-waits")
async def waits(n: int, region: str = "eu") -> str:
    set_attributes(region=region, n=n)
    await wait_for("go")
    return "done"


@workflow(name="bulk-other")
async def other(n: int) -> str:
    await wait_for("go")
    return "other"


@workflow(name="bulk-fails")
async def fails(n: int) -> str:
    if n % 2 == 0:
        await bulk_reserve(n)  # only even runs have step:bulk_reserve#1
    if bug["present"]:
        raise KeyError("a bug in the workflow body")
    return f"fixed-{n}"


@workflow(name="bulk-child")
async def bulk_child() -> str:
    await wait_for("go")
    return "child"


@workflow(name="bulk-parent")
async def bulk_parent() -> str:
    handle = await starflow.start_child(bulk_child)
    return str(await handle.result())


class PageSpy(SpyAdapter):
    """Also records the size of every page of runs read."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.pages: list[int] = []

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        page = await self.inner.list_runs_page(query)
        self.pages.append(len(page.runs))
        return page


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def pspy(db_url: str, workspace_id: str) -> PageSpy:
    from starflow.adapters import adapter_from_url

    return PageSpy(adapter_from_url(db_url, workspace_id=workspace_id))


@pytest.fixture
async def app(pspy: PageSpy, clock: FakeClock) -> AsyncIterator[Starflow]:
    async with Starflow(pspy, clock=clock, maintenance=False) as sf:
        yield sf


async def statuses(sf: Starflow) -> dict[str, str]:
    return {r.id: r.status for r in await sf.list_runs(limit=1000)}


class TestMatching:
    """Each criterion selects exactly the runs it names, in the statuses the action applies to."""

    async def test_by_workflow_status_attributes_and_time(self, app: Starflow,
                                                          clock: FakeClock) -> None:
        """template_id, since/until, attributes and status each narrow the cancel."""
        early = [(await app.run(waits, i, "eu")).run_id for i in range(2)]
        await clock.advance(timedelta(hours=1))
        middle = clock.now()
        late_eu = (await app.run(waits, 5, "eu")).run_id
        late_us = (await app.run(waits, 6, "us")).run_id
        other_run = (await app.run(other, 1)).run_id
        ended = (await app.run(waits, 9, "eu")).run_id
        await app.cancel(ended)  # ended: never matched by a cancel

        r = await app.cancel_runs(RunFilter(template_id="bulk-waits"), dry_run=True)
        assert (r.matched, r.acted, r.dry_run) == (4, 0, True)
        r = await app.cancel_runs(RunFilter(template_id="bulk-waits", until=middle),
                                  dry_run=True)
        assert r.matched == 2
        r = await app.cancel_runs(RunFilter(since=middle, attributes={"region": "us"}),
                                  dry_run=True)
        assert r.matched == 1
        r = await app.cancel_runs(RunFilter(attributes={"n": 5}), dry_run=True)
        assert r.matched == 1
        r = await app.cancel_runs(RunFilter(attributes={"n": "5"}), dry_run=True)
        assert r.matched == 0  # values match with their type
        r = await app.cancel_runs(RunFilter(status="paused", template_id="bulk-other"))
        assert (r.matched, r.acted, r.skipped_count, r.failed_count) == (1, 1, 0, 0)

        r = await app.cancel_runs(RunFilter(since=middle, attributes={"region": "eu"}))
        assert (r.matched, r.acted) == (1, 1)
        now = await statuses(app)
        assert now[late_eu] == "cancelled" and now[other_run] == "cancelled"
        assert now[late_us] == "paused" and {now[e] for e in early} == {"paused"}

    async def test_by_pool(self, app: Starflow) -> None:
        """pool matches queued runs of that runner pool only."""
        a = await app.options(pool="fast").start(waits, 1)
        b = await app.options(pool="slow").start(waits, 2)
        r = await app.cancel_runs(RunFilter(pool="fast"))
        assert (r.matched, r.acted) == (1, 1)
        now = await statuses(app)
        assert (now[a.run_id], now[b.run_id]) == ("cancelled", "queued")

    async def test_all_matches_every_run_the_action_applies_to(self, app: Starflow) -> None:
        """RunFilter(all=True) is the explicit 'every run'."""
        for i in range(3):
            await app.run(waits, i)
        r = await app.cancel_runs(RunFilter(all=True))
        assert (r.matched, r.acted) == (3, 3)
        assert set((await statuses(app)).values()) == {"cancelled"}


class TestSemantics:
    """Each run goes through the per-run method: a cancel cascades to children."""

    async def test_cancel_cascades_to_children(self, app: Starflow) -> None:
        parent = (await app.run(bulk_parent)).run_id
        kids = await app.list_runs(parent_run_id=parent)
        assert len(kids) == 1 and not kids[0].is_terminal
        r = await app.cancel_runs(RunFilter(template_id="bulk-parent"))
        assert (r.matched, r.acted) == (1, 1)
        assert (await app.get_run(kids[0].id)).status == "cancelled"


class TestRefusals:
    """Bad filters are refused before anything is written."""

    @pytest.mark.parametrize(("run_filter", "text"), [
        (RunFilter(), "no criterion"),
        (RunFilter(status="success"), "cancel applies only to queued, running, paused"),
        (RunFilter(status="bogus"), "status must be one of"),
        (RunFilter(template_id="x" * 300), "template_id"),
        (RunFilter(attributes={"k": 1.5}), "attributes"),  # type: ignore[dict-item]
    ])
    async def test_bad_filter(self, app: Starflow, pspy: PageSpy, run_filter: RunFilter,
                              text: str) -> None:
        """Each problem is named; nothing is written (the run stays paused)."""
        handle = await app.run(waits, 1)
        units = len(pspy.units)
        with pytest.raises(InvalidArgument, match=text):
            await app.cancel_runs(run_filter)
        assert len(pspy.units) == units
        assert (await app.get_run(handle.run_id)).status == "paused"

    async def test_naive_time_and_bad_limit(self, app: Starflow) -> None:
        """A naive since and a zero limit are both named."""
        from datetime import datetime

        with pytest.raises(InvalidArgument) as err:
            await app.retry_runs(RunFilter(since=datetime(2026, 1, 1)), limit=0)
        assert "since must be a timezone-aware" in str(err.value)
        assert "limit must be" in str(err.value)

    async def test_fork_needs_a_node(self, app: Starflow) -> None:
        with pytest.raises(InvalidArgument, match="from_node"):
            await app.fork_runs(RunFilter(all=True), from_node=" ")


class TestDryRunAndCap:
    """A dry run only counts; past the cap nothing is written."""

    async def test_dry_run_writes_nothing(self, app: Starflow, pspy: PageSpy) -> None:
        for i in range(4):
            await app.run(waits, i)
        before, units = await statuses(app), len(pspy.units)
        for action in (app.cancel_runs, app.retry_runs):
            r = await action(RunFilter(all=True), dry_run=True, limit=1)
            assert r.dry_run and r.acted == 0
        r = await app.fork_runs(RunFilter(all=True), from_node="step:x#1", dry_run=True)
        assert r.matched == 0  # paused runs have not ended
        assert (await app.cancel_runs(RunFilter(all=True), dry_run=True)).matched == 4
        assert await statuses(app) == before and len(pspy.units) == units

    async def test_cap(self, app: Starflow, pspy: PageSpy) -> None:
        """More matches than limit: TooManyRuns, nothing cancelled; limit=None acts on all."""
        for i in range(4):
            await app.run(waits, i)
        before, units = await statuses(app), len(pspy.units)
        with pytest.raises(TooManyRuns, match="more than limit=3") as err:
            await app.cancel_runs(RunFilter(template_id="bulk-waits"), limit=3)
        assert (err.value.action, err.value.limit) == ("cancel", 3)
        assert await statuses(app) == before and len(pspy.units) == units
        r = await app.cancel_runs(RunFilter(template_id="bulk-waits"), limit=4)
        assert r.acted == 4

    async def test_no_cap(self, app: Starflow) -> None:
        for i in range(3):
            await app.run(waits, i)
        r = await app.cancel_runs(RunFilter(all=True), limit=None)
        assert (r.matched, r.acted) == (3, 3)

    async def test_pages_across_more_runs_than_a_page(
            self, app: Starflow, pspy: PageSpy, monkeypatch: pytest.MonkeyPatch) -> None:
        """Matches are read a page at a time (never more rows than a page), all reached."""
        monkeypatch.setattr(starflow.app_bulk, "BULK_PAGE", 2)
        for i in range(7):
            await app.run(waits, i)
        pspy.pages.clear()
        assert (await app.cancel_runs(RunFilter(all=True), dry_run=True)).matched == 7
        assert pspy.pages == [2, 2, 2, 1]
        pspy.pages.clear()
        r = await app.cancel_runs(RunFilter(all=True), limit=10)
        assert (r.matched, r.acted) == (7, 7)
        assert max(pspy.pages) == 2 and len(pspy.pages) >= 8  # counted, then acted
        assert set((await statuses(app)).values()) == {"cancelled"}


class TestSkips:
    """A run that moved on between the match and the action is skipped, not an error."""

    async def test_cancel_skips_a_run_that_ended(self, app: Starflow,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        runs = [(await app.run(waits, i)).run_id for i in range(3)]
        victim = runs[1]
        original = app.cancel

        async def racing(run_id: str, **kw: Any) -> Any:
            if run_id == victim:
                await original(run_id)  # another process cancels it first
            return await original(run_id, **kw)

        monkeypatch.setattr(app, "cancel", racing)
        r = await app.cancel_runs(RunFilter(template_id="bulk-waits"))
        assert (r.matched, r.acted, r.skipped_count, r.failed_count) == (3, 2, 1, 0)
        assert list(r.skipped) == [victim] and "already ended" in r.skipped[victim]

    async def test_retry_then_skip(self, app: Starflow,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
        """retry_runs re-runs error runs (after the fix); one retried elsewhere is skipped."""
        bug["present"] = True
        runs = [(await app.run(fails, i)).run_id for i in range(3)]
        await app.run(waits, 1)  # paused: never matched by a retry
        bug["present"] = False
        victim = runs[0]
        original = app.retry

        async def racing(run_id: str) -> Any:
            if run_id == victim:
                await original(run_id)  # retried by someone else: now success
            return await original(run_id)

        monkeypatch.setattr(app, "retry", racing)
        r = await app.retry_runs(RunFilter(status="error", template_id="bulk-fails"))
        assert (r.matched, r.acted, r.skipped_count) == (3, 2, 1)
        assert "success" in r.skipped[victim]
        for run_id in runs:
            assert (await app.get_run(run_id)).status == "success"

    async def test_fork_skips_runs_without_the_node(self, app: Starflow) -> None:
        """Runs lacking from_node are reported; the others are forked, never the forks."""
        bug["present"] = True
        runs = {i: (await app.run(fails, i)).run_id for i in range(4)}
        bug["present"] = False
        r = await app.fork_runs(RunFilter(template_id="bulk-fails"),
                                from_node="step:bulk_reserve#1")
        assert (r.matched, r.acted, r.skipped_count) == (4, 2, 2)
        assert set(r.forks) == {runs[0], runs[2]}
        assert set(r.skipped) == {runs[1], runs[3]}
        assert "has no node 'step:bulk_reserve#1'" in r.skipped[runs[1]]
        for source, fork in r.forks.items():
            assert fork != source
            assert (await app.get_run(fork)).status == "success"
            assert (await app.get_run(source)).status == "error"  # the source is unchanged
