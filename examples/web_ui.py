"""The web page of ``starflow ui``, built in your own program.

``create_app(sf, token=...)`` is a Starlette app over an open ``Starflow``:
serve it with uvicorn (as here) or mount it in your FastAPI/Starlette app.
This example starts a run that waits for approval, serves the page on a free
127.0.0.1 port, reads the runs table over HTTP with the access token,
approves the run through the page's own form (CSRF token, confirmation),
reads the operations page (a pool limit and a schedule are on it) and stops.
``--serve`` keeps serving until Ctrl+C, to look at it in a browser.

    pip install 'starflow-durable[ui]'
    python examples/web_ui.py            # a bounded tour, then exit
    python examples/web_ui.py --serve    # open the printed address

The command line does the same for any database: ``starflow ui --db URL``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
import tempfile
from datetime import timedelta

import anyio
import httpx
import uvicorn

from starflow import Starflow, step, wait_for, workflow
from starflow.ui import create_app


@step
async def quote(item: str) -> int:
    return 1999 if item == "lamp" else 4999


@workflow(name="purchase")
async def purchase(item: str) -> dict[str, object]:
    cents = await quote(item)
    decision = await wait_for("approve", timeout=timedelta(days=1))
    return {"item": item, "cents": cents, "approved_by": decision["by"]}


async def main(serve_forever: bool) -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'ui.db')}"
    token = secrets.token_urlsafe(24)
    async with Starflow.open(url) as sf:
        run = await sf.run(purchase, "lamp")
        print("run", run.run_id[:8], "is", run.status)
        await sf.set_pool_limits("purchases", concurrency=5)
        await sf.schedule("daily-restock", purchase, "desk", cron="0 6 * * *",
                          pool="purchases")

        app = create_app(sf, token=token)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                               lifespan="off", log_level="warning"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
                await anyio.sleep(0.01)
            base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
            if serve_forever:
                print(f"open {base}/?token={token}  (Ctrl+C to stop)")
                return  # uvicorn serves until Ctrl+C

            async with httpx.AsyncClient(base_url=base, trust_env=False) as client:
                print("without the token:", (await client.get("/runs")).status_code)
                client.headers["Authorization"] = f"Bearer {token}"
                page = await client.get("/runs", params={"status": "paused"})
                print("runs page:", page.status_code,
                      "lists the run" if run.run_id[:8] in page.text else "misses the run")

                run_page = (await client.get(f"/runs/{run.run_id}")).text
                csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', run_page)
                assert csrf is not None
                form = {"csrf": csrf.group(1), "event": "approve",
                        "payload": '{"by": "ana"}'}
                confirm = await client.post(f"/runs/{run.run_id}/signal", data=form)
                print("confirmation page:", "Confirm" in confirm.text)
                sent = await client.post(f"/runs/{run.run_id}/signal",
                                         data={**form, "confirmed": "yes"})
                print("signal sent:", sent.status_code, sent.headers["location"].split("?")[1])

                ops = (await client.get("/ops")).text
                pool = re.search(r'<tr data-pool="purchases">.*?</tr>', ops, re.S)
                print("operations page: pool purchases at",
                      re.findall(r"\d+ / \d+", pool.group(0)) if pool else "missing",
                      "| schedule daily-restock",
                      "listed" if 'data-schedule="daily-restock"' in ops else "missing")
            server.should_exit = True

        print("result:", await sf.result(run.run_id))
        await sf.delete_schedule("daily-restock")  # leave no schedule firing behind
        await sf.set_pool_limits("purchases")  # every limit None: removed


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn hands Ctrl+C back once stopped
        anyio.run(main, "--serve" in sys.argv[1:])
