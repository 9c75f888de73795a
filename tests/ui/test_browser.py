"""The web UI in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

The app is served by uvicorn in this process on a free 127.0.0.1 port, with a
worker driving the runs in the same event loop. Skipped when no browser is
installed, unless ``STARFLOW_REQUIRE_BROWSER`` is set (CI sets it): then a
missing browser fails the suite.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from starflow import Starflow, step, wait_for, workflow
from starflow.ui import create_app

from .conftest import FIXABLE, fixable, quick

#: A real browser drives the page.
pytestmark = pytest.mark.slow


CHROMIUM = os.environ.get("STARFLOW_TEST_CHROMIUM", "/usr/bin/chromium")
#: Set in CI: a missing browser fails the suite instead of skipping.
REQUIRE_BROWSER = bool(os.environ.get("STARFLOW_REQUIRE_BROWSER"))
TOKEN = "browser-test-token-0123456789"
#: Released by the test: the step after the signal waits for it, so the page
#: is seen running before it is seen completing.
GATE: dict[str, anyio.Event] = {}


def chromium_path() -> str:
    """The browser to drive; skip (locally) or fail (in CI) when there is none."""
    found = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    problem = None
    if found is None:
        problem = (f"no Chromium at {CHROMIUM} (install it: apt-get install chromium, "
                   "or set STARFLOW_TEST_CHROMIUM)")
    else:
        try:
            import playwright.async_api  # noqa: F401
        except ImportError:
            problem = "playwright is not installed (pip install -e '.[dev]')"
    if problem is None:
        assert found is not None
        return found
    if REQUIRE_BROWSER:
        pytest.fail(f"the browser tests are required (STARFLOW_REQUIRE_BROWSER) but: {problem}")
    pytest.skip(problem)


@step
async def ship(item: str) -> str:
    await GATE["ship"].wait()
    return f"shipped {item}"


@workflow(name="ui_browser_order")
async def order(item: str) -> dict[str, Any]:
    decision = await wait_for("approve")
    return {"decision": decision, "shipping": await ship(item)}


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off",
                                           log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


@asynccontextmanager
async def signed_in(executable: str, base: str) -> AsyncIterator[Any]:
    """A page of a headless Chromium, signed in to the app served at ``base``."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, headless=True,
                                           args=["--no-sandbox", "--disable-gpu"])
        try:
            page = await browser.new_page()
            page.set_default_timeout(10_000)
            await page.goto(f"{base}/?token={TOKEN}")
            yield page
        finally:
            await browser.close()


async def status_of(sf: Starflow, run_id: str) -> str:
    return (await sf.get_run(run_id)).status


async def until(sf: Starflow, run_id: str, status: str) -> None:
    with anyio.fail_after(10):
        while await status_of(sf, run_id) != status:  # noqa: ASYNC110 - a database poll
            await anyio.sleep(0.02)


@pytest.mark.timeout(90)
async def test_find_signal_watch_and_cancel(sf: Starflow) -> None:
    """Open the runs page, filter, open a paused run, signal it from the form,
    watch it complete without a reload, cancel another, see a new run appear in
    the table without a reload; the database agrees."""
    executable = chromium_path()
    from playwright.async_api import async_playwright

    GATE["ship"] = anyio.Event()
    worker = sf.worker(concurrency=4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        lamp = (await sf.start(order, "lamp")).run_id
        desk = (await sf.start(order, "desk")).run_id
        done = (await sf.run(quick, 1)).run_id
        await until(sf, lamp, "paused")
        await until(sf, desk, "paused")

        app = create_app(sf, token=TOKEN, poll_interval=0.1)
        async with serve(app) as base, async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=executable, headless=True,
                                               args=["--no-sandbox", "--disable-gpu"])
            try:
                page = await browser.new_page()
                page.set_default_timeout(10_000)
                # Without the token: refused.
                response = await page.goto(f"{base}/runs")
                assert response is not None and response.status == 401
                # The printed address carries it once; a cookie keeps it.
                await page.goto(f"{base}/?token={TOKEN}")
                assert page.url == f"{base}/runs"
                rows = page.locator("tbody tr[data-run]")
                assert await rows.count() == 3

                await page.select_option("select[name=status]", "paused")
                await page.click("form.filters button[type=submit]")
                await page.wait_for_url("**/runs?status=paused**")
                assert await rows.count() == 2
                assert await page.locator(f'tr[data-run="{done}"]').count() == 0

                await page.click(f'tr[data-run="{lamp}"] a')
                await page.wait_for_selector('[data-run-status="paused"]')
                assert await page.locator("text=wait:approve#1").count() >= 1

                await page.fill("#signal-form textarea[name=payload]", '{"ok": true}')
                await page.click("#signal-form button[type=submit]")
                await page.wait_for_selector("#confirm")
                assert await status_of(sf, lamp) == "paused"  # nothing before confirming
                await page.click("#confirm")
                await page.wait_for_selector("text=Signal sent.")
                await page.wait_for_selector('[data-run-status="running"]')
                await page.evaluate("window.__sameDocument = true")
                GATE["ship"].set()  # the run now completes while the page stays open
                await page.wait_for_selector('[data-run-status="success"]')
                assert await page.evaluate("window.__sameDocument === true")
                assert await page.locator("text=shipped lamp").count() >= 1
                assert await page.locator("#signal-form").is_hidden()

                await page.goto(f"{base}/runs/{desk}")
                await page.click("button:has-text('Cancel run')")
                await page.click("#confirm")
                await page.wait_for_selector('[data-run-status="cancelled"]')
                assert await page.locator("text=Run cancelled.").count() == 1

                # The runs table updates itself too: a run started now appears.
                await page.goto(f"{base}/runs")
                await page.wait_for_selector("#live-state:has-text('live')")
                await page.evaluate("window.__sameDocument = true")
                later = (await sf.run(quick, 2)).run_id
                await page.wait_for_selector(f'tr[data-run="{later}"]')
                assert await page.evaluate("window.__sameDocument === true")
                assert await page.locator("text=cancelled").count() >= 1
            finally:
                await browser.close()
        worker.stop(0)

    lamp_run = await sf.get_run(lamp)
    assert lamp_run.status == "success"
    assert lamp_run.result_json == {"decision": {"ok": True}, "shipping": "shipped lamp"}
    assert await status_of(sf, desk) == "cancelled"
    assert "run_cancelled" in [e.event_type for e in await sf.events(desk)]
    assert await status_of(sf, done) == "success"


@step
async def hold_slot(n: int) -> int:
    await GATE["slot"].wait()
    return n


@workflow(name="ui_browser_slot")
async def slot(n: int) -> int:
    return await hold_slot(n)


async def cells(page: Any, row: str) -> list[str]:
    return [" ".join(t.split()) for t in await page.locator(f"{row} td").all_inner_texts()]


@pytest.mark.timeout(90)
async def test_operations_page_pools_and_schedules(sf: Starflow) -> None:
    """The operations page before anything exists (empty states), then with pool
    limits in use and schedules in every state: the values rendered, a reached limit
    in red, hostile names shown as text and never run, a last run one click away."""

    executable = chromium_path()

    hostile = '<img src=x onerror="window.__xss=1">'
    GATE["slot"] = anyio.Event()
    worker = sf.worker(pool="pay", concurrency=4)
    app = create_app(sf, token=TOKEN, poll_interval=0.1)
    async with anyio.create_task_group() as tg, serve(app) as base, \
            signed_in(executable, base) as page:
        try:
            await page.click("nav a:has-text('Operations')")
            await page.wait_for_url("**/ops")
            assert "no pool has limits, queued or executing runs" in \
                await page.inner_text("#pools")
            assert "no schedules" in await page.inner_text("#schedules")

            await sf.set_pool_limits("pay", concurrency=1,
                                     rate_limit=(5, timedelta(minutes=1)))
            await sf.set_pool_limits(hostile, concurrency=2, key_concurrency=1)
            tg.start_soon(worker.run)
            first = (await sf.options(pool="pay").start(slot, 1)).run_id
            await sf.options(pool="pay").start(slot, 2)
            await until(sf, first, "running")
            await sf.schedule("nightly", quick, 1, cron="0 3 * * *")
            last = (await sf.trigger_schedule("nightly")).run_id
            await until(sf, last, "success")  # the worker serves runs for any pool too
            await sf.schedule("quiet", quick, 2, cron="0 * * * *")
            await sf.pause_schedule("quiet")
            stale = await sf.schedule("stale", quick, 3, cron="*/5 * * * *")
            past = sf.clock.now() - timedelta(hours=2, minutes=1)
            assert await sf.adapter.update_schedule(
                "stale", stale.revision, {"next_fire_at": past, "due_at": past},
                now=sf.clock.now())  # as if no maintenance loop had run for two hours
            await sf.schedule(hostile, quick, 4, cron="0 4 * * *", pool=hostile)

            await page.reload()
            assert await cells(page, 'tr[data-pool="pay"]') == [
                "pay", "1", "1", "1 / 1", "1 / 5 per 1m", "none", "oldest first", "Pause…"]
            full = page.locator('tr[data-pool="pay"] td.limit.full')
            assert await full.inner_text() == "1 / 1"
            assert await full.evaluate("e => getComputedStyle(e).color") == "rgb(179, 38, 30)"
            names = await page.locator("#pools tbody td:first-child").all_inner_texts()
            assert hostile in names
            ids = await page.locator("#schedules tbody td:first-child").all_inner_texts()
            assert ids == [hostile, "nightly", "quiet", "stale"]
            assert await page.locator("main img, main script").count() == 0
            assert await page.evaluate("window.__xss === undefined")

            heading = " ".join((await page.inner_text("#schedules h2")).split())
            assert heading == "Schedules (4 · 1 paused · 1 late)"
            assert (await cells(page, 'tr[data-schedule="stale"]'))[3].startswith("late 2h")
            assert (await cells(page, 'tr[data-schedule="quiet"]'))[3] == "paused"
            nightly = await cells(page, 'tr[data-schedule="nightly"]')
            assert nightly[2] == "0 3 * * * UTC overlap skip" and nightly[3] == "active"
            assert nightly[5].startswith(f"{last[:8]} success")

            await page.click(f'tr[data-schedule="nightly"] a:has-text("{last[:8]}")')
            await page.wait_for_url(f"**/runs/{last}")
            await page.wait_for_selector('[data-run-status="success"]')
        finally:
            GATE["slot"].set()
            worker.stop(0)


@pytest.mark.timeout(90)
async def test_retry_and_fork_a_failed_run(sf: Starflow) -> None:
    """A run failed in a step: fork it from a node chosen in the page (landing on the
    new run), then, the bug fixed, retry it: the failed step runs again, the step
    before it does not; the database agrees."""
    executable = chromium_path()

    FIXABLE.update(fixed=False, pack=0, label=0)
    failed = (await sf.run(fixable, "vase")).run_id
    app = create_app(sf, token=TOKEN, poll_interval=0.1)
    async with serve(app) as base, signed_in(executable, base) as page:
        await page.goto(f"{base}/runs/{failed}")
        await page.wait_for_selector('[data-run-status="error"]')
        assert await page.locator("#fork-form").is_visible()
        assert await page.input_value("#fork-form select[name=from_node]") == \
            "step:label#1"  # the failed node comes chosen
        # Still broken: a fork from the first step runs both steps again, and fails.
        await page.select_option("#fork-form select[name=from_node]", "step:pack#1")
        await page.click("#fork-form button[type=submit]")
        await page.wait_for_selector("#confirm")
        assert "from step:pack#1?" in await page.inner_text(".question")
        await page.click("#confirm")
        await page.wait_for_selector("text=Forked:")
        first_fork = page.url.split("/runs/")[1].split("?")[0]
        assert first_fork != failed
        await page.wait_for_selector('[data-run-status="error"]')
        assert (FIXABLE["pack"], FIXABLE["label"]) == (2, 2)

        FIXABLE["fixed"] = True
        await page.goto(f"{base}/runs/{failed}")
        await page.click("button:has-text('Retry run')")
        await page.wait_for_selector("#confirm")
        assert "step:label#1 and what follows it run again" in \
            await page.inner_text(".question")
        await page.click("#confirm")
        await page.wait_for_selector("text=Run retried.")
        await page.wait_for_selector('[data-run-status="success"]')
        assert await page.locator("text=labelled vase").count() >= 1
        assert await page.locator("#fork-form").is_visible()  # an ended run forks too

    assert (await sf.get_run(failed)).result_json == "packed vase, labelled vase"
    assert (await sf.get_run(first_fork)).status == "error"
    assert (FIXABLE["pack"], FIXABLE["label"]) == (2, 3)


@workflow(name="ui_browser_timed_approval")
async def timed_approval() -> object:
    return await wait_for("approve", timeout=timedelta(hours=1))


@pytest.mark.timeout(90)
async def test_overdue_timers_banner(tmp_path: Any) -> None:
    """With no maintenance running, a timer overdue past the slack shows a red
    banner on the operations page that says what to start; once a plain worker
    has fired it, the banner is gone."""
    from starflow_testing import FakeClock

    executable = chromium_path()

    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    async with Starflow.open(f"sqlite:///{tmp_path / 'timers.db'}", clock=clock,
                             maintenance=False) as sf:
        paused = await sf.run(timed_approval)
        assert paused.status == "paused"
        await clock.advance(timedelta(hours=1, seconds=40))  # 40 s past the timeout
        app = create_app(sf, token=TOKEN, poll_interval=0.1)
        async with serve(app) as base, signed_in(executable, base) as page:
            await page.goto(f"{base}/ops")
            banner = page.locator("#timers-overdue")
            assert await banner.is_visible()
            text = " ".join((await banner.inner_text()).split())
            assert text.startswith("1 timer overdue, no maintenance running")
            assert "starflow worker" in text and "starflow server" in text
            assert await banner.evaluate("e => getComputedStyle(e).color") == \
                "rgb(179, 38, 30)"

            worker = sf.worker()  # a plain worker fires timers
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                with anyio.fail_after(10):
                    while await status_of(sf, paused.run_id) == "paused":  # noqa: ASYNC110
                        await anyio.sleep(0.02)
                await worker.drain()
            assert await status_of(sf, paused.run_id) == "error"  # its WaitTimeout
            await page.reload()
            await page.wait_for_selector("#pools")
            assert await page.locator("#timers-overdue").count() == 0
