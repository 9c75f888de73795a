"""The page answers input too big for starflow (JSON nested thousands deep, an age
past 100 years) with a 400 and the library's message, never a 500, and writes
nothing (issue #29)."""

from __future__ import annotations

from starflow import Starflow
from starflow.ui import create_app

from .conftest import approval, client_for
from .test_app import alert, csrf_of, events_of

#: Deeper than msgspec's decoder can recurse (it raised RecursionError: a 500).
DEEP = "[" * 10_000 + "]" * 10_000
SAYS = ("the payload is nested more than 250 levels deep (lists and objects), more than "
        "starflow stores: flatten it; nothing was written")


class TestDeepPayload:
    """The signal and wake forms refuse a payload nested past the limit before decoding it."""

    async def test_signal_form(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        before = await events_of(sf, run_id)
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{run_id}")).text)
            for confirmed in ("", "yes"):
                response = await client.post(f"/runs/{run_id}/signal", data={
                    "csrf": csrf, "event": "approve", "payload": DEEP,
                    "confirmed": confirmed})
                assert response.status_code == 400
                assert alert(response.text) == SAYS
        assert await events_of(sf, run_id) == before
        assert await sf.adapter.find_signal(run_id, "approve") is None
        assert (await sf.get_run(run_id)).status == "paused"

    async def test_wake_form(self, sf: Starflow) -> None:
        handle = await sf.run(approval, "lamp")
        assert handle.wake_token is not None
        before = await events_of(sf, handle.run_id)
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get("/ops")).text)
            response = await client.post("/wake", data={
                "csrf": csrf, "token": handle.wake_token, "payload": DEEP})
        assert response.status_code == 400
        assert alert(response.text) == SAYS
        assert 'name="pending"' not in response.text  # no confirmation was offered
        assert await events_of(sf, handle.run_id) == before
        assert (await sf.get_run(handle.run_id)).status == "paused"


class TestFilters:
    """The runs table's from/to filters refuse an age past 100 years."""

    async def test_huge_age(self, sf: Starflow) -> None:
        await sf.run(approval, "lamp")
        async with client_for(create_app(sf)) as client:
            for key in ("from", "to"):
                response = await client.get("/runs", params={key: "99999999d"})
                assert response.status_code == 400
                assert alert(response.text) == (
                    f"{key}: the age &#39;99999999d&#39; is longer than 36500d (100 years), "
                    "the longest starflow takes: give a shorter one")
            response = await client.get("/runs", params={"from": "9999-12-31T23:00-05:00"})
            assert response.status_code == 400
            assert "outside the years 1 to 9999" in alert(response.text)
