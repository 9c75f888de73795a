"""The runs table's bulk actions: cancel or retry every run its filters match (#30)."""

from __future__ import annotations

import re

from starflow import Starflow
from starflow.ui import create_app

from .conftest import FIXABLE, approval, client_for, fixable, quick
from .test_app import alert, csrf_of


def button(html: str, action: str) -> str:
    match = re.search(rf'id="bulk-{action}"[^>]*>(.*?)</button>', html, re.S)
    return match.group(1).strip() if match else ""


async def statuses(sf: Starflow) -> dict[str, str]:
    return {r.id: r.status for r in await sf.list_runs(limit=100)}


class TestBulkActions:
    """Offered only with filters, confirmed with the dry-run count, POST + CSRF."""

    async def test_offered_with_filters_only(self, sf: Starflow) -> None:
        for item in ("a", "b"):
            await sf.run(approval, item)
        await sf.run(approval, "c", fail=True)
        await sf.run(quick, 1)
        async with client_for(create_app(sf)) as client:
            unfiltered = (await client.get("/runs")).text
            assert not button(unfiltered, "cancel") and not button(unfiltered, "retry")
            page = (await client.get("/runs?workflow=ui_approval")).text
            assert button(page, "cancel") == "Cancel 2 matching…"
            assert button(page, "retry") == "Retry 1 matching…"
            page = (await client.get("/runs?status=success")).text
            assert not button(page, "cancel") and not button(page, "retry")
            page = (await client.get("/runs?workflow=ui_approval&id=0")).text
            assert not button(page, "cancel")

    async def test_cancel_confirms_with_the_count(self, sf: Starflow) -> None:
        paused = [(await sf.run(approval, item)).run_id for item in ("a", "b", "c")]
        done = (await sf.run(quick, 2)).run_id
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get("/runs?workflow=ui_approval")).text)
            confirm = await client.post("/bulk/cancel?workflow=ui_approval",
                                        data={"csrf": csrf})
            assert confirm.status_code == 200
            assert "Cancel the 3 runs these filters match?" in confirm.text
            assert 'action="/bulk/cancel?workflow=ui_approval"' in confirm.text
            assert set((await statuses(sf)).values()) == {"paused", "success"}
            acted = await client.post("/bulk/cancel?workflow=ui_approval",
                                      data={"csrf": csrf, "count": "3", "confirmed": "yes"})
            assert acted.status_code == 303
            page = await client.get(acted.headers["location"])
            assert "3 runs cancelled." in page.text
        now = await statuses(sf)
        assert {now[r] for r in paused} == {"cancelled"} and now[done] == "success"

    async def test_more_than_confirmed_is_refused(self, sf: Starflow) -> None:
        """A run that started matching after the confirmation: nothing is written."""
        await sf.run(approval, "a")
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get("/runs?workflow=ui_approval")).text)
            await sf.run(approval, "b")
            refused = await client.post("/bulk/cancel?workflow=ui_approval",
                                        data={"csrf": csrf, "count": "1", "confirmed": "yes"})
            assert refused.status_code == 409
            assert "more runs match now than the 1 you confirmed" in alert(refused.text)
        assert set((await statuses(sf)).values()) == {"paused"}

    async def test_refusals_write_nothing(self, sf: Starflow) -> None:
        await sf.run(approval, "a")
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get("/runs?workflow=ui_approval")).text)
            no_csrf = await client.post("/bulk/cancel?workflow=ui_approval",
                                        data={"confirmed": "yes", "count": "1"})
            assert no_csrf.status_code == 403
            no_filter = await client.post("/bulk/cancel", data={"csrf": csrf, "count": "1",
                                                                "confirmed": "yes"})
            assert no_filter.status_code == 400 and "no criterion" in alert(no_filter.text)
            by_id = await client.post("/bulk/cancel?id=0", data={"csrf": csrf})
            assert by_id.status_code == 400 and "run-id filter" in alert(by_id.text)
            none = await client.post("/bulk/retry?workflow=ui_approval", data={"csrf": csrf})
            assert none.status_code == 409 and "no runs match" in alert(none.text)
            bogus = await client.post("/bulk/fork?workflow=ui_approval", data={"csrf": csrf})
            assert bogus.status_code == 404
        assert set((await statuses(sf)).values()) == {"paused"}

    async def test_retry_matching(self, sf: Starflow) -> None:
        """Retry N matching re-runs the failed step of each run in error."""
        FIXABLE.update(fixed=False, pack=0, label=0)
        failed = [(await sf.run(fixable, item)).run_id for item in ("x", "y")]
        FIXABLE["fixed"] = True
        try:
            async with client_for(create_app(sf)) as client:
                page = (await client.get("/runs?status=error")).text
                assert button(page, "retry") == "Retry 2 matching…"
                acted = await client.post("/bulk/retry?status=error", data={
                    "csrf": csrf_of(page), "count": "2", "confirmed": "yes"})
                assert acted.status_code == 303
                assert "2 runs retried." in (await client.get(acted.headers["location"])).text
        finally:
            FIXABLE["fixed"] = False
        now = await statuses(sf)
        assert {now[r] for r in failed} == {"success"}
        assert FIXABLE["pack"] == 2  # recorded successes kept: pack ran once per run
