"""Every example in examples/ runs in a fresh process and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

#: Each example runs as a script in a subprocess: end to end, and slow.
pytestmark = pytest.mark.slow


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, tmp_path: Path, url: str | None = None) -> str:
    """Run ``examples/<name>`` (a private SQLite database unless ``url``); return its stdout."""
    env = {**os.environ,
           "STARFLOW_DATABASE_URL": url or f"sqlite:///{tmp_path / 'starflow.db'}"}
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                          text=True, timeout=90, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


class TestSaga:
    """examples/saga.py: compensation after StepFailed, live and on replay."""

    def test_rolls_back_and_replays_without_rerunning(self, tmp_path: Path) -> None:
        """The car fails 3 times, both bookings are undone newest first, nothing runs twice."""
        out = run_example("saga.py", tmp_path)
        assert "rolled back; run is paused, waiting for 'next-step'" in out
        assert "'failed': 'step:book_car#1'" in out and "'attempts': 3" in out
        assert "'decision': 'refund'" in out
        assert ("handler calls: {'book_car': 3, 'book_flight': 1, 'book_hotel': 1, "
                "'cancel_flight': 1, 'cancel_hotel': 1}") in out
        events = [line.split() for line in out.splitlines() if line.startswith("  ")]
        order = [e[1] for e in events if e[0] == "node_complete"]
        assert order == ["step:book_flight#1", "step:book_hotel#1", "step:cancel_hotel#1",
                         "step:cancel_flight#1", "wait:next-step#1"]
        assert ["node_error", "step:book_car#1"] in events


class TestFanOut:
    """examples/fan_out.py: concurrent steps in a task group."""

    def test_branches_recorded_once(self, tmp_path: Path) -> None:
        """Four branches record four steps; the replay calls none of them again."""
        out = run_example("fan_out.py", tmp_path)
        assert "run is paused; fetch_price ran 4 times" in out
        assert "result: {'approved': True, 'price': 87, 'region': 'latam'}" in out
        assert "after the replay fetch_price has still run 4 times" in out
        assert ("recorded: step:fetch_price#1, step:fetch_price#2, step:fetch_price#3, "
                "step:fetch_price#4") in out


class TestLongSleep:
    """examples/long_sleep.py: a seven-day sleep on fake time."""

    def test_week_passes_on_fake_time(self, tmp_path: Path) -> None:
        """The reminder is sent seven fake days after the welcome."""
        import starflow_testing

        if not hasattr(starflow_testing, "WorkflowEnvironment"):
            pytest.skip("starflow_testing.WorkflowEnvironment has not landed yet")
        out = run_example("long_sleep.py", tmp_path)
        lines = out.splitlines()
        assert lines[:4] == ["welcome mail sent to ada@example.com",
                             "reminder mail sent to ada@example.com",
                             "slept 7 days, 0:00:00",
                             "fake time passed: 7 days, 0:00:00"]
        assert any("2030-01-08" in line and "sleep#1" in line for line in lines)


class TestSchedulesAndQueues:
    """examples/schedules_and_queues.py: three nightly ticks, dedup, debounce, a limited pool."""

    def test_output(self, tmp_path: Path) -> None:
        out = run_example("schedules_and_queues.py", tmp_path)
        assert "schedule nightly: next tick 2030-03-02 02:00 UTC" in out  # 03:00 CET
        for day in ("02", "03", "04"):
            assert f"success: report for finance at 2030-03-{day} 02:00 UTC" in out
        assert "started 3, skipped 0" in out
        assert "dedup: refused; the active run is the first one: True" in out
        assert "dedup: refunded o-1" in out
        assert "debounced: charged cart-9:30" in out  # one run, the last call's arguments
        most = int(out.split("at most ")[1].split()[0])
        assert "charges run: 5," in out and 1 <= most <= 2


class TestFairTenants:
    """examples/fair_tenants.py: a fair pool serves a small tenant despite a backlog (#30)."""

    def test_output(self, tmp_path: Path) -> None:
        out = run_example("fair_tenants.py", tmp_path)
        assert "plain pool: small-co's last run was claim 105 of 105" in out
        assert "fair pool: small-co's last run was claim 10 of 105" in out
        assert "first ten claims: " + " ".join(["big-co small-co"] * 5) in out
        assert "weighted pool, first 20 claims: premium 15, basic 5" in out
        assert "stored: True {'premium': 3}" in out


class TestQuickstart:
    """examples/quickstart.py: pause, signal, durable sleep, result."""

    def test_quickstart_finishes(self, tmp_path: Path) -> None:
        """The order pauses for approval and ends with its tracking number."""
        out = run_example("quickstart.py", tmp_path)
        assert "waiting for 'approval'" in out
        assert "'tracking': 'TRACK-O-1'" in out


class TestFailureData:
    """examples/failure_data.py: a run's failure read back as data."""

    def test_cause_node_and_raise_point(self, tmp_path: Path) -> None:
        """The failing step's node, attempts, qualified type, message and its own frame."""
        out = run_example("failure_data.py", tmp_path)
        assert "run is error" in out
        assert ("failed at step:price_of#2 after 2 attempt(s): builtins.KeyError: "
                "\"lamp: brass, 'Error: none'\"") in out
        assert "raised in price_of" in out
        assert "attempt 1 of step:price_of#2 failed (builtins.KeyError), retried after 0 ms" in out


class TestTypedSignal:
    """examples/typed_signal.py: a payload that does not fit the wait's type is refused."""

    def test_refused_then_accepted(self, tmp_path: Path) -> None:
        """The bad payload names the field; the run stays paused; a good one finishes it."""
        out = run_example("typed_signal.py", tmp_path)
        assert "refused:" in out and "at `$.qty`" in out and "nothing was written" in out
        assert "run is still paused" in out
        assert "run is success: ada: 2 x lamp" in out


class TestEventsAndStreams:
    """examples/events_and_streams.py: a status event and a live stream, each write once."""

    def test_reads_the_event_and_follows_the_stream(self, tmp_path: Path) -> None:
        out = run_example("events_and_streams.py", tmp_path)
        assert "run is paused; status event: 'waiting for review'" in out
        lines = [line for line in out.splitlines() if line.startswith("stream")]
        assert lines[:6] == ["stream: DURABLE", "stream: EVENTS", "stream: STREAMS",
                             "stream: review: looks good", "stream closed",
                             "stream writes recorded once each: ['stream:lines#1', "
                             "'stream:lines#2', 'stream:lines#3', 'stream:lines#4', "
                             "'stream:lines#5']"]
        assert "status event: 'done'" in out and "result: 3" in out


class TestLlmTokenStream:
    """examples/llm_token_stream.py: tokens written from a step are read while it runs."""

    def test_tokens_live_retry_appended_replay_writes_nothing(self, tmp_path: Path) -> None:
        out = run_example("llm_token_stream.py", tmp_path)
        lines = out.splitlines()
        # Read while the first attempt ran (before the retry began), then the retry's.
        assert lines[:4] == ["token: '[attempt 1]' (attempts so far: 1)",
                             "token: 'Durable' (attempts so far: 1)",
                             "token: ' ' (attempts so far: 1)",
                             "token: '[attempt 2]' (attempts so far: 2)"]
        assert "stream closed" in lines
        assert "result: 'Durable streams work.'" in out
        assert "attempts: 2; tokens read: 10; items stored: 11" in out


class TestForkAndContinue:
    """examples/fork_and_continue.py: a fork and a retry re-run only the failed step; a
    chain stays short."""

    def test_fork_and_chain(self, tmp_path: Path) -> None:
        out = run_example("fork_and_continue.py", tmp_path)
        assert "checkout is error: StepFailed" in out
        assert "fork is success: reservation-o-7 + receipt-o-7" in out
        assert "steps run by the fork: ['charge']" in out
        assert "retry is success: reservation-o-7 + receipt-o-7" in out
        assert "steps run by the retry: ['charge']" in out
        assert "poller chain: 10 runs, history sizes [3, 4]" in out
        assert "result of the first run: 450" in out and "last run: True" in out
        assert "supervisor, through its child's chain: 450" in out


class TestDelayedStart:
    """examples/delayed_start.py: written now, run at its time on fake time, cancellable."""

    def test_runs_at_its_time(self, tmp_path: Path) -> None:
        out = run_example("delayed_start.py", tmp_path)
        assert "same run on retry: True" in out
        assert "trial-reminder queued, starts at 2030-01-02 09:00" in out
        assert "trial-reminder queued, starts at 2030-01-01 18:00" in out
        assert "ada: reminded ada@example.com at 2030-01-02 09:00" in out
        assert "bob: cancelled" in out
        assert "emails sent: ['ada@example.com: your trial ends tomorrow']" in out


class TestRunKeys:
    """examples/run_keys.py: an idempotent start by business key, reached by that key."""

    def test_redelivery_starts_nothing(self, tmp_path: Path) -> None:
        out = run_example("run_keys.py", tmp_path)
        assert "same run: True; payment captured 1 time(s)" in out
        assert "key 'order-A-1001' names run " in out and "(paused)" in out
        assert "result: {'receipt': 'rcpt-A-1001-1999', 'tracking': 'TRK-77'}" in out
        assert "refused: the key names a 'fulfil-order' run, not 'refund-order'" in out
        assert "refund: refunded A-1001" in out
        assert "bad key: a run key must not start or end with whitespace" in out


class TestPydanticOrders:
    """examples/pydantic_orders.py: Pydantic models as values, typed on replay."""

    def test_models_come_back_as_models(self, tmp_path: Path) -> None:
        """Live and replayed step outputs are models; the event and result are typed;
        a payload failing the wait's model is refused; the step ran once."""
        out = run_example("pydantic_orders.py", tmp_path)
        assert out.count("in the workflow: Quote with Order") == 2
        assert "quote event: Quote(order=Order(id='o-1'" in out
        assert "refused:" in out and "__main__.Approval" in out and "nothing was written" in out
        assert "run is success: Invoice {'quote': {'order':" in out
        assert "'approved_by': 'ada'" in out
        assert "price ran 1 time(s)" in out


class TestEncryptedPayloads:
    """examples/encrypted_payloads.py: ciphertext at rest, a key rotation, envelopes shown."""

    def test_no_plaintext_rotation_and_envelopes(self, tmp_path: Path) -> None:
        out = run_example("encrypted_payloads.py", tmp_path)
        assert "run is paused; event: {'card': '4111-1111-1111-1234'" in out
        assert "card number in the database file: False" in out
        assert "after rotation: success, {'approved_by': 'ada'" in out
        assert ("without the codec: input encrypted (zlib, aesgcm, key k1), "
                "result encrypted (zlib, aesgcm, key k2)") in out


class TestSyncSteps:
    """examples/sync_steps.py: plain def steps run in worker threads."""

    def test_a_blocked_thread_does_not_hold_up_another_run(self, tmp_path: Path) -> None:
        out = run_example("sync_steps.py", tmp_path)
        assert "while o-slow's charge blocks its thread: o-fast: 635 cents" in out
        assert "o-slow: success, o-slow: 1080 cents (key ...step:charge#1)" in out
        # Replay did not charge again; the first fetch_rate failed once and was retried.
        assert "charged: ['o-fast', 'o-slow']; fetch_rate attempts: 3" in out


class TestSyncWorkflow:
    """examples/sync_workflow.py: a plain def workflow, paused, replayed, cancelled."""

    def test_replayed_steps_do_not_run_again(self, tmp_path: Path) -> None:
        out = run_example("sync_workflow.py", tmp_path)
        assert "lamp: paused (waiting for approve)" in out
        assert ("lamp: {'by': 'ada', 'cents': 1250, 'label': 'label for lamp', "
                "'reservation': 'R-lamp'}") in out
        assert "desk: cancelled" in out
        # One reserve per run (the signal replayed it), price retried once, the
        # compensation ran for the cancelled run.
        assert ("calls: ['reserve lamp', 'price lamp', 'price lamp', 'reserve desk', "
                "'price desk', 'price desk', 'release R-desk']") in out


#: Examples whose output a class above checks.
CHECKED = {"saga.py", "fan_out.py", "long_sleep.py", "quickstart.py", "failure_data.py",
           "pydantic_orders.py", "typed_signal.py", "schedules_and_queues.py",
           "events_and_streams.py", "fork_and_continue.py", "delayed_start.py",
           "sync_steps.py", "llm_token_stream.py", "run_keys.py", "encrypted_payloads.py",
           "sync_workflow.py"}


@pytest.mark.parametrize(
    "name", sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in CHECKED))
def test_other_examples_run(name: str, tmp_path: Path) -> None:
    """Every other example at least runs to completion and prints something.

    Examples without an output check in this module get this smoke run, so a
    broken example never passes unnoticed (their own tests may check more).
    """
    assert run_example(name, tmp_path).strip()


class TestLiveWatch:
    """examples/live_watch.py: progress and status pushed from the warm tier, then the result."""

    def test_watches_the_run_to_its_end(self, tmp_path: Path) -> None:
        """The watcher sees step progress and the final success; the result is read cold."""
        out = run_example("live_watch.py", tmp_path)
        assert "progress=4/4" in out
        assert "live: status=success" in out
        assert "result (read cold): {'total': 40}" in out
        assert "outbox: pending=0 level=ok" in out


class TestWorkerDeployment:
    """examples/worker_deployment.py: queued runs, a signal requeue, a swept lost runner."""

    @pytest.mark.parametrize("db", ["sqlite", "postgres", "pgbouncer"])
    def test_workers_finish_every_run(self, tmp_path: Path, db: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        """Every queued run ships; the lost runner's run is swept, requeued and finished."""
        if db == "pgbouncer":  # unchanged, through a transaction pooler (polling)
            from conftest import pgbouncer_url, require_pgbouncer

            require_pgbouncer()
            monkeypatch.setenv("STARFLOW_WORKSPACE", f"example-{uuid.uuid4().hex[:12]}")
            out = run_example("worker_deployment.py", tmp_path, url=pgbouncer_url())
        elif db == "postgres":
            from conftest import POSTGRES_URL, require_postgres

            require_postgres()
            monkeypatch.setenv("STARFLOW_WORKSPACE", f"example-{uuid.uuid4().hex[:12]}")
            out = run_example("worker_deployment.py", tmp_path, url=POSTGRES_URL)
        else:
            out = run_example("worker_deployment.py", tmp_path)
        assert "queued: 4 runs, status queued" in out
        for i in range(3):
            assert f"o-{i} shipped by standard" in out
        assert "signalled: the run is queued for a worker again" in out
        assert "o-vip shipped by courier" in out and "o-lost shipped by standard" in out
        assert "recovered run: runner_lost (requeued, was leased by crashed-worker)" in out


class TestMessaging:
    """The examples of the "Talking to a running workflow" guide."""

    def test_approve_or_reject(self, tmp_path: Path) -> None:
        """Two racing signals: one decides, the other stays in the inbox."""
        out = run_example("approve_or_reject.py", tmp_path)
        assert "run is paused waiting for approve|reject" in out
        assert ("result: 120 approved by ann" in out) != ("result: 120 rejected by bob" in out)
        assert "the other signal is still in the inbox: True" in out

    def test_cancel_with_compensation(self, tmp_path: Path) -> None:
        """The cancel reaches the wait, the compensation runs once, the run ends cancelled."""
        out = run_example("cancel_with_compensation.py", tmp_path)
        assert "after cancel the run is cancelled" in out
        assert "steps run: ['reserve_seat', 'release_seat']" in out
        assert "  node_error wait:paid#1" in out
        assert out.rstrip().endswith("run_cancelled")

    def test_cart_updates(self, tmp_path: Path) -> None:
        """Replies, a retry answered once, a rejection."""
        out = run_example("cart_updates.py", tmp_path)
        assert "items after adding a book: 1\nthe same request retried: 1\n" in out
        assert "rejected: book is already in the cart" in out
        assert "items after adding a pen: 2" in out
        assert "result: ['book', 'pen']" in out

    def test_message_passing(self, tmp_path: Path) -> None:
        """Updates and a signal handled by one wait, across a restart."""
        out = run_example("message_passing.py", tmp_path)
        assert out.splitlines() == [
            "run is paused", "language: en", "previous language: en",
            "rejected: no greeting in 'tlh'", "language after a restart: fr",
            "run is success: 'Bonjour, monde'", "messages handled: 5"]

    def test_replay_quiet_logger(self, tmp_path: Path) -> None:
        """print repeats on each replay; starflow.logger lines appear once each."""
        out = run_example("replay_quiet_logger.py", tmp_path)
        assert out.count("print: body runs") == 3
        logged = [line for line in out.splitlines() if line.startswith("log: ")]
        assert logged == ["log: order o-1 started [None]",
                          "log: charged 42; waiting for shipment [step:charge#1]",
                          "log: shipped [wait:shipped#1]",
                          "log: delivered [wait:delivered#1]"]

    def test_find_by_attributes(self, tmp_path: Path) -> None:
        """list_runs(attributes=...) finds the runs tagged so, and only them."""
        out = run_example("find_by_attributes.py", tmp_path)
        assert "customer c-42: [('c-42', 'eu'), ('c-42', 'us')]" in out
        assert "region eu: [('c-42', 'eu'), ('c-7', 'eu')]" in out
        assert "urgent in eu: [('c-42', 'eu')]" in out


class TestBulkActions:
    """examples/bulk_actions.py: retry, cancel and fork every run a filter matches (#30)."""

    def test_tour(self, tmp_path: Path) -> None:
        """Counted, capped, retried after the fix, cancelled by attribute, forked where
        the node exists."""
        out = run_example("bulk_actions.py", tmp_path)
        assert "failed, dry run: 4" in out
        assert "refused: more than limit=3 match, nothing was retried" in out
        assert "retried: matched 4, acted on 4" in out and "now succeeded: 4" in out
        assert "cancelled: 2 eu orders" in out
        assert "an empty filter is refused" in out
        assert "forked 4 runs from step:print_label#1, skipped 2 without it" in out


class TestWebUI:
    """examples/web_ui.py: the page served by uvicorn, read and acted on over HTTP."""

    def test_tour(self, tmp_path: Path) -> None:
        """401 without the token; the run listed; approved through the form; result read."""
        out = run_example("web_ui.py", tmp_path)
        assert "without the token: 401" in out
        assert "runs page: 200 lists the run" in out
        assert "confirmation page: True" in out and "signal sent: 303 done=signal" in out
        assert "result: {'approved_by': 'ana', 'cents': 1999, 'item': 'lamp'}" in out
        assert ("operations page: pool purchases at ['0 / 5'] | schedule daily-restock "
                "listed") in out


class TestRetention:
    """examples/retention.py: prune after 30 days, export first, replay the export."""

    def test_prunes_ended_runs_keeps_the_paused_one(self, tmp_path: Path) -> None:
        out = run_example("retention.py", tmp_path)
        assert "a dry run would prune 3 runs" in out
        assert "pruned 3 runs" in out and "'workflow_runs': 3" in out
        assert "paused run kept: paused" in out
        assert out.count("replayed retention-order ok") == 3


class TestChildWorkflows:
    """examples/child_workflows.py: fan-out to child runs, a failed child caught."""

    def test_children_gathered_and_failure_reported(self, tmp_path: Path) -> None:
        out = run_example("child_workflows.py", tmp_path)
        lines = out.splitlines()
        assert lines[0] == "summary: 3 thumbnails, 321 bytes"
        assert lines[1] == ("failed: party.gif: builtins.ValueError: cannot resize "
                            "animated party.gif")
        assert lines[2].startswith("5 child runs of ")
        assert [line.split() for line in lines[3:]] == [
            ["summarize", "success"], ["thumbnail", "error"], ["thumbnail", "success"],
            ["thumbnail", "success"], ["thumbnail", "success"]]


class TestDeadlines:
    """examples/deadlines.py: a workflow deadline and a step timeout on fake time."""

    def test_timeout_and_retried_step(self, tmp_path: Path) -> None:
        out = run_example("deadlines.py", tmp_path)
        assert out.splitlines() == [
            "run ended: error, error_type WorkflowTimeout",
            "after 1 day, 0:00:00 of fake time",
            "quote attempts: 3 (two timed out after 30 s each)",
            "  attempt 1: starflow.errors.StepTimeout",
            "  attempt 2: starflow.errors.StepTimeout",
            "with sf.options(timeout=3 days): o-2: 42 ok",
        ]


class TestPauseAndResume:
    """examples/pause_and_resume.py: an operator's pause keeps a signal until resume (#30)."""

    def test_signal_kept_until_resumed(self, tmp_path: Path) -> None:
        out = run_example("pause_and_resume.py", tmp_path)
        assert "after pause: paused held" in out
        assert "signal sent while paused; run is still paused" in out
        assert "after resume: success -> launch-post v1, approved by ada" in out
        assert "steps run: ['draft', 'publish']" in out
        events = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
        assert events.index("run_paused_by_operator") < events.index(
            "run_resumed_by_operator") < events.index("run_resumed")
        assert "pool gpu paused: True ; its run is queued" in out
        assert "pool gpu resumed (no limits left): True" in out


class TestTransactionalStart:
    """examples/transactional_start.py: the order and its run commit, or roll back, together."""

    @pytest.mark.parametrize("kind", ["sqlite", "postgres"])
    def test_commit_and_rollback(self, kind: str, tmp_path: Path) -> None:
        url = None
        if kind == "postgres":
            from tests.conftest import POSTGRES_URL, require_postgres

            require_postgres()
            url = POSTGRES_URL
        out = run_example("transactional_start.py", tmp_path, url)
        assert out.splitlines() == [
            "o-1 placed; its run is queued",
            "o-2 declined: 250000 cents is over the card's limit",
            "o-2 has a run: False",
            "orders in the table: ['o-1']",
            "o-1 fulfilled: parcel for o-1",
        ]
