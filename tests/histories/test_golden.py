"""Golden histories: the stored format of a run's history is pinned (#31).

``tests/histories/*.json`` were recorded once, by ``python -m
tests.histories.record``, from the scenarios in :mod:`tests.histories.scenarios`
(retries and a failure, wait_for + signal, sleep, wait_for_any, a child
workflow, events and streams, continue_as_new, an update, patched(), cancel
with cleanup). On every run of the suite:

- each recorded file replays cleanly against the current code, through the
  product's :class:`~starflow.admin.replayer.Replayer` and through ``starflow
  replay`` (what a user runs before a deploy): histories written by an older
  version must keep replaying;
- each scenario runs again on the memory adapter, and its new export equals
  the recorded one once run ids, event ids, timestamps and tracebacks are
  normalised: a change to event types, node ids, payload keys or the export
  layout (starflow/admin/history.py) fails here, and is made on purpose by
  re-recording (tests/histories/README.md).
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from starflow.admin.history import HISTORY_FORMAT
from starflow_testing import Replayer

from .record import HERE, ROOT, dump, path_of
from .scenarios import SCENARIOS, WORKFLOWS, record

NAMES = sorted(SCENARIOS)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: How every timestamp of an export is written (msgspec's encoding of a UTC datetime).
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
#: What the replay of each scenario's runs ends with, in file order.
REPLAY_OUTCOMES: dict[str, list[str]] = {
    "retries_and_failure": ["error"],
    "wait_for_signal": ["success"],
    "sleep": ["success"],
    "wait_for_any": ["success"],
    "child_workflow": ["success", "success"],
    "events_and_streams": ["success"],
    "continue_as_new": ["success", "success"],
    "update": ["success"],
    "patched": ["success"],
    "cancel_with_cleanup": ["error"],
}


def load(name: str) -> list[dict[str, Any]]:
    """The recorded histories of scenario ``name``."""
    data: list[dict[str, Any]] = json.loads(path_of(name).read_text(encoding="utf-8"))
    return data


def normalise(histories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What must not change between two recordings of one scenario.

    Ids are replaced by their order of first appearance (``<id-1>``, ...), event
    ids by their position in the run (after checking they increase), timestamps
    by ``<ts>`` (after checking their format), tracebacks by ``<traceback>``
    (they name lines of the library). Everything else is kept as exported.
    """
    ids: dict[str, str] = {}

    def name_id(match: re.Match[str]) -> str:
        return ids.setdefault(match.group(0), f"<id-{len(ids) + 1}>")

    def walk(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            if key == "traceback":
                assert value.startswith("Traceback (most recent call last):"), value
                return "<traceback>"
            if TIMESTAMP.match(value):
                datetime.fromisoformat(value)  # a real instant, not just its shape
                return "<ts>"
            return UUID.sub(name_id, value)
        return value

    out = []
    for history in histories:
        event_ids = [e["id"] for e in history["events"]]
        assert event_ids == sorted(set(event_ids)), f"event ids not increasing: {event_ids}"
        renumbered = {**history, "events": [{**e, "id": i}
                                            for i, e in enumerate(history["events"], 1)]}
        out.append(walk(renumbered))
    return out


def _diff(recorded: Any, now: Any) -> str:
    return "".join(difflib.unified_diff(
        dump(recorded).splitlines(keepends=True), dump(now).splitlines(keepends=True),
        "recorded", "current code", n=2))


class TestGoldenFiles:
    """The set of files is the set of scenarios, each an export of this format."""

    def test_one_file_per_scenario(self) -> None:
        """No scenario without its recording, no stale file without its scenario."""
        assert sorted(p.stem for p in HERE.glob("*.json")) == NAMES
        assert sorted(REPLAY_OUTCOMES) == NAMES

    @pytest.mark.parametrize("name", NAMES)
    def test_recorded_in_the_current_format(self, name: str) -> None:
        """Every history carries the export format this code writes and reads."""
        histories = load(name)
        assert len(histories) == len(REPLAY_OUTCOMES[name])
        assert {h["format"] for h in histories} == {HISTORY_FORMAT}


class TestReplay:
    """Recorded histories replay cleanly against the current workflow code."""

    @pytest.mark.parametrize("name", NAMES)
    async def test_replayer(self, name: str) -> None:
        """Replayer.replay_histories: every run ok, stopping where it recorded it ended."""
        results = await Replayer(workflows=WORKFLOWS).replay_histories(load(name))
        assert [(r.ok, r.error) for r in results] == [(True, None)] * len(results)
        assert [r.outcome for r in results] == REPLAY_OUTCOMES[name]

    def test_starflow_replay_cli(self, tmp_path: Path) -> None:
        """``starflow replay --app tests.histories.scenarios`` passes over every file."""
        everything = [h for name in NAMES for h in load(name)]
        export = tmp_path / "golden.json"
        export.write_text(json.dumps(everything), encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-m", "starflow", "replay", "--app", "tests.histories.scenarios",
             "--json", str(export)],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = json.loads(proc.stdout)
        assert [(r["run_id"], r["ok"], r["outcome"]) for r in rows] == [
            (h["run"]["id"], True, outcome)
            for name in NAMES
            for h, outcome in zip(load(name), REPLAY_OUTCOMES[name], strict=True)]


class TestSameHistoryToday:
    """The current code writes the recorded history again, to the normalised byte."""

    @pytest.mark.parametrize("name", NAMES)
    async def test_rerun_matches_recording(self, name: str) -> None:
        """Scenario re-run on memory == recording (ids, times, tracebacks aside)."""
        recorded = normalise(load(name))
        now = normalise(await record(name))
        assert now == recorded, (
            f"the history of scenario {name!r} changed: if the stored format is meant to "
            "change, re-record (python -m tests.histories.record " + name + ") and say so "
            "in the CHANGELOG\n" + _diff(recorded, now))


class TestNormalise:
    """The comparison keeps what it pins: the normaliser cannot hide a format change."""

    def test_keeps_event_types_node_ids_and_payload_keys(self) -> None:
        """A renamed event type, node id or payload key still differs after normalising."""
        [history] = load("wait_for_signal")
        base = normalise([history])
        event = history["events"][0]
        for changed in ({**event, "event_type": event["event_type"] + "x"},
                        {**event, "node_id": str(event["node_id"]).replace("#", "/")},
                        {**event, "payload_json": {"renamed": event["payload_json"]}}):
            other = {**history, "events": [changed, *history["events"][1:]]}
            assert normalise([other]) != base

    def test_ids_map_in_order_of_appearance(self) -> None:
        """Two recordings with different uuids normalise alike; a swapped link does not."""
        a, b = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
        one = [{"run": {"id": a, "continued_as": b}, "events": []}]
        two = [{"run": {"id": b, "continued_as": a}, "events": []}]
        loop = [{"run": {"id": a, "continued_as": a}, "events": []}]
        assert normalise(one) == normalise(two)
        assert normalise(one) != normalise(loop)
