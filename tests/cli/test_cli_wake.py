"""``starflow signal``, ``resume`` and ``cancel``: each bad input is one line, nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import pytest

from starflow import Starflow
from starflow.workflow.decorators import registry

from . import cli_app
from .support import APP, Cli, Seeded


async def _state(url: str, run_id: str) -> tuple[str, int, bool]:
    """(status, number of events, whether an undelivered approval signal is queued)."""
    async with Starflow.open(url, maintenance=False) as sf:
        run = await sf.get_run(run_id)
        events = await sf.events(run_id)
        queued = await sf.adapter.find_signal(run_id, "approval")
        return run.status, len(events), queued is not None


def state(seeded: Seeded, run_id: str) -> tuple[str, int, bool]:
    return anyio.run(_state, seeded.url, run_id)


def _forget_cli_workflows(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on this process knows none of the tests' workflows (like a bare `starflow`)."""
    kept = {k: v for k, v in registry._by_key.items() if not k[0].startswith("cli_")}
    monkeypatch.setattr(registry, "_by_key", kept)


@pytest.fixture(autouse=True)
def _restore_cli_app_switches() -> Iterator[None]:
    """The tests here flip cli_app's module-level switches (BODY_BUG, STEP_BUG);
    put them back so a later test module sees cli_app as imported."""
    body, step = dict(cli_app.BODY_BUG), dict(cli_app.STEP_BUG)
    yield
    cli_app.BODY_BUG.clear()
    cli_app.BODY_BUG.update(body)
    cli_app.STEP_BUG.clear()
    cli_app.STEP_BUG.update(step)


@pytest.fixture
def unregistered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process has not imported the tests' workflows (like a bare `starflow` call)."""
    _forget_cli_workflows(monkeypatch)
    yield


class TestSignal:
    """A signal wakes the run; the CLI drives an inline run when it has its code."""

    def test_signal_drives_inline_run(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[0]
        result = cli("signal", run_id, "approval", "--payload", '{"ok": true}',
                     "--db", seeded.url, "--app", APP)
        assert result.code == 0, result.err
        assert result.out == f"signal 'approval' sent to run {run_id}: now success\n"
        assert state(seeded, run_id)[0] == "success"

    def test_json(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[0]
        result = cli("signal", run_id, "approval", "--payload", '{"ok": false}',
                     "--db", seeded.url, "--app", APP, "--json")
        data = json.loads(result.out)
        assert data == {"run_id": run_id, "status": "success", "waiting_for": None,
                        "error": None, "result": {"ok": False, "receipt": "receipt-o-0"}}

    def test_inline_run_without_its_code(self, cli: Cli, seeded: Seeded,
                                         unregistered: None) -> None:
        run_id = seeded.paused[0]
        before = state(seeded, run_id)
        line = cli.fails("signal", run_id, "approval", "--payload", '{"ok": true}',
                         "--db", seeded.url)
        assert "pass --app MODULE" in line and "'cli_order' v1" in line
        assert state(seeded, run_id) == before  # not even the signal was kept

    def test_name_the_run_does_not_wait_for(self, cli: Cli, seeded: Seeded) -> None:
        """A typo'd signal name to a paused run: one line, exit non-zero, nothing kept."""
        run_id = seeded.paused[0]
        before = state(seeded, run_id)
        line = cli.fails("signal", run_id, "aproval", "--payload", '{"ok": true}',
                         "--db", seeded.url, "--app", APP)
        assert "UnexpectedSignal" in line or "not 'aproval'" in line
        assert run_id in line and "'approval'" in line and "nothing was written" in line
        assert state(seeded, run_id) == before

    def test_bad_payload(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[0]
        before = state(seeded, run_id)
        line = cli.fails("signal", run_id, "approval", "--payload", "{ok: true}",
                         "--db", seeded.url, "--app", APP, code=2)
        assert "--payload: not valid JSON" in line and "--payload '{\"ok\": true}'" in line
        assert state(seeded, run_id) == before

    def test_unknown_run(self, cli: Cli, seeded: Seeded) -> None:
        line = cli.fails("signal", "no-such-run", "approval", "--db", seeded.url)
        assert line.startswith("starflow: RunNotFound: run no-such-run not found")

    def test_finished_run(self, cli: Cli, seeded: Seeded) -> None:
        before = state(seeded, seeded.done)
        line = cli.fails("signal", seeded.done, "approval", "--db", seeded.url)
        assert "RunFinished" in line and "already ended with status 'success'" in line
        assert state(seeded, seeded.done) == before


class TestResume:
    """A wake token resumes its wait; the token is never echoed back."""

    def test_resume(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[1]
        token = seeded.tokens[run_id]
        result = cli("resume", token, "--payload", '{"ok": true}', "--db", seeded.url,
                     "--app", APP)
        assert result.code == 0, result.err
        assert result.out == f"resumed run {run_id}: now success\n"
        assert token not in result.out + result.err
        again = cli.fails("resume", token, "--db", seeded.url, "--app", APP)
        assert "invalid wake token (already_used)" in again and token not in again

    def test_invalid_token(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[1]
        before = state(seeded, run_id)
        forged = seeded.tokens[run_id][:-4] + "AAAA"
        line = cli.fails("resume", forged, "--db", seeded.url, "--app", APP)
        assert "invalid wake token" in line and "check the whole token was copied" in line
        assert forged not in line
        assert "malformed" in cli.fails("resume", "garbage", "--db", seeded.url)
        assert state(seeded, run_id) == before

    def test_inline_run_without_its_code(self, cli: Cli, seeded: Seeded,
                                         unregistered: None) -> None:
        run_id = seeded.paused[1]
        before = state(seeded, run_id)
        line = cli.fails("resume", seeded.tokens[run_id], "--db", seeded.url)
        assert "pass --app MODULE" in line
        assert state(seeded, run_id) == before

    def test_bad_payload(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[1]
        before = state(seeded, run_id)
        assert "not valid JSON" in cli.fails("resume", seeded.tokens[run_id], "--payload",
                                             "[1,", "--db", seeded.url, code=2)
        assert state(seeded, run_id) == before


class TestCancel:
    """A paused run is cancelled at once; a finished one cannot be."""

    def test_cancel(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[2]
        result = cli("cancel", run_id, "--db", seeded.url)
        assert result.code == 0, result.err
        assert result.out == f"cancelled run {run_id}: now cancelled\n"
        assert state(seeded, run_id)[0] == "cancelled"
        line = cli.fails("cancel", run_id, "--db", seeded.url)
        assert "cannot cancel run" in line and "'cancelled'" in line

    def test_unknown_run(self, cli: Cli, seeded: Seeded) -> None:
        assert "RunNotFound" in cli.fails("cancel", "nope", "--db", seeded.url)


def _failed_inline_run(seeded: Seeded) -> str:
    """An inline run of cli_flaky that ended in error (its body bug on), its id."""
    async def fail_one() -> str:
        async with Starflow.open(seeded.url, maintenance=False) as sf:
            handle = await sf.run(cli_app.cli_flaky, "r-1")
            assert handle.status == "error"
            return handle.run_id

    cli_app.BODY_BUG["on"] = True
    return anyio.run(fail_one)


class TestRetry:
    """`starflow runs retry` runs a failed run again from its history."""

    def test_retry_after_a_fix(self, cli: Cli, seeded: Seeded) -> None:
        run_id = _failed_inline_run(seeded)
        line = cli.fails("runs", "retry", seeded.done, "--db", seeded.url, "--app", APP)
        assert "cannot retry run" in line and "'success'" in line
        cli_app.BODY_BUG["on"] = False
        result = cli("runs", "retry", run_id, "--db", seeded.url, "--app", APP)
        assert result.code == 0, result.err
        assert result.out == f"retried run {run_id}: now success\n"
        assert state(seeded, run_id)[0] == "success"

    def test_retry_reruns_the_failed_step(self, cli: Cli, seeded: Seeded) -> None:
        """After a step's fix, the step runs again (and what follows); the one before
        it does not."""
        async def fail_one() -> str:
            async with Starflow.open(seeded.url, maintenance=False) as sf:
                handle = await sf.run(cli_app.cli_step_bug, "s-1")
                assert handle.status == "error" and "LookupError" in (handle.error or "")
                return handle.run_id

        cli_app.STEP_BUG.update(fixed=False, charge=0, ship=0)
        run_id = anyio.run(fail_one)
        cli_app.STEP_BUG["fixed"] = True
        result = cli("runs", "retry", run_id, "--db", seeded.url, "--app", APP, "--json")
        assert result.code == 0, result.err
        data = json.loads(result.out)
        assert (data["status"], data["result"]) == ("success", "receipt-s-1 shipped-s-1")
        assert (cli_app.STEP_BUG["charge"], cli_app.STEP_BUG["ship"]) == (1, 2)

    def test_inline_run_without_its_code(self, cli: Cli, seeded: Seeded,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
        run_id = _failed_inline_run(seeded)
        cli_app.BODY_BUG["on"] = False
        before = state(seeded, run_id)
        _forget_cli_workflows(monkeypatch)  # after the run was made
        line = cli.fails("runs", "retry", run_id, "--db", seeded.url)
        assert "pass --app MODULE" in line and "'cli_flaky'" in line
        assert state(seeded, run_id) == before


class TestFork:
    """`starflow runs fork RUN --from-node NODE` makes a new run from an ended run's history."""

    def test_fork_after_a_fix_and_bad_input(self, cli: Cli, seeded: Seeded) -> None:
        run_id = _failed_inline_run(seeded)
        before = state(seeded, run_id)
        line = cli.fails("runs", "fork", run_id, "--from-node", "step:nope#1",
                         "--db", seeded.url, "--app", APP)
        assert "has no node 'step:nope#1'" in line and "step:cli_charge#1" in line
        paused = seeded.paused[0]
        line = cli.fails("runs", "fork", paused, "--from-node", "wait:approval#1",
                         "--db", seeded.url, "--app", APP)
        assert "still 'paused'" in line
        assert state(seeded, run_id) == before
        cli_app.BODY_BUG["on"] = False
        result = cli("runs", "fork", run_id, "--from-node", "step:cli_charge#1",
                     "--db", seeded.url, "--app", APP, "--json")
        assert result.code == 0, result.err
        data = json.loads(result.out)
        assert data["status"] == "success" and data["forked_from"] == run_id
        assert data["run_id"] != run_id
        assert state(seeded, run_id) == before  # the source is not changed
        assert state(seeded, data["run_id"])[0] == "success"

    def test_show_names_the_run_a_run_continued_as(self, cli: Cli, seeded: Seeded) -> None:
        """`runs show` prints `continued as` for a run that called continue_as_new."""
        import starflow
        from starflow import workflow

        @workflow(name="cli_chain")
        async def chain(n: int) -> int:
            if n == 0:
                starflow.continue_as_new(1)
            return n

        async def make() -> tuple[str, str]:
            async with Starflow.open(seeded.url, maintenance=False) as sf:
                last = await sf.run(chain, 0)
                runs = await sf.list_runs(template_id="cli_chain")
                first = next(r.id for r in runs if r.id != last.run_id)
                return first, last.run_id

        first, last = anyio.run(make)
        result = cli("runs", "show", first, "--db", seeded.url)
        assert result.code == 0, result.err
        assert f"\ncontinued as  {last}\n" in result.out
        data = json.loads(cli("runs", "show", first, "--db", seeded.url, "--json").out)
        assert data["run"]["continued_as"] == last


class TestRunsPauseResume:
    """`starflow runs pause|resume RUN` (#30): a paused run keeps a signal until resumed."""

    def test_pause_signal_resume(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[0]
        result = cli("runs", "pause", run_id, "--db", seeded.url)
        assert result.code == 0, result.err
        assert result.out.startswith(f"paused run {run_id}: now paused by an operator")
        again = cli("runs", "pause", run_id, "--db", seeded.url, "--json")
        assert json.loads(again.out)["held"] is True
        sent = cli("signal", run_id, "approval", "--payload", '{"ok": true}',
                   "--db", seeded.url, "--app", APP)
        assert sent.code == 0, sent.err
        assert state(seeded, run_id) == ("paused", state(seeded, run_id)[1], True)
        done = cli("runs", "resume", run_id, "--db", seeded.url, "--app", APP)
        assert done.code == 0, done.err
        assert done.out == f"resumed run {run_id}: now success\n"

    def test_unknown_and_ended_runs(self, cli: Cli, seeded: Seeded) -> None:
        line = cli.fails("runs", "pause", "6f1c2b1e-8a51-4a3e-9a57-0f1e2d3c4b5a",
                         "--db", seeded.url)
        assert "6f1c2b1e-8a51-4a3e-9a57-0f1e2d3c4b5a" in line
        before = state(seeded, seeded.done)
        line = cli.fails("runs", "resume", seeded.done, "--db", seeded.url)
        assert seeded.done in line
        assert state(seeded, seeded.done) == before
