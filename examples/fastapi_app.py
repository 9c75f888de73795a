"""starflow inside a FastAPI application.

- The app opens starflow in its ``lifespan`` and keeps it on ``app.state``.
- ``POST /orders`` starts a run for workers (``sf.start``) and returns at once.
- ``POST /orders/{run_id}/approval`` signals the run's ``wait_for``.
- ``GET /orders/{run_id}`` reads its status; ``GET /orders/{run_id}/result``
  waits (bounded) for its value.
- A worker runs beside the app, in the same process and event loop, when
  ``STARFLOW_EMBEDDED_WORKER=1`` (the default here); in production you would
  usually run ``starflow worker --app examples.fastapi_app`` processes instead
  and keep the web processes as clients.

Needs ``pip install fastapi httpx`` (serve it with ``uvicorn
examples.fastapi_app:app``). Run as a script, it drives itself through
httpx's ASGI transport and prints what happens.

    python examples/fastapi_app.py
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

from starflow import (
    ResultTimeout,
    RunFinished,
    RunNotFound,
    Starflow,
    WorkflowFailed,
    step,
    wait_for,
    workflow,
)


@step
async def reserve_stock(order_id: str) -> str:
    return f"RES-{order_id}"


@step
async def ship(order_id: str) -> str:
    return f"TRACK-{order_id.upper()}"


@workflow(name="web-order", version=1)
async def order(order_id: str) -> dict[str, Any]:
    reservation = await reserve_stock(order_id)
    decision = await wait_for("approval", timeout=timedelta(days=3))
    if not decision.get("ok"):
        return {"order_id": order_id, "status": "rejected", "reservation": reservation}
    return {"order_id": order_id, "status": "shipped", "tracking": await ship(order_id)}


def database_url() -> str:
    return (os.environ.get("STARFLOW_URL") or os.environ.get("STARFLOW_DATABASE_URL")
            or f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'web.db')}")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # One Starflow per process: a client (it runs no sweep; see docs/guides/fastapi.md).
    async with Starflow.open(database_url()) as sf, anyio.create_task_group() as tg:
        app.state.sf = sf
        worker = None
        if os.environ.get("STARFLOW_EMBEDDED_WORKER", "1") == "1":
            # A worker beside the app, with the sweep and timers (one per deployment is
            # enough for those; every action is guarded in the database).
            worker = sf.worker(concurrency=8, maintenance=True, grace=5)
            tg.start_soon(worker.run)
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()  # drains active runs, then worker.run() returns


app = FastAPI(lifespan=lifespan)


def starflow_of(request: Request) -> Starflow:
    sf: Starflow = request.app.state.sf
    return sf


class NewOrder(BaseModel):
    order_id: str


class Approval(BaseModel):
    ok: bool
    by: str | None = None


@app.post("/orders", status_code=202)
async def create_order(body: NewOrder, request: Request) -> dict[str, str]:
    handle = await starflow_of(request).start(order, body.order_id)
    return {"run_id": handle.run_id, "status": handle.status}


@app.post("/orders/{run_id}/approval")
async def approve(run_id: str, body: Approval, request: Request) -> dict[str, str]:
    try:
        handle = await starflow_of(request).signal(run_id, "approval", body.model_dump())
    except RunNotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RunFinished as exc:
        raise HTTPException(409, str(exc)) from exc
    return {"run_id": run_id, "status": handle.status}


@app.get("/orders/{run_id}")
async def order_status(run_id: str, request: Request) -> dict[str, Any]:
    try:
        run = await starflow_of(request).get_run(run_id)
    except RunNotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    return {"run_id": run.id, "status": run.status}


@app.get("/orders/{run_id}/result")
async def order_result(run_id: str, request: Request, timeout: float = 10.0) -> Any:
    try:
        return await starflow_of(request).result(run_id, timeout=min(timeout, 30.0))
    except RunNotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except ResultTimeout as exc:
        raise HTTPException(408, str(exc)) from exc
    except WorkflowFailed as exc:
        raise HTTPException(500, f"{exc.error_type}: {exc.error_message}") from exc


async def main() -> None:
    import httpx

    # httpx calls the ASGI app in-process; the lifespan is entered as a server would.
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://shop") as client:
        created = (await client.post("/orders", json={"order_id": "o-7"})).json()
        print("created:", created["status"])
        run_id = created["run_id"]
        # A signal sent before the run reaches its wait is kept for it.
        approval = await client.post(f"/orders/{run_id}/approval", json={"ok": True, "by": "ops"})
        print("approval:", approval.status_code)
        print("result:", (await client.get(f"/orders/{run_id}/result")).json())
        print("status:", (await client.get(f"/orders/{run_id}")).json()["status"])
        again = await client.post(f"/orders/{run_id}/approval", json={"ok": True})
        print("approve again:", again.status_code)


if __name__ == "__main__":
    anyio.run(main)
