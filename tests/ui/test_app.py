"""The web UI over HTTP (no browser): pages, filters, actions, refusals."""

from __future__ import annotations

import re
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from starflow import AesGcmCodec, Starflow, StarflowError, step, workflow
from starflow.ui import create_app
from starflow.ui.app import UI

from .conftest import FAST, FIXABLE, approval, client_for, fixable, quick, with_token

TOKEN = "a-test-token-of-some-length"
#: Released by a test: the step of ``gated`` waits for it, so its run stays executing.
GATED: dict[str, anyio.Event] = {}


@step
async def hold(n: int) -> int:
    await GATED["gate"].wait()
    return n


@workflow(name="ui_gated")
async def gated(n: int) -> int:
    return await hold(n)


async def events_of(sf: Starflow, run_id: str) -> list[str]:
    return [e.event_type for e in await sf.events(run_id)]


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, "no CSRF field in the page"
    return match.group(1)


def cells(html: str, row: str) -> list[str]:
    """The text of each cell of the table row whose tag carries ``row``."""
    match = re.search(rf"<tr {re.escape(row)}>(.*?)</tr>", html, re.S)
    assert match, f"no row {row} in the page"
    return [" ".join(re.sub(r"<[^>]+>", " ", cell).split())
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", match.group(1), re.S)]


def alert(html: str) -> str:
    match = re.search(r'role="alert">(.*?)</p>', html, re.S)
    return match.group(1) if match else ""


class TestRunsPage:
    """The runs table: newest first, filtered, counted, paged by keyset."""

    async def test_lists_filters_and_counts(self, sf: Starflow) -> None:
        paused = (await sf.run(approval, "lamp")).run_id
        done = (await sf.run(quick, 2)).run_id
        async with client_for(create_app(sf)) as client:
            page = (await client.get("/runs")).text
            assert page.index(done[:8]) < page.index(paused[:8])  # newest first
            assert 'data-count="paused"' in page and "paused <b>1</b>" in page
            assert "success <b>1</b>" in page
            only = (await client.get("/runs", params={"status": "paused"})).text
            assert paused[:8] in only and done[:8] not in only
            by_name = (await client.get("/runs", params={"workflow": "ui_quick"})).text
            assert done[:8] in by_name and paused[:8] not in by_name
            by_id = (await client.get("/runs", params={"id": paused[:5]})).text
            assert paused[:8] in by_id and done[:8] not in by_id
            since = (await client.get("/runs", params={"from": "1h"})).text
            assert paused[:8] in since and done[:8] in since
            none = (await client.get("/runs", params={"to": "2000-01-01"})).text
            assert "no runs match" in none

    async def test_next_page_by_keyset(self, sf: Starflow) -> None:
        ids = [(await sf.run(quick, i)).run_id for i in range(5)]
        async with client_for(create_app(sf, page_size=2)) as client:
            seen: list[str] = []
            url: str | None = "/runs"
            while url is not None:
                html = (await client.get(url)).text
                seen += re.findall(r'<tr data-run="([0-9a-f-]+)"', html)
                found = re.search(r'rel="next" href="([^"]+)"', html)
                url = found.group(1).replace("&amp;", "&") if found else None
            assert seen == list(reversed(ids))

    async def test_a_start_for_later_says_when(self, sf: Starflow) -> None:
        """A run started for later shows "starts at" in the table and on its page (#30)."""
        at = datetime(2099, 3, 4, 5, 6, 7, tzinfo=UTC)
        later = (await sf.start(quick, 1, start_at=at)).run_id
        now = (await sf.start(quick, 2)).run_id
        async with client_for(create_app(sf)) as client:
            page = (await client.get("/runs")).text
            run_page = (await client.get(f"/runs/{later}")).text
        assert cells(page, f'data-run="{later}" data-status="queued"')[2] == (
            "queued starts at 2099-03-04T05:06:07.000Z")
        assert cells(page, f'data-run="{now}" data-status="queued"')[2] == "queued"
        assert re.search(r"<dt>Starts at</dt><dd[^>]*>2099-03-04T05:06:07.000Z</dd>", run_page)

    async def test_bad_filters_are_explained(self, sf: Starflow) -> None:
        async with client_for(create_app(sf)) as client:
            response = await client.get("/runs", params={"status": "stuck", "from": "soon",
                                                         "after": "junk"})
        assert response.status_code == 400
        message = alert(response.text)
        assert "status must be one of" in message and "&#39;stuck&#39;" in message
        assert "from: not an ISO date/time" in message and "not a page cursor" in message


class TestRunPage:
    """A run's page: row, waits, timeline, values, session vars; never a wake token."""

    async def test_paused_run(self, sf: Starflow) -> None:
        handle = await sf.run(approval, "lamp")
        assert handle.wake_token  # the run_paused event and checkpoint carry one
        async with client_for(create_app(sf)) as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
        assert "sfw1." not in html and handle.wake_token not in html
        assert "wait:approve#1" in html and "signal <b>approve</b>" in html
        assert "step:reserve#1" in html and "run_paused" in html
        assert "cart-1" in html and "&#34;lamp&#34;" in html  # the session var's value
        assert 'data-run-status="paused"' in html
        assert 'data-when="queued running paused"' in html  # signal and cancel offered

    async def test_encrypted_values_show_as_encrypted(self, tmp_path: Path) -> None:
        """A page opened without the runs' codec shows 'encrypted (aesgcm, key k1)'
        where the arguments, step outputs and session value are; with it, the values."""
        url = f"sqlite:///{tmp_path / 'enc.db'}"
        codec = AesGcmCodec(keys={"k1": bytes(range(32))}, active="k1")
        async with Starflow.open(url, codec=codec, config=FAST, maintenance=False) as enc:
            handle = await enc.run(approval, "lamp-S3CRET")
        async with Starflow.open(url, config=FAST, maintenance=False) as plain, \
                client_for(create_app(plain)) as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
        assert "S3CRET" not in html and "AQJrM" not in html  # no value, no ciphertext
        assert html.count("encrypted (aesgcm, key k1)") >= 3  # input, step io, session var
        async with Starflow.open(url, codec=codec, config=FAST, maintenance=False) as keyed, \
                client_for(create_app(keyed)) as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
        assert "lamp-S3CRET" in html and "encrypted (" not in html

    async def test_children_and_parent_are_linked(self, sf: Starflow) -> None:
        """A parent's page lists its child runs; a child's page links its parent."""
        import starflow
        from starflow import workflow

        @workflow(name="ui_parent")
        async def ui_parent() -> int:
            detached = await starflow.start_child(quick, 5, detached=True)
            return await quick(4) + len(detached.run_id)

        handle = await sf.run(ui_parent)
        assert handle.status == "paused"  # no worker here: the children stay queued
        kids = await sf.list_runs(parent_run_id=handle.run_id)
        assert len(kids) == 2
        async with client_for(create_app(sf)) as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
            child = (await client.get(f"/runs/{kids[0].id}")).text
        assert "Children <span class=\"muted\">(2)</span>" in html
        assert all(f'/runs/{k.id}">{k.id}</a>' in html for k in kids)
        assert "detached" in html
        assert f'/runs/{handle.run_id}">{handle.run_id}</a>' in child

    async def test_token_in_a_step_output_is_redacted(self, sf: Starflow) -> None:
        handle = await sf.run(with_token)
        events = await sf.events(handle.run_id)
        assert any("sfw1." in str(e.payload_json) for e in events)  # it is stored...
        async with client_for(create_app(sf)) as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
            partial = (await client.get(f"/runs/{handle.run_id}?partial=1")).text
        assert "sfw1." not in html and "sfw1." not in partial  # ...but never shown
        assert "[redacted]" in html

    async def test_finished_run_folds_large_values(self, sf: Starflow) -> None:
        handle = await sf.run(approval, "desk")
        await sf.signal(handle.run_id, "approve", {"ok": True, "by": "ann"})
        async with client_for(create_app(sf)) as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
        assert "Result" in html and "<details class=\"json\">" in html
        assert 'data-run-status="success"' in html and "data-stream" not in html

    async def test_failed_run_shows_cause(self, sf: Starflow) -> None:
        handle = await sf.run(approval, "chair", fail=True)
        async with client_for(create_app(sf)) as client:
            html = (await client.get(f"/runs/{handle.run_id}")).text
        assert "warehouse on fire" in html and "step:explode#1" in html
        assert "builtins.RuntimeError" in html
        # the run's recorded failure (RunInfo.failure) brings its traceback
        failure = (await sf.get_run(handle.run_id)).failure
        assert failure is not None and failure.traceback
        assert "<summary>Traceback</summary>" in html
        assert "raise RuntimeError(why)" in html and "after 1 attempt(s)" in html

    async def test_unknown_run(self, sf: Starflow) -> None:
        async with client_for(create_app(sf)) as client:
            response = await client.get("/runs/00000000-0000-0000-0000-000000000000")
        assert response.status_code == 404 and "no run" in alert(response.text)


class TestActions:
    """Signal, cancel, retry: validated, confirmed, then written through the API."""

    async def test_signal_confirm_then_send(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{run_id}")).text)
            form = {"csrf": csrf, "event": "approve", "payload": '{"ok": true}'}
            confirm = await client.post(f"/runs/{run_id}/signal", data=form)
            assert confirm.status_code == 200 and 'id="confirm"' in confirm.text
            assert (await sf.get_run(run_id)).status == "paused"  # nothing yet
            sent = await client.post(f"/runs/{run_id}/signal", data={**form, "confirmed": "yes"})
            assert sent.status_code == 303 and sent.headers["location"].endswith("done=signal")
        run = await sf.get_run(run_id)
        assert run.status == "success" and run.result_json["decision"] == {"ok": True}

    @pytest.mark.parametrize(("event", "payload", "status", "says"), [
        ("approve", "{ok: true}", 400, "not valid JSON"),
        ("", "null", 400, "non-empty string"),
        ("approve#2", "null", 400, "without &#39;#&#39;"),
        ("reject", "null", 409, "no wait of it can take this signal"),
    ])
    async def test_bad_signal_writes_nothing(self, sf: Starflow, event: str, payload: str,
                                             status: int, says: str) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        before = await events_of(sf, run_id)
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{run_id}")).text)
            response = await client.post(f"/runs/{run_id}/signal", data={
                "csrf": csrf, "event": event, "payload": payload, "confirmed": "yes"})
        assert response.status_code == status
        assert says in alert(response.text) and "nothing was written" in alert(response.text)
        assert await events_of(sf, run_id) == before
        assert await sf.adapter.find_signal(run_id, event or "approve") is None

    async def test_signal_to_an_ended_run(self, sf: Starflow) -> None:
        run_id = (await sf.run(quick, 1)).run_id
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{run_id}")).text)
            response = await client.post(f"/runs/{run_id}/signal", data={
                "csrf": csrf, "event": "approve", "confirmed": "yes"})
        assert response.status_code == 409 and "has ended (success)" in alert(response.text)

    async def test_cancel(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{run_id}")).text)
            confirm = await client.post(f"/runs/{run_id}/cancel", data={"csrf": csrf})
            assert "Cancel run" in confirm.text and (await sf.get_run(run_id)).status == "paused"
            done = await client.post(f"/runs/{run_id}/cancel",
                                     data={"csrf": csrf, "confirmed": "yes"})
            assert done.status_code == 303
            again = await client.post(f"/runs/{run_id}/cancel",
                                      data={"csrf": csrf, "confirmed": "yes"})
            assert again.status_code == 409 and "already ended" in alert(again.text)
        assert (await sf.get_run(run_id)).status == "cancelled"

    async def test_pause_and_resume(self, sf: Starflow) -> None:
        """Pause (#30): confirmed, then held; a signal is kept; Resume delivers it."""
        run_id = (await sf.run(approval, "lamp")).run_id
        async with client_for(create_app(sf)) as client:
            page = (await client.get(f"/runs/{run_id}")).text
            assert 'id="pause-form"' in page and 'id="resume-form"' not in page
            csrf = csrf_of(page)
            confirm = await client.post(f"/runs/{run_id}/pause", data={"csrf": csrf})
            assert "Pause run" in confirm.text
            assert (await sf.get_run(run_id)).claim_state != "held"  # nothing yet
            done = await client.post(f"/runs/{run_id}/pause",
                                     data={"csrf": csrf, "confirmed": "yes"})
            assert done.status_code == 303 and done.headers["location"].endswith("done=pause")
            assert (await sf.get_run(run_id)).claim_state == "held"
            page = (await client.get(f"/runs/{run_id}")).text
            assert 'id="resume-form"' in page and "paused by an operator at its wait" in page
            twice = await client.post(f"/runs/{run_id}/pause",
                                      data={"csrf": csrf, "confirmed": "yes"})
            assert twice.status_code == 409 and "already" in alert(twice.text)
            await sf.signal(run_id, "approve", {"ok": True})
            assert (await sf.get_run(run_id)).status == "paused"
            resumed = await client.post(f"/runs/{run_id}/resume",
                                        data={"csrf": csrf, "confirmed": "yes"})
            assert resumed.status_code == 303
        assert (await sf.get_run(run_id)).status == "success"

    async def test_resume_a_run_not_paused_writes_nothing(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        before = await events_of(sf, run_id)
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{run_id}")).text)
            response = await client.post(f"/runs/{run_id}/resume",
                                         data={"csrf": csrf, "confirmed": "yes"})
        assert response.status_code == 409 and "not paused by an operator" in alert(
            response.text)
        assert await events_of(sf, run_id) == before

    async def test_pause_and_resume_a_pool(self, sf: Starflow) -> None:
        await sf.set_pool_limits("gpu", concurrency=3)
        async with client_for(create_app(sf)) as client:
            page = (await client.get("/ops")).text
            csrf = csrf_of(page)
            assert '/pools/gpu/pause"' in page
            confirm = await client.post("/pools/gpu/pause", data={"csrf": csrf})
            assert "Pause pool" in confirm.text
            assert not (await sf.adapter.get_pool_limits("gpu")).paused  # type: ignore[union-attr]
            done = await client.post("/pools/gpu/pause", data={"csrf": csrf, "confirmed": "yes"})
            assert done.status_code == 303
            assert (await sf.adapter.get_pool_limits("gpu")).paused  # type: ignore[union-attr]
            page = (await client.get("/ops")).text
            assert '/pools/gpu/resume"' in page
            forged = await client.post("/pools/gpu/resume",
                                       data={"csrf": "0" * len(csrf), "confirmed": "yes"})
            assert forged.status_code == 403
            assert (await sf.adapter.get_pool_limits("gpu")).paused  # type: ignore[union-attr]
            await client.post("/pools/gpu/resume", data={"csrf": csrf, "confirmed": "yes"})
        limits = await sf.adapter.get_pool_limits("gpu")
        assert limits is not None and not limits.paused and limits.concurrency == 3

    async def test_retry(self, sf: Starflow) -> None:
        failed = (await sf.run(approval, "chair", fail=True)).run_id
        fine = (await sf.run(quick, 1)).run_id
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{failed}")).text)
            refused = await client.post(f"/runs/{fine}/retry",
                                        data={"csrf": csrf, "confirmed": "yes"})
            assert refused.status_code == 409 and "only a run that ended in error" in \
                alert(refused.text)
            done = await client.post(f"/runs/{failed}/retry",
                                     data={"csrf": csrf, "confirmed": "yes"})
            assert done.status_code == 303
        assert "run_retried" in await events_of(sf, failed)
        assert (await sf.get_run(fine)).status == "success"

    async def test_retry_reruns_the_failed_step(self, sf: Starflow) -> None:
        """The confirmation names the step to run again; after the fix, the run ends in
        success with the step run again and the one before it not."""
        FIXABLE.update(fixed=False, pack=0, label=0)
        failed = (await sf.run(fixable, "box")).run_id
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{failed}")).text)
            confirm = await client.post(f"/runs/{failed}/retry", data={"csrf": csrf})
            assert "step:label#1 and what follows it run again" in confirm.text
            FIXABLE["fixed"] = True
            done = await client.post(f"/runs/{failed}/retry",
                                     data={"csrf": csrf, "confirmed": "yes"})
            assert done.status_code == 303
            page = (await client.get(done.headers["location"])).text
            assert "Run retried." in page and "from step:label#1" in page
        run = await sf.get_run(failed)
        assert (run.status, run.result_json) == ("success", "packed box, labelled box")
        assert (FIXABLE["pack"], FIXABLE["label"]) == (1, 2)

    async def test_fork(self, sf: Starflow) -> None:
        """Fork from a chosen node: confirmed, then a new run; the page lands on it."""
        FIXABLE.update(fixed=False, pack=0, label=0)
        failed = (await sf.run(fixable, "crate")).run_id
        paused = (await sf.run(approval, "lamp")).run_id
        async with client_for(create_app(sf)) as client:
            page = (await client.get(f"/runs/{failed}")).text
            assert 'id="fork-form"' in page
            assert '<option value="step:label#1" selected>' in page  # the failed node
            assert '<option value="step:pack#1">' in page
            csrf = csrf_of(page)
            assert 'id="fork-form"' not in (await client.get(f"/runs/{paused}")).text
            before = len(await sf.list_runs(limit=100))
            for node, status, says in [("step:nope#1", 400, "has no node"),
                                       ("", 400, "has no node")]:
                refused = await client.post(f"/runs/{failed}/fork", data={
                    "csrf": csrf, "from_node": node, "confirmed": "yes"})
                assert refused.status_code == status and says in alert(refused.text)
                assert "nothing was written" in alert(refused.text)
            refused = await client.post(f"/runs/{paused}/fork", data={
                "csrf": csrf, "from_node": "wait:approve#1", "confirmed": "yes"})
            assert refused.status_code == 409 and "still paused" in alert(refused.text)
            forged = await client.post(f"/runs/{failed}/fork", data={
                "csrf": "0" * len(csrf), "from_node": "step:label#1", "confirmed": "yes"})
            assert forged.status_code in (400, 403)
            assert len(await sf.list_runs(limit=100)) == before
            confirm = await client.post(f"/runs/{failed}/fork", data={
                "csrf": csrf, "from_node": "step:label#1"})
            assert 'id="confirm"' in confirm.text and "from step:label#1?" in confirm.text
            assert len(await sf.list_runs(limit=100)) == before  # nothing yet
            FIXABLE["fixed"] = True
            done = await client.post(f"/runs/{failed}/fork", data={
                "csrf": csrf, "from_node": "step:label#1", "confirmed": "yes"})
            assert done.status_code == 303
            new_id = done.headers["location"].split("/runs/")[1].split("?")[0]
            assert new_id != failed and done.headers["location"].endswith("done=fork")
            landed = (await client.get(done.headers["location"])).text
            assert "Forked:" in landed and f"from run {failed} at step:label#1" in landed
        fork = await sf.get_run(new_id)
        assert (fork.status, fork.result_json) == ("success", "packed crate, labelled crate")
        assert (FIXABLE["pack"], FIXABLE["label"]) == (1, 2)
        assert (await sf.get_run(failed)).status == "error"  # the source is unchanged

    async def test_unknown_action(self, sf: Starflow) -> None:
        run_id = (await sf.run(quick, 1)).run_id
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get(f"/runs/{run_id}")).text)
            response = await client.post(f"/runs/{run_id}/delete", data={"csrf": csrf})
        assert response.status_code == 404 and "no action" in alert(response.text)

    async def test_get_never_acts(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        async with client_for(create_app(sf)) as client:
            response = await client.get(f"/runs/{run_id}/cancel")
        assert response.status_code == 405
        assert (await sf.get_run(run_id)).status == "paused"


class TestWakeByToken:
    """The token is checked before the confirmation and never put back in a page."""

    async def test_wake(self, sf: Starflow) -> None:
        handle = await sf.run(approval, "lamp")
        assert handle.wake_token is not None
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get("/ops")).text)
            confirm = await client.post("/wake", data={
                "csrf": csrf, "token": handle.wake_token, "payload": '{"ok": 1}'})
            assert confirm.status_code == 200 and handle.wake_token not in confirm.text
            assert "sfw1." not in confirm.text and handle.run_id in confirm.text
            assert (await sf.get_run(handle.run_id)).status == "paused"
            pending = re.search(r'name="pending" value="([^"]+)"', confirm.text)
            assert pending
            done = await client.post("/wake", data={"csrf": csrf, "pending": pending.group(1)})
            assert done.status_code == 303
            reused = await client.post("/wake", data={"csrf": csrf, "pending": pending.group(1)})
            assert "expired" in alert(reused.text)
        assert (await sf.get_run(handle.run_id)).status == "success"

    async def test_forged_token_writes_nothing(self, sf: Starflow) -> None:
        handle = await sf.run(approval, "lamp")
        assert handle.wake_token is not None
        before = await events_of(sf, handle.run_id)
        forged = handle.wake_token[:-4] + "AAAA"
        async with client_for(create_app(sf)) as client:
            csrf = csrf_of((await client.get("/ops")).text)
            response = await client.post("/wake", data={"csrf": csrf, "token": forged})
        assert response.status_code == 400
        assert "bad_signature" in alert(response.text) and forged not in response.text
        assert await events_of(sf, handle.run_id) == before


class TestWhoMay:
    """The access token, CSRF, same-origin and host checks."""

    async def test_no_token_is_401_everywhere(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        app = create_app(sf, token=TOKEN)
        async with client_for(app) as client:
            for path in ("/", "/runs", f"/runs/{run_id}", "/runs/stream", "/ops",
                         "/static/ui.css", f"/runs/{run_id}/stream"):
                response = await client.get(path)
                assert response.status_code == 401, path
                assert "access token" in response.text
            wrong = await client.get("/runs", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            posted = await client.post(f"/runs/{run_id}/cancel",
                                       data={"csrf": app.state.ui.site.csrf, "confirmed": "yes"})
            assert posted.status_code == 401
        assert (await sf.get_run(run_id)).status == "paused"

    async def test_token_by_header_link_and_cookie(self, sf: Starflow) -> None:
        async with client_for(create_app(sf, token=TOKEN)) as client:
            bearer = await client.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"})
            assert bearer.status_code == 200
            link = await client.get(f"/runs?status=paused&token={TOKEN}")
            assert link.status_code == 303 and link.headers["location"] == "/runs?status=paused"
            cookie = link.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie
            assert (await client.get("/runs")).status_code == 200  # the cookie now

    async def test_post_without_csrf_writes_nothing(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        before = await events_of(sf, run_id)
        async with client_for(create_app(sf)) as client:
            for data in ({"confirmed": "yes", "event": "approve"},
                         {"csrf": "0" * 64, "confirmed": "yes", "event": "approve"}):
                response = await client.post(f"/runs/{run_id}/signal", data=data)
                assert response.status_code == 403 and "CSRF" in alert(response.text)
            # a token from another server (another secret) is not this one's
            other = create_app(sf).state.ui.site.csrf
            response = await client.post(f"/runs/{run_id}/cancel",
                                         data={"csrf": other, "confirmed": "yes"})
            assert response.status_code == 403
        assert await events_of(sf, run_id) == before
        assert (await sf.get_run(run_id)).status == "paused"
        assert await sf.adapter.find_signal(run_id, "approve") is None

    async def test_cross_site_post_refused(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        app = create_app(sf)
        async with client_for(app, origin="http://evil.example") as client:
            response = await client.post(f"/runs/{run_id}/cancel", data={
                "csrf": app.state.ui.site.csrf, "confirmed": "yes"})
        assert response.status_code == 403 and "another site" in alert(response.text)
        assert (await sf.get_run(run_id)).status == "paused"

    async def test_allowed_hosts(self, sf: Starflow) -> None:
        app = create_app(sf, allowed_hosts=["127.0.0.1", "localhost"])
        async with client_for(app) as client:
            assert (await client.get("/runs")).status_code == 200
            rebound = await client.get("/runs", headers={"Host": "evil.example"})
            assert rebound.status_code == 400

    async def test_bad_arguments(self, sf: Starflow) -> None:
        with pytest.raises(StarflowError) as info:
            create_app(sf, token="short", poll_interval=0, page_size=0)
        text = str(info.value)
        assert "poll_interval" in text and "page_size" in text and "token" in text


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_run_page_by_upper_case_id(kind: str, tmp_path: Any) -> None:
    """A run id typed or pasted in upper case names the same run: the page shows its
    whole timeline and its stream its end, as sf.get_run / sf.events do (SQLite stores
    ids lowercase; PostgreSQL's uuid column takes either)."""
    import uuid

    from tests.conftest import adapter_url

    url = adapter_url(kind, tmp_path)
    async with Starflow.open(url, workspace_id=f"ws-{uuid.uuid4().hex[:8]}",
                             maintenance=False) as sf:
        paused = (await sf.run(approval, "lamp")).run_id
        done = (await sf.run(quick, 1)).run_id
        upper = paused.upper()
        events = await sf.events(paused)
        assert len(events) >= 2
        assert [e.id for e in await sf.events(upper)] == [e.id for e in events]
        assert (await sf.get_run(upper)).id == paused
        async with client_for(create_app(sf)) as client:
            lower_page = (await client.get(f"/runs/{paused}")).text
            upper_page = await client.get(f"/runs/{upper}")
            assert upper_page.status_code == 200
            rows = upper_page.text.count('<tr class="ev-')
            assert rows == lower_page.count('<tr class="ev-') == len(events)
            stream = await client.get(f"/runs/{done.upper()}/stream")
        assert stream.text.endswith('event: end\ndata: {"status":"success"}\n\n')


class TestLive:
    """The event streams behind the live views."""

    async def test_run_stream_reports_change_then_end(self, sf: Starflow) -> None:
        run_id = (await sf.run(approval, "lamp")).run_id
        ui: UI = create_app(sf, poll_interval=0.02).state.ui
        got: list[str] = []
        with anyio.fail_after(10):
            stream = ui.live.run_changes(run_id)
            assert (await anext(stream)).startswith("retry:")
            first = anext(stream)

            async def signal_soon() -> None:
                await anyio.sleep(0.1)
                await sf.signal(run_id, "approve", {"ok": True})

            async with anyio.create_task_group() as tg:
                tg.start_soon(signal_soon)
                got.append(await first)
            async for message in stream:
                got.append(message)
        assert got[0].startswith("event: changed")
        assert got[-1] == 'event: end\ndata: {"status":"success"}\n\n'

    async def test_ended_run_stream_ends_at_once(self, sf: Starflow) -> None:
        run_id = (await sf.run(quick, 1)).run_id
        async with client_for(create_app(sf)) as client:
            response = await client.get(f"/runs/{run_id}/stream")
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.text.endswith('event: end\ndata: {"status":"success"}\n\n')

    async def test_table_stream_sees_new_runs(self, sf: Starflow) -> None:
        from starflow.adapters.pages import RunPageQuery

        ui: UI = create_app(sf, poll_interval=0.02).state.ui
        with anyio.fail_after(10):
            stream = ui.live.table_changes(RunPageQuery())
            await anext(stream)
            first = anext(stream)

            async def start_soon() -> None:
                await anyio.sleep(0.1)
                await sf.run(quick, 3)

            async with anyio.create_task_group() as tg:
                tg.start_soon(start_soon)
                assert (await first).startswith("event: changed")
            await stream.aclose()


class TestOps:
    """The operations page: outbox, counts, pools, lease holders, expired leases."""

    async def test_ops(self, sf: Starflow) -> None:
        from datetime import timedelta

        queued = (await sf.options(pool="gpu").start(quick, 1)).run_id
        stale = (await sf.run(approval, "lamp")).run_id
        past = sf.clock.now() - timedelta(minutes=5)
        await sf.adapter.write_lease(stale, "runner-gone", past, now=past)
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/ops")).text
        assert "Mirror outbox" in html and "Wake a run by token" in html
        assert cells(html, 'data-pool="gpu"')[:3] == ["gpu", "1", "0"] and queued
        assert stale[:8] in html and "runner-gone" in html
        assert "Stuck runs" in html and '<table class="runs" id="stuck">' in html
        assert queued[:8] not in html.split('id="stuck"')[1]  # queued just now

    async def test_ops_lists_stuck_runs(self, sf: Starflow, tmp_path: Any) -> None:
        """A run queued longer than ``stuck_after`` with nobody claiming it is listed."""
        import sqlite3
        from datetime import timedelta

        from starflow.clock import format_ts

        queued = (await sf.options(pool="nobody").start(quick, 1)).run_id
        fresh = (await sf.options(pool="nobody").start(quick, 2)).run_id
        long_ago = sf.clock.now() - sf.config.stuck_after - timedelta(minutes=1)
        with closing(sqlite3.connect(tmp_path / "ui.db")) as conn, conn:
            conn.execute("UPDATE workflow_runs SET started_at = ? WHERE id = ?",
                         (format_ts(long_ago), queued))
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/ops")).text
        stuck = html.split('id="stuck"')[1].split("</table>")[0]
        assert queued[:8] in stuck and fresh[:8] not in stuck
        assert "<td>nobody</td>" in stuck


class TestOpsPoolsAndSchedules:
    """The operations page's pools (limits and use) and schedules: values, escaping,
    empty states, scope."""

    async def test_empty(self, sf: Starflow) -> None:
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/ops")).text
        assert "no pool has limits, queued or executing runs" in html
        assert "no schedules (create one with" in html
        assert "Schedules <span class=\"muted\">(0)</span>" in html

    async def test_pool_limits_and_use(self, sf: Starflow) -> None:
        """Limits show beside what the pool uses now; a reached one is marked; runs
        for any pool get their own row."""
        gate = anyio.Event()
        await sf.set_pool_limits("pay", concurrency=1, rate_limit=(5, timedelta(minutes=1)),
                                 key_concurrency=1)
        await sf.set_pool_limits("idle", rate_limit=(100, timedelta(hours=1)))
        GATED["gate"] = gate
        worker = sf.worker(pool="pay", concurrency=4)
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            first = (await sf.options(pool="pay").start(gated, 1)).run_id
            await sf.options(pool="pay").start(gated, 2)
            with anyio.fail_after(10):
                while (await sf.get_run(first)).status != "running":  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            async with client_for(create_app(sf)) as client:
                html = (await client.get("/ops")).text
            gate.set()
            worker.stop(0)
        # concurrency 1 holds the second run back: 1 queued, 1 executing, limit reached
        assert cells(html, 'data-pool="pay"') == ["pay", "1", "1", "1 / 1", "1 / 5 per 1m",
                                                  "1 per key", "oldest first", "Pause…"]
        pay = html.split('data-pool="pay"')[1].split("</tr>")[0]
        assert '<td class="limit full">1 / 1</td>' in pay
        assert '<td class="limit">1 / 5 per 1m</td>' in pay  # not reached
        assert cells(html, 'data-pool="idle"') == ["idle", "0", "0", "none",
                                                   "0 / 100 per 1h", "none", "oldest first",
                                                   "Pause…"]
        assert "data-pool-any" not in html  # nothing queued or running for any pool
        await sf.start(quick, 3)  # for any pool, with no worker left to claim it
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/ops")).text
        assert cells(html, "data-pool-any")[:6] == ["any pool", "1", "0", "none", "none",
                                                    "none"]
        assert "Pause" not in html.split("data-pool-any")[1].split("</tr>")[0]

    async def test_fair_pool_limits(self, sf: Starflow) -> None:
        """A fair pool (#30): key rate limit, weights and kept slots are shown."""
        await sf.set_pool_limits("tenants", key_concurrency=2,
                                 key_rate_limit=(10, timedelta(minutes=1)), fair=True,
                                 key_weights={"acme": 3, "beta": 2}, keep_slot=True)
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/ops")).text
        assert cells(html, 'data-pool="tenants"') == [
            "tenants", "0", "0", "none", "none", "2 per key 10 per 1m per key",
            "fair (acme=3, beta=2) keeps slots", "Pause…"]

    async def test_schedules(self, tmp_path: Any) -> None:

        """Each schedule with its cron, state (active, paused, late), next tick, last run
        and counters; arguments are folded and scrubbed like a run's input."""
        from starflow.runtime.schedules import ScheduleLoop
        from starflow_testing import FakeClock

        clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
        async with Starflow.open(f"sqlite:///{tmp_path / 'sched.db'}", clock=clock,
                                 maintenance=False) as sf:
            await sf.schedule("every-5", quick, 1, cron="*/5 * * * *", overlap="allow",
                              catchup=timedelta(hours=6), pool="batch")
            await sf.schedule("nightly", quick, 2, cron="30 3 * * *",
                              timezone="Europe/Berlin")
            token = (await sf.run(with_token)).wake_token
            await sf.schedule("quiet", quick, 3, cron="0 * * * *")
            await sf.pause_schedule("quiet")
            await clock.advance(timedelta(minutes=6))
            await ScheduleLoop(sf.runner).fire_due()  # fires every-5's 00:05 tick
            last = (await sf.get_schedule("every-5")).last_run_id
            assert last is not None and token is not None
            await clock.advance(timedelta(hours=2))  # and then no loop runs for 2 h
            async with client_for(create_app(sf)) as client:
                html = (await client.get("/ops")).text
        assert "Schedules <span class=\"muted\">(3 · 1 paused · " in html
        assert '<span class="err">1 late</span>' in html
        assert cells(html, 'data-schedule="every-5"')[:8] == [
            "every-5", "ui_quick v1 pool batch", "*/5 * * * * UTC overlap allow · catch-up 6h",
            "late 1h56m", "2030-01-01T00:10:00.000Z", f"{last[:8]} queued "
            "2030-01-01T00:05:00.000Z", "1", "0 missed 0 overlap"]
        assert f'href="http://127.0.0.1/runs/{last}"' in html
        assert cells(html, 'data-schedule="nightly"')[2:6] == [
            "30 3 * * * Europe/Berlin overlap skip", "active", "2030-01-01T02:30:00.000Z "
            "in 24m00s", "none yet"]
        assert cells(html, 'data-schedule="quiet"')[3:5] == ["paused", "-"]

    async def test_overdue_timers_say_no_maintenance_runs(self, tmp_path: Any) -> None:
        """Timers overdue past the slack (a paused wait's timeout, a queued run's
        deadline) are counted in a banner; within it, or fired, there is none."""
        from starflow_testing import FakeClock

        clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
        async with Starflow.open(f"sqlite:///{tmp_path / 'timers.db'}", clock=clock,
                                 maintenance=False) as sf:
            paused = await sf.run(with_token)  # waits for "approve", 1 h timeout
            assert paused.status == "paused"
            await sf.options(timeout=timedelta(hours=1), pool="nobody").start(quick, 1)
            app = create_app(sf)
            await clock.advance(timedelta(hours=1, seconds=20))  # due, but within 30 s
            async with client_for(app) as client:
                html = (await client.get("/ops")).text
            assert 'id="timers-overdue"' not in html
            await clock.advance(timedelta(seconds=20))  # 40 s past the wait's timeout
            async with client_for(app) as client:
                html = (await client.get("/ops")).text
            banner = html.split('id="timers-overdue">')[1].split("</p>")[0]
            assert banner.startswith("2 timers overdue, no maintenance running")
            assert "due more than 30s ago" in banner
            worker = sf.worker()  # a plain worker fires both
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                with anyio.fail_after(10):
                    while (await sf.get_run(paused.run_id)).status == "paused":  # noqa: ASYNC110
                        await anyio.sleep(0.02)
                    while await sf.adapter.due_run_deadlines(clock.now()):  # noqa: ASYNC110
                        await anyio.sleep(0.02)
                await worker.drain()
            async with client_for(app) as client:
                html = (await client.get("/ops")).text
            assert 'id="timers-overdue"' not in html

    async def test_hostile_names_are_escaped(self, sf: Starflow) -> None:
        """Names and arguments are text on the page, never markup; tokens in arguments
        are redacted."""
        from starflow.tokens import REDACTED

        hostile = '<img src=x onerror="alert(1)">'
        token = (await sf.run(with_token)).wake_token
        assert token is not None
        await sf.set_pool_limits(hostile, concurrency=2)
        await sf.schedule(hostile, quick, 1, cron="0 3 * * *", pool=hostile)
        await sf.schedule("args", approval, f"</pre><script>alert(2)</script> {token}",
                          cron="0 4 * * *")
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/ops")).text
        assert "<img src=x" not in html and "<script>alert" not in html
        escaped = "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;"
        assert f'<tr data-pool="{escaped}">' in html
        assert f'<tr data-schedule="{escaped}">' in html
        assert cells(html, f'data-pool="{escaped}"')[:4] == [escaped, "0", "0", "0 / 2"]
        assert "&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html
        assert token not in html and REDACTED in html

    async def test_other_workspaces_not_shown(self, sf: Starflow, tmp_path: Any) -> None:
        """Pools and schedules of another workspace on the same database stay out."""
        async with Starflow.open(f"sqlite:///{tmp_path / 'ui.db'}", workspace_id="elsewhere",
                                 maintenance=False) as other:
            await other.set_pool_limits("their-pool", concurrency=3)
            await other.schedule("their-schedule", quick, 1, cron="0 3 * * *")
        await sf.set_pool_limits("our-pool", concurrency=1)
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/ops")).text
        assert 'data-pool="our-pool"' in html
        assert "their-pool" not in html and "their-schedule" not in html
        assert "no schedules" in html


async def test_mounted_in_another_app(sf: Starflow) -> None:
    """The app mounts under a prefix of the user's own Starlette app; links follow."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    run_id = (await sf.run(quick, 1)).run_id
    outer = Starlette(routes=[Mount("/admin/starflow", create_app(sf))])
    async with client_for(outer) as client:
        html = (await client.get("/admin/starflow/runs")).text
        assert f'href="http://127.0.0.1/admin/starflow/runs/{run_id}"' in html
        assert "/admin/starflow/static/ui.css" in html
        css = await client.get("/admin/starflow/static/ui.css")
        assert css.status_code == 200 and "--accent" in css.text


async def test_run_stream_from_the_warm_tier(tmp_path: Any) -> None:
    """With a warm tier, the run page's stream is pushed from it and ends with the run."""
    from datetime import timedelta

    from starflow import StarflowConfig

    config = StarflowConfig(poll_interval=timedelta(milliseconds=50))
    async with Starflow.open(f"sqlite:///{tmp_path / 'warm.db'}", warm="memory://",
                             config=config) as sf:
        assert sf.warm is not None
        run_id = (await sf.run(approval, "lamp")).run_id
        ui: UI = create_app(sf, poll_interval=30).state.ui  # a poll would time out here
        got: list[str] = []
        with anyio.fail_after(10):
            stream = ui.live.run_changes(run_id)
            await anext(stream)

            async def signal_soon() -> None:
                await anyio.sleep(0.2)
                await sf.signal(run_id, "approve", {"ok": True})

            async with anyio.create_task_group() as tg:
                tg.start_soon(signal_soon)
                async for message in stream:
                    got.append(message)
        assert got[0].startswith("event: changed")
        assert got[-1] == 'event: end\ndata: {"status":"success"}\n\n'


async def test_all_workspaces(tmp_path: Any) -> None:
    """With scopes, each workspace/env has its own pages under /w/WS/ENV/, opened on
    first use; the header switches between them; bad names are refused."""
    from starflow import StarflowConfig
    from starflow.ui.scopes import Scopes

    url = f"sqlite:///{tmp_path / 'scopes.db'}"
    config = StarflowConfig()
    async with Starflow.open(url, workspace_id="shop", maintenance=False) as shop, \
            Starflow.open(url, workspace_id="billing", env="dev", maintenance=False) as billing:
        in_shop = (await shop.run(quick, 1)).run_id
        in_billing = (await billing.run(approval, "lamp")).run_id
    async with Starflow.open(url, workspace_id="third", maintenance=False) as third:
        await third.run(quick, 3)

    opened: list[tuple[str, str]] = []

    def open_scope(workspace_id: str, env: str) -> Starflow:
        opened.append((workspace_id, env))
        return Starflow.open(url, workspace_id=workspace_id, env=env, config=config,
                             maintenance=False)

    async with Starflow.open(url, workspace_id="shop", maintenance=False) as sf, \
            Scopes(open_scope, limit=2) as scopes:
        app = create_app(sf, token=TOKEN, scopes=scopes)
        async with client_for(app, authorization=f"Bearer {TOKEN}") as client:
            home = await client.get("/")
            assert home.headers["location"] == "http://127.0.0.1/w/shop/prod/runs"
            shop_page = (await client.get("/w/shop/prod/runs")).text
            assert in_shop[:8] in shop_page and in_billing[:8] not in shop_page
            assert 'action="http://127.0.0.1/switch"' in shop_page
            switched = await client.get("/switch", params={"workspace": "billing",
                                                           "env": "dev"})
            assert switched.headers["location"] == "http://127.0.0.1/w/billing/dev/runs"
            billing_page = (await client.get("/w/billing/dev/runs")).text
            assert in_billing[:8] in billing_page and in_shop[:8] not in billing_page
            run_page = (await client.get(f"/w/billing/dev/runs/{in_billing}")).text
            assert 'action="http://127.0.0.1/w/billing/dev/runs/' in run_page
            # acting in one scope writes there
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', run_page)
            assert csrf
            done = await client.post(f"/w/billing/dev/runs/{in_billing}/cancel",
                                     data={"csrf": csrf.group(1), "confirmed": "yes"})
            assert done.headers["location"].startswith(
                f"http://127.0.0.1/w/billing/dev/runs/{in_billing}")
            assert opened == [("billing", "dev")]  # shop/prod is the server's own app
            assert (await client.get("/w/x y/prod/runs")).status_code == 404
            assert (await client.get("/switch", params={"workspace": "a/b",
                                                        "env": "p"})).status_code == 400
            too_many = await client.get("/w/third/prod/runs")  # has a run: would open
            assert too_many.status_code == 404 and "already shows 2" in too_many.text
            assert (await client.get("/w/shop/prod/runs")).status_code == 200
            assert (await client.get("/w/shop/prod/runs",
                                     headers={"authorization": ""})).status_code == 401
    async with Starflow.open(url, workspace_id="billing", env="dev",
                             maintenance=False) as billing:
        assert (await billing.get_run(in_billing)).status == "cancelled"


async def test_all_workspaces_unknown_scope_writes_nothing(tmp_path: Any) -> None:
    """A GET of a workspace/env the database does not hold is a 404 that writes no row,
    opens no app and takes no slot: after more made-up names than slots, a real scope
    still opens."""
    import sqlite3

    from starflow.ui.scopes import Scopes

    path = tmp_path / "scopes.db"
    url = f"sqlite:///{path}"
    async with Starflow.open(url, workspace_id="billing", env="dev",
                             maintenance=False) as billing:
        in_billing = (await billing.run(quick, 1)).run_id

    def dump() -> list[str]:
        with closing(sqlite3.connect(path)) as conn:
            return list(conn.iterdump())

    entered: list[tuple[str, str]] = []

    class Counted(Starflow):
        async def __aenter__(self) -> Counted:
            entered.append((self.adapter.workspace_id, self.adapter.env))
            return await super().__aenter__()

    def open_scope(workspace_id: str, env: str) -> Starflow:
        return Counted.open(url, workspace_id=workspace_id, env=env, maintenance=False)

    async with Starflow.open(url, workspace_id="shop", maintenance=False) as sf, \
            Scopes(open_scope, limit=2) as scopes:
        app = create_app(sf, token=TOKEN, scopes=scopes)
        before = dump()
        async with client_for(app, authorization=f"Bearer {TOKEN}") as client:
            for n in range(5):
                made_up = await client.get(f"/w/made-up-{n}/prod/runs")
                assert made_up.status_code == 404
                assert f"made-up-{n}" in made_up.text and "no runs" in made_up.text
            wrong_env = await client.get("/w/billing/prod/runs")  # the workspace, not the env
            assert wrong_env.status_code == 404
            assert dump() == before and entered == []
            page = await client.get("/w/billing/dev/runs")
            assert page.status_code == 200 and in_billing[:8] in page.text
            assert entered == [("billing", "dev")]


async def test_long_timeline_shows_its_ends(sf: Starflow, monkeypatch: Any) -> None:
    """A run with many events shows the first and last ones and says how many it skips."""
    from starflow.ui import pages as ui_pages

    monkeypatch.setattr(ui_pages, "TIMELINE_EDGE", 2)
    run_id = (await sf.run(approval, "lamp")).run_id
    total = len(await sf.events(run_id))
    async with client_for(create_app(sf)) as client:
        html = (await client.get(f"/runs/{run_id}")).text
    assert f"({total} events)" in html
    assert html.count("<tr class=\"ev-") == 4
    assert f"… {total - 4} events in between not shown" in html


async def test_streams_catch_up_with_a_stale_page(sf: Starflow) -> None:
    """A change between a page's render and its stream's first read is reported:
    the stream compares with the version the page was rendered at."""
    from starflow.adapters.pages import RunPageQuery
    from starflow.ui.live import page_version, run_version

    run_id = (await sf.run(approval, "lamp")).run_id
    events = await sf.events(run_id)
    rendered = run_version("paused", events[-1].id)
    table = page_version(await sf.adapter.list_runs_page(RunPageQuery()))
    ui: UI = create_app(sf, poll_interval=0.02).state.ui
    with anyio.fail_after(10):
        current = ui.live.run_changes(run_id, rendered)
        await anext(current)
        with anyio.move_on_after(0.2) as quiet:  # up to date: nothing to say
            await anext(current)
        assert quiet.cancelled_caught
        await current.aclose()
        await sf.cancel(run_id)  # changes after the render, before the stream starts
        stale = ui.live.run_changes(run_id, rendered)
        assert (await anext(stale)).startswith("retry:")
        assert (await anext(stale)).startswith("event: changed")
        await stale.aclose()
        stale_table = ui.live.table_changes(RunPageQuery(), table)
        await anext(stale_table)
        assert (await anext(stale_table)).startswith("event: changed")
        await stale_table.aclose()


async def test_on_postgres() -> None:
    """The same pages and a signal on PostgreSQL (ids are a uuid column there)."""
    import uuid

    from tests.conftest import POSTGRES_URL, require_postgres

    require_postgres()
    async with Starflow.open(POSTGRES_URL, workspace_id=f"ws-{uuid.uuid4().hex[:12]}",
                             maintenance=False) as sf:
        run_id = (await sf.run(approval, "lamp")).run_id
        async with client_for(create_app(sf)) as client:
            page = (await client.get("/runs", params={"id": run_id[:6],
                                                      "status": "paused"})).text
            assert run_id[:8] in page and "paused <b>1</b>" in page
            assert (await client.get("/runs", params={"id": "zz"})).status_code == 200
            assert (await client.get("/runs/not-a-uuid")).status_code == 404
            html = (await client.get(f"/runs/{run_id}")).text
            assert "wait:approve#1" in html and "sfw1." not in html
            sent = await client.post(f"/runs/{run_id}/signal", data={
                "csrf": csrf_of(html), "event": "approve", "payload": '{"ok": true}',
                "confirmed": "yes"})
            assert sent.status_code == 303
            await sf.set_pool_limits("pg-pool", concurrency=2, rate_limit=(9, timedelta(hours=1)))
            await sf.options(pool="pg-pool").start(quick, 1)
            await sf.schedule("pg-nightly", quick, 1, cron="0 3 * * *", pool="pg-pool")
            ops = (await client.get("/ops")).text
            assert cells(ops, 'data-pool="pg-pool"') == ["pg-pool", "1", "0", "0 / 2",
                                                         "0 / 9 per 1h", "none", "oldest first",
                                                         "Pause…"]
            assert cells(ops, 'data-schedule="pg-nightly"')[:4] == [
                "pg-nightly", "ui_quick v1 pool pg-pool", "0 3 * * * UTC overlap skip",
                "active"]
        assert (await sf.get_run(run_id)).status == "success"


class TestRunKeys:
    """A run started by key (#30): its page by key, the key shown, the id filter."""

    async def test_page_by_key_shows_it_and_acts_on_it(self, sf: Starflow) -> None:
        run_id = (await sf.options(run_id="order-41").run(approval, "lamp")).run_id
        other = (await sf.run(quick, 2)).run_id
        async with client_for(create_app(sf)) as client:
            html = (await client.get("/runs/order-41")).text
            assert f'<dd class="mono">{run_id}</dd>' in html
            assert '<dd class="mono" data-run-key>order-41</dd>' in html
            assert "<title>Run order-41" in html
            table = (await client.get("/runs")).text
            assert '<span class="mono run-key" data-run-key>order-41</span>' in table
            by_key = (await client.get("/runs", params={"id": "order-41"})).text
            assert run_id[:8] in by_key and other[:8] not in by_key
            assert "no runs match" in (await client.get("/runs", params={"id": "order-4"})).text
            assert (await client.get("/runs/order-404")).status_code == 404
            sent = await client.post("/runs/order-41/signal", data={
                "csrf": csrf_of(html), "event": "approve", "payload": '{"ok": true}',
                "confirmed": "yes"})
            assert sent.status_code == 303
        assert (await sf.get_run("order-41")).status == "success"
