"""examples/fastapi_app.py: starflow in a FastAPI app's lifespan, driven over ASGI."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

PATH = Path(__file__).resolve().parent.parent / "examples" / "fastapi_app.py"


def _load() -> ModuleType:
    name = "starflow_example_fastapi_app"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    monkeypatch.setenv("STARFLOW_URL", f"sqlite:///{tmp_path / 'web.db'}")
    monkeypatch.delenv("STARFLOW_EMBEDDED_WORKER", raising=False)
    return _load()


@pytest.fixture
async def client(example: ModuleType) -> AsyncIterator[Any]:
    app = example.app
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://shop") as c:
        yield c


class TestRoutes:
    """Start from a route, signal from another, read the result; errors map to HTTP."""

    async def test_approved_order_ships(self, client: Any) -> None:
        """202 queued, approval accepted, the embedded worker finishes it."""
        created = await client.post("/orders", json={"order_id": "o-1"})
        assert created.status_code == 202 and created.json()["status"] == "queued"
        run_id = created.json()["run_id"]
        assert (await client.post(f"/orders/{run_id}/approval", json={"ok": True})
                ).status_code == 200
        result = await client.get(f"/orders/{run_id}/result")
        assert result.json() == {"order_id": "o-1", "status": "shipped", "tracking": "TRACK-O-1"}
        assert (await client.get(f"/orders/{run_id}")).json()["status"] == "success"

    async def test_rejected_order(self, client: Any) -> None:
        """A negative approval takes the other branch."""
        run_id = (await client.post("/orders", json={"order_id": "o-2"})).json()["run_id"]
        await client.post(f"/orders/{run_id}/approval", json={"ok": False})
        assert (await client.get(f"/orders/{run_id}/result")).json()["status"] == "rejected"

    async def test_errors(self, client: Any) -> None:
        """Unknown run: 404; approving a finished run: 409."""
        missing = "00000000-0000-0000-0000-000000000000"
        assert (await client.get(f"/orders/{missing}")).status_code == 404
        assert (await client.post(f"/orders/{missing}/approval", json={"ok": True})
                ).status_code == 404
        run_id = (await client.post("/orders", json={"order_id": "o-3"})).json()["run_id"]
        await client.post(f"/orders/{run_id}/approval", json={"ok": True})
        await client.get(f"/orders/{run_id}/result")
        again = await client.post(f"/orders/{run_id}/approval", json={"ok": True})
        assert again.status_code == 409


class TestWithoutAnEmbeddedWorker:
    """A web process that is only a client leaves queued runs to worker processes."""

    async def test_run_waits_for_a_worker(self, example: ModuleType,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        """The run stays queued; the bounded result route answers 408."""
        monkeypatch.setenv("STARFLOW_EMBEDDED_WORKER", "0")
        app = example.app
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://shop") as c:
            run_id = (await c.post("/orders", json={"order_id": "o-4"})).json()["run_id"]
            assert (await c.get(f"/orders/{run_id}/result", params={"timeout": 0.05})
                    ).status_code == 408
            assert (await c.get(f"/orders/{run_id}")).json()["status"] == "queued"
