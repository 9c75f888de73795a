"""Take the screenshots of ``starflow ui`` shown in docs/guides/ui.md.

Seeds a throwaway SQLite database with runs in every status, serves the app
with uvicorn on a free 127.0.0.1 port, and photographs the runs page and a
run page with headless Chromium (Debian's ``chromium`` package, driven by
Playwright); then sets pool limits, starts a worker that fills one pool to
its limit, writes a few schedules, and photographs the operations page. Run
it again after changing the templates or styles::

    python docs/screenshots.py     # writes docs/images/ui-runs.png, ui-run.png, ui-ops.png

Set ``STARFLOW_TEST_CHROMIUM`` if the browser is not at /usr/bin/chromium.
"""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import uvicorn

import starflow
from starflow import RetryPolicy, Starflow, StarflowConfig, step, wait_for, workflow
from starflow.ui import create_app

IMAGES = Path(__file__).resolve().parent / "images"
CHROMIUM = os.environ.get("STARFLOW_TEST_CHROMIUM", "/usr/bin/chromium")


@step
async def reserve_stock(sku: str, quantity: int) -> dict[str, Any]:
    return {"sku": sku, "reserved": quantity, "warehouse": "fra-2"}


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(milliseconds=1)))
async def charge_card(order_id: str, cents: int) -> dict[str, Any]:
    if order_id.endswith("7"):
        raise RuntimeError("card declined: insufficient funds (issuer code 51)")
    return {"charge": f"ch_{order_id}", "cents": cents}


@step
async def ship(order_id: str) -> str:
    return f"trk-{order_id}-dhl"


@workflow(name="checkout", version=3)
async def checkout(order_id: str, sku: str, quantity: int, cents: int) -> dict[str, Any]:
    stock = await reserve_stock(sku, quantity)
    await starflow.session_set(f"cart-{order_id}", "stage", "charged")
    receipt = await charge_card(order_id, cents)
    starflow.context().phase = "awaiting-approval"
    decision = await wait_for("approval", timeout=timedelta(days=2))
    tracking = await ship(order_id)
    return {"stock": stock, "receipt": receipt, "approved_by": decision["by"],
            "tracking": tracking}


#: Released once the operations page is photographed: renders hold their pool's slots.
RENDERS_DONE: dict[str, anyio.Event] = {}


@step
async def render_frames(scene: str) -> int:
    await RENDERS_DONE["event"].wait()
    return 240


@workflow(name="render", version=2)
async def render(scene: str) -> int:
    return await render_frames(scene)


@workflow(name="nightly-report", version=1)
async def nightly_report(day: str) -> dict[str, int]:
    return {"rows": 18211, "day": int(day.replace("-", ""))}


async def seed(sf: Starflow) -> str:
    """Runs in every status; returns the id of the run to photograph."""
    shown = ""
    for i in range(1, 10):
        handle = await sf.run(checkout, f"o-10{i}", "LAMP-01" if i % 2 else "DESK-7",
                              i, 1999 * i)
        if i in (1, 2, 4, 5):
            await sf.signal(handle.run_id, "approval", {"by": "ana", "note": "ok"})
        elif i == 6:
            await sf.cancel(handle.run_id)
        elif i == 3:
            shown = handle.run_id  # stays paused, waiting for approval
    for day in ("2026-03-01", "2026-03-02"):
        await sf.run(nightly_report, day)
    for pool in ("gpu", "gpu", None):
        await sf.options(pool=pool).start(nightly_report, "2026-03-03")
    return shown


async def seed_operations(sf: Starflow) -> None:
    """Pool limits, a pool at its limit, and schedules (one paused, one with a run)."""
    await sf.set_pool_limits("gpu", concurrency=2, rate_limit=(30, timedelta(minutes=1)))
    await sf.set_pool_limits("payments", concurrency=5, key_concurrency=1)
    for scene in ("intro", "city-night", "credits"):
        await sf.options(pool="gpu").start(render, scene)
    await sf.schedule("nightly-report", nightly_report, "2026-03-04", cron="0 3 * * *",
                      timezone="Europe/Berlin", catchup=timedelta(hours=6))
    await sf.trigger_schedule("nightly-report")
    await sf.schedule("hourly-render", render, "teaser", cron="0 * * * *", pool="gpu",
                      overlap="buffer_one")
    await sf.pause_schedule("hourly-render")


async def main() -> None:
    from playwright.async_api import async_playwright

    if not await anyio.Path(CHROMIUM).exists():
        sys.exit(f"no Chromium at {CHROMIUM}: apt-get install chromium, or set "
                 "STARFLOW_TEST_CHROMIUM")
    IMAGES.mkdir(exist_ok=True)
    url = f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'shots.db')}"
    config = StarflowConfig(poll_interval=timedelta(milliseconds=100))
    async with Starflow.open(url, workspace_id="shop", env="prod", config=config,
                             maintenance=False) as sf:
        run_id = await seed(sf)
        server = uvicorn.Server(uvicorn.Config(create_app(sf, title="starflow"),
                                               host="127.0.0.1", port=0, lifespan="off",
                                               log_level="warning"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
                await anyio.sleep(0.01)
            base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                   args=["--no-sandbox", "--disable-gpu"])
                page = await browser.new_page(viewport={"width": 1280, "height": 760},
                                              device_scale_factor=1)
                await page.goto(f"{base}/runs")
                await page.wait_for_selector("#live-state:not([hidden])")
                await page.screenshot(path=str(IMAGES / "ui-runs.png"))
                await page.goto(f"{base}/runs/{run_id}")
                await page.wait_for_selector("#live-state:not([hidden])")
                await page.screenshot(path=str(IMAGES / "ui-run.png"), full_page=True)
                RENDERS_DONE["event"] = anyio.Event()
                worker = sf.worker(pool="gpu", concurrency=4)
                tg.start_soon(worker.run)
                await seed_operations(sf)
                with anyio.fail_after(30):  # until the worker fills gpu's two slots
                    while [u.active for u in await sf.pools() if u.pool == "gpu"] != [2]:  # noqa: ASYNC110 - a database poll
                        await anyio.sleep(0.05)
                await page.goto(f"{base}/ops")
                await page.screenshot(path=str(IMAGES / "ui-ops.png"), full_page=True)
                RENDERS_DONE["event"].set()
                worker.stop(0)
                await browser.close()
            server.should_exit = True
    for name in ("ui-runs.png", "ui-run.png", "ui-ops.png"):
        sys.stdout.write(f"wrote {IMAGES / name}\n")


if __name__ == "__main__":
    anyio.run(main)
