"""``RunInfo.phase``: the run's current phase, on the run row, written with its phase event."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import starflow
from starflow import Starflow, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import InsertEvent, Unit, UpdateRun

pytestmark = pytest.mark.anyio


@workflow(name="phase_order")
async def phase_order(order: str) -> str:
    starflow.context().phase = "packing"
    await wait_for("packed")
    starflow.context().phase = {"stage": "shipping", "carrier": "ups"}
    return order


@workflow(name="phase_none")
async def phase_none() -> int:
    return 1


def _last_phase_event(events: list[Any]) -> Any:
    return [e.payload_json["phase"] for e in events if e.event_type == "phase"][-1]


class TestRunInfoPhase:
    """get_run and list_runs carry the phase the workflow set last, on every adapter."""

    async def test_phase_follows_the_run(self, db_url: str, workspace_id: str) -> None:
        """Paused: the phase set before the wait; ended: the last one (any storable value)."""
        async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False) as sf:
            handle = await sf.run(phase_order, "o-1")
            assert handle.status == "paused"
            assert (await sf.get_run(handle.run_id)).phase == "packing"
            await sf.signal(handle.run_id, "packed")
            run = await sf.get_run(handle.run_id)
            assert run.status == "success"
            assert run.phase == {"stage": "shipping", "carrier": "ups"}
            assert run.phase == _last_phase_event(await sf.events(handle.run_id))
            listed = await sf.list_runs(template_id="phase_order")
            assert [r.phase for r in listed] == [{"stage": "shipping", "carrier": "ups"}]
            quiet = await sf.run(phase_none)
            assert (await sf.get_run(quiet.run_id)).phase is None

    async def test_the_column_is_written_in_the_phase_event_s_unit(
            self, db_url: str, workspace_id: str) -> None:
        """Every unit with a phase event sets the column to that phase, and no other does."""
        units: list[Unit] = []

        class Units(DelegatingAdapter):
            async def execute(self, unit: Unit) -> bool:
                units.append(unit)
                return await self.inner.execute(unit)

        adapter = Units(adapter_from_url(db_url, workspace_id=workspace_id))
        async with Starflow(adapter, maintenance=False) as sf:
            handle = await sf.run(phase_order, "o-2")
            await sf.signal(handle.run_id, "packed")
        seen = []
        for unit in units:
            events = [op.payload["phase"] for op in unit.ops
                      if isinstance(op, InsertEvent) and op.event_type == "phase"]
            columns = [op.values["phase"] for op in unit.ops
                       if isinstance(op, UpdateRun) and "phase" in op.values]
            assert events == columns, unit.methods
            seen += events
        assert seen == ["packing", {"stage": "shipping", "carrier": "ups"}]


class TestShown:
    """`starflow runs show` prints the row's phase and puts it in --json."""

    async def test_runs_show(self, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
        """The text and the JSON detail carry the current phase."""
        import anyio

        from starflow.cli import main

        url = f"sqlite:///{tmp_path / 'show.db'}"
        async with Starflow.open(url, maintenance=False) as sf:
            handle = await sf.run(phase_order, "o-3")
        code = await anyio.to_thread.run_sync(main, ["runs", "show", handle.run_id,
                                                     "--db", url])
        out = capsys.readouterr().out
        assert code == 0 and any(line.split() == ["phase", "packing"]
                                 for line in out.splitlines()), out
        code = await anyio.to_thread.run_sync(main, ["runs", "show", handle.run_id,
                                                     "--db", url, "--json"])
        assert code == 0
        assert json.loads(capsys.readouterr().out)["run"]["phase"] == "packing"


async def test_the_run_page_shows_the_phase(tmp_path: Any) -> None:
    """The web page of a run names its current phase, and a run without one shows none."""
    import httpx

    from starflow.ui import create_app

    async with Starflow.open(f"sqlite:///{tmp_path / 'ui.db'}", maintenance=False) as sf:
        handle = await sf.run(phase_order, "o-4")
        await sf.signal(handle.run_id, "packed")
        quiet = await sf.run(phase_none)
        transport = httpx.ASGITransport(app=create_app(sf))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
            plain = (await client.get(f"/runs/{quiet.run_id}")).text
    shown = re.search(r"data-run-phase>([^<]*)<", html)
    assert shown is not None and json.loads(shown.group(1)) == {"stage": "shipping",
                                                                "carrier": "ups"}
    assert "<dt>Phase</dt>" not in plain
