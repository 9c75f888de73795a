"""Fixtures of the web UI tests: an open app with a few runs, and an HTTP client.

The client is httpx's ASGI transport (what Starlette's TestClient wraps) on the
test's own event loop, so the app and the Starflow it reads share one loop.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import starflow
from starflow import Starflow, StarflowConfig, step, wait_for, workflow

FAST = StarflowConfig(poll_interval=timedelta(milliseconds=50))


@step
async def reserve(item: str) -> dict[str, Any]:
    return {"item": item, "hold": f"h-{item}"}


@step
async def hand_out_token() -> dict[str, str]:
    """A step that returns a wake token under a key the runtime does not redact."""
    return {"callback": starflow.wake_token("approve", timeout=timedelta(days=1))}


@step
async def explode(why: str) -> None:
    raise RuntimeError(why)


@workflow(name="ui_approval", signals=("approve",))
async def approval(item: str, fail: bool = False) -> dict[str, Any]:
    held = await reserve(item)
    await starflow.session_set("cart-1", "item", item)
    if fail:
        await explode("warehouse on fire")
    decision = await wait_for("approve", timeout=timedelta(hours=2))
    return {"held": held, "decision": decision, "rows": list(range(200))}


#: ``fixable``'s bug (flip ``fixed`` to deploy the fix) and its steps' calls.
FIXABLE: dict[str, Any] = {"fixed": False, "pack": 0, "label": 0}


@step
async def pack(item: str) -> str:
    FIXABLE["pack"] += 1
    return f"packed {item}"


@step
async def label(item: str) -> str:
    FIXABLE["label"] += 1
    if not FIXABLE["fixed"]:
        raise ValueError(f"no label printer for {item}")
    return f"labelled {item}"


@workflow(name="ui_fixable")
async def fixable(item: str) -> str:
    return f"{await pack(item)}, {await label(item)}"


@workflow(name="ui_token")
async def with_token() -> Any:
    await hand_out_token()
    return await wait_for("approve", timeout=timedelta(hours=1))


@workflow(name="ui_quick")
async def quick(n: int) -> int:
    return n * 2


@pytest.fixture
async def sf(tmp_path: Path) -> AsyncIterator[Starflow]:
    async with Starflow.open(f"sqlite:///{tmp_path / 'ui.db'}",
                             workspace_id=f"ws-{uuid.uuid4().hex[:8]}", config=FAST,
                             maintenance=False) as app:
        yield app


def client_for(app: Any, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                             base_url="http://127.0.0.1", headers=headers)
