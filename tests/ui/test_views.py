"""What the pages compute from records: timeline, waits, folding, redaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from starflow.records import RunEvent, RunInfo, WaitRecord
from starflow.ui import views

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TOKEN = "sfw1.default.eyJyIjoiMTIzNDU2Nzg5MCJ9.xlmFHymMIgOiOCN9qx4nYJblz-QqttHUECAnGjmVINk"


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def ev(i: int, kind: str, node: str | None, payload: object, ms: int) -> RunEvent:
    return RunEvent(id=i, run_id="r", event_type=kind, node_id=node, payload_json=payload,
                    created_at=at(ms))


RUN = RunInfo(id="r", template_id="wf", workspace_id="w", env="e", status="paused",
              started_at=T0)


class TestScrub:
    """Wake tokens go, whatever key or string carries them."""

    def test_keys_and_strings(self) -> None:
        value = {"wake_token": TOKEN, "callback": TOKEN,
                 "note": f"resume with {TOKEN} please", "list": [TOKEN, 1]}
        scrubbed = views.scrub(value)
        assert TOKEN not in repr(scrubbed)
        assert scrubbed["note"] == "resume with [redacted] please"
        assert scrubbed["list"] == ["[redacted]", 1]

    def test_other_values_untouched(self) -> None:
        value = {"sfw1": "not a token", "n": 3, "none": None}
        assert views.scrub(value) == value


class TestTimeline:
    """Offsets, step durations and attempts, wait durations, details."""

    def test_rows(self) -> None:
        events = [
            ev(1, "node_start", "step:charge#1", {"input": {"args": [1]}}, 10),
            ev(2, "node_error", "step:charge#1",
               {"error": {"type": "ValueError", "message": "no", "attempts": 3}}, 260),
            ev(3, "run_paused", None, {"node_id": "wait:go#1", "event": "go",
                                       "deadline": "2026-01-02T00:00:00Z",
                                       "wake_token": TOKEN}, 300),
            ev(4, "node_complete", "wait:go#1", {"output": {"ok": True}, "via": "signal"},
               5300),
            ev(5, "phase", None, {"phase": "ship", "previous": None}, 5400),
        ]
        rows = views.timeline(RUN, events)
        assert [r.offset for r in rows] == [0.01, 0.26, 0.3, 5.3, 5.4]
        assert rows[1].duration == pytest.approx(0.25) and rows[1].attempts == 3
        assert rows[1].detail == "ValueError: no"
        assert rows[2].detail == "waiting for 'go' until 2026-01-02T00:00:00Z"
        assert rows[2].payload is not None and TOKEN not in rows[2].payload.text
        assert rows[3].duration == pytest.approx(5.0) and rows[3].detail == "woken by signal"
        assert rows[4].detail == "phase — → 'ship'"
        assert [r.kind for r in rows] == ["step", "step", "paused", "wait", "phase"]

    def test_session_keys(self) -> None:
        events = [
            ev(1, "node_start", "step:session_set#1",
               {"name": "session_set", "input": {"args": ["s1", "k"], "kwargs": {}}}, 1),
            ev(2, "node_start", "step:session_get#1",
               {"name": "session_get", "input": {"args": [], "kwargs":
                                                 {"session_id": "s2", "key": "x"}}}, 2),
            ev(3, "node_start", "step:session_get#2",
               {"name": "session_get", "input": {"args": ["s1", "k"], "kwargs": {}}}, 3),
            ev(4, "node_start", "step:other#1", {"name": "other", "input": {}}, 4),
        ]
        assert views.session_keys(events) == [("s1", "k"), ("s2", "x")]


class TestWaiting:
    """Registered wakes first; the checkpoint's wait when none is registered yet."""

    def test_registered(self) -> None:
        wait = WaitRecord(run_id="r", node_id="wait:go#1", event="go", deadline=at(60_000),
                          created_at=T0)
        (one,) = views.waiting_on(RUN, [wait], T0)
        assert one.event == "go" and one.remaining == 60.0

    def test_from_checkpoint(self) -> None:
        run = RunInfo(id="r", template_id="wf", workspace_id="w", env="e", status="paused",
                      started_at=T0, checkpoint_json={"variables": {"__celestialWait": {
                          "node_id": "sleep#1", "event": None,
                          "deadline": "2026-01-01T12:01:00Z", "wake_token": TOKEN}}})
        (one,) = views.waiting_on(run, [], T0)
        assert one.node_id == "sleep#1" and one.event is None and one.remaining == 60.0


class TestFolding:
    """Small values on one line, long ones folded, huge ones cut."""

    def test_sizes(self) -> None:
        small = views.fold_json({"ok": True})
        assert small.text == '{"ok":true}' and not small.folded
        big = views.fold_json({"rows": list(range(300))})
        assert big.folded and big.summary.endswith("…") and "\n" in big.text
        huge = views.fold_json("x" * (views.MAX_JSON_CHARS + 10))
        assert huge.folded and "cut: " in huge.text

    def test_time_filters(self) -> None:
        assert views.parse_when("2h", T0) == T0 - timedelta(hours=2)
        assert views.parse_when("2026-01-01", T0) == datetime(2026, 1, 1, tzinfo=UTC)
        with pytest.raises(ValueError, match="not an ISO date/time"):
            views.parse_when("yesterday", T0)

    def test_bucket_labels(self) -> None:
        assert [views.bucket_label(k) for k in ("lt_1s", "1s_2s", "gt_30s")] == \
            ["< 1s", "1s-2s", "> 30s"]

    def test_durations(self) -> None:
        assert [views.human_duration(s) for s in (None, 0.25, 12, 245, 7380, 273600)] == \
            ["-", "250ms", "12.0s", "4m05s", "2h03m", "3d04h"]

    def test_periods(self) -> None:
        """A rate limit's period or a catch-up window in its largest whole unit."""
        assert [views.period(s) for s in (None, 60, 90, 3600, 21600, 172800, 0.25, 1.5)] == \
            ["-", "1m", "90s", "1h", "6h", "2d", "250ms", "1.5s"]
