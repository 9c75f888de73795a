"""``starflow runs list/show/events/export`` and ``starflow replay``."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

from starflow import Starflow, set_attributes, workflow
from starflow.admin.history import load_history
from starflow.cli.runs import Progress, parse_since

from .support import APP, Cli, Seeded


class TestRunsList:
    """A table for people, stable JSON for scripts, and the filters."""

    def test_table(self, cli: Cli, seeded: Seeded) -> None:
        result = cli("runs", "list", "--db", seeded.url)
        assert result.code == 0, result.err
        header, *rows = result.out.splitlines()
        assert header.split() == ["ID", "WORKFLOW", "STATUS", "STARTED", "DURATION", "ERROR"]
        assert len(rows) == 4
        assert sum("paused" in r for r in rows) == 3
        # Columns are aligned: every row starts its STATUS at the header's offset.
        at = header.index("STATUS")
        assert all(r[at:].split()[0] in ("paused", "success") for r in rows)

    def test_json_keys_and_filters(self, cli: Cli, seeded: Seeded) -> None:
        result = cli("runs", "list", "--db", seeded.url, "--json")
        runs = json.loads(result.out)
        assert {r["id"] for r in runs} == {*seeded.paused, seeded.done}
        assert set(runs[0]) == {"id", "run_key", "workflow", "version", "status", "claim_state",
                                "start_mode", "runner_pool", "started_at", "starts_at",
                                "completed_at", "duration_ms", "error"}
        assert all(r["started_at"].endswith("Z") for r in runs)
        only = json.loads(cli("runs", "list", "--db", seeded.url, "--json",
                              "--status", "success").out)
        assert [r["id"] for r in only] == [seeded.done]
        assert only[0]["workflow"] == "cli_quick" and only[0]["completed_at"].endswith("Z")
        orders = json.loads(cli("runs", "list", "--db", seeded.url, "--json",
                                "--template", "cli_order", "--limit", "2").out)
        assert len(orders) == 2 and all(r["workflow"] == "cli_order" for r in orders)

    def test_since(self, cli: Cli, seeded: Seeded) -> None:
        recent = json.loads(cli("runs", "list", "--db", seeded.url, "--json",
                                "--since", "1h").out)
        assert len(recent) == 4
        future = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
        result = cli("runs", "list", "--db", seeded.url, "--since", future)
        assert result.code == 0 and result.out == "" and "no runs match" in result.err

    def test_parse_since(self) -> None:
        now = datetime(2030, 1, 2, 12, tzinfo=UTC)
        assert parse_since("2h", now) == now - timedelta(hours=2)
        assert parse_since("3d", now) == now - timedelta(days=3)
        assert parse_since("90s", now) == now - timedelta(seconds=90)
        assert parse_since("2030-01-01", now) == datetime(2030, 1, 1, tzinfo=UTC)
        assert parse_since("2030-01-01T05:00+02:00", now) == datetime(2030, 1, 1, 3,
                                                                      tzinfo=UTC)

    def test_empty_database(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'empty.db'}"
        assert cli("migrate", "--db", url).code == 0
        assert json.loads(cli("runs", "list", "--db", url, "--json").out) == []


class TestRunsShow:
    """The row's key fields and a timeline with each node's duration; no wake token."""

    def test_paused_run(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[0]
        result = cli("runs", "show", run_id, "--db", seeded.url)
        assert result.code == 0, result.err
        out = result.out
        assert f"run          {run_id}" in out
        assert "cli_order v1" in out and "paused" in out
        assert "waiting on   approval at wait:approval#1" in out
        timeline = out[out.index("timeline"):].splitlines()
        assert timeline[1].split() == ["OFFSET", "EVENT", "NODE", "TOOK"]
        events = [line.split() for line in timeline[2:]]
        assert [e[1] for e in events] == ["node_start", "node_complete", "run_paused"]
        assert all(e[0].startswith("+") for e in events)
        assert events[1][2] == "step:cli_charge#1"
        assert events[1][3].endswith("s")  # the step's duration
        assert seeded.tokens[run_id] not in out

    def test_json_timeline_durations(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[1]
        assert cli("signal", run_id, "approval", "--payload", '{"ok": true}', "--db",
                   seeded.url, "--app", APP).code == 0
        data = json.loads(cli("runs", "show", run_id, "--db", seeded.url, "--json").out)
        assert set(data) == {"run", "timeline", "attempts", "phases", "children"}
        assert data["run"]["status"] == "success"
        assert data["run"]["result"] == {"ok": True, "receipt": "receipt-o-1"}
        by_node = {(r["event_type"], r["node_id"]): r for r in data["timeline"]}
        wait = by_node[("node_complete", "wait:approval#1")]
        assert wait["duration_ms"] is not None and wait["duration_ms"] >= 0
        assert data["timeline"][0]["offset_ms"] >= 0
        assert all(r["at"].endswith("Z") for r in data["timeline"])

    def test_checkpoint_token_never_shown(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[2]
        out = cli("runs", "show", run_id, "--db", seeded.url, "--json").out
        assert seeded.tokens[run_id] not in out
        assert json.loads(out)["run"]["waiting"] == {"node_id": "wait:approval#1",
                                                     "event": "approval", "deadline": None}

    def test_failed_run_shows_its_cause_and_traceback(self, cli: Cli, tmp_path: Path) -> None:
        """A failed run's recorded failure: its cause, and the traceback of the raise."""
        from . import cli_app

        url = f"sqlite:///{tmp_path / 'failed.db'}"

        async def fail() -> str:
            async with Starflow.open(url, maintenance=False) as sf:
                return (await sf.run(cli_app.cli_flaky, "o-1")).run_id

        run_id = anyio.run(fail)
        result = cli("runs", "show", run_id, "--db", url)
        assert result.code == 0, result.err
        assert "cause" in result.out and "RuntimeError: a bug in the workflow body" in result.out
        assert "traceback:\nTraceback (most recent call last):" in result.out
        assert "in cli_flaky" in result.out
        data = json.loads(cli("runs", "show", run_id, "--db", url, "--json").out)
        assert data["run"]["failure"]["type"] == "RuntimeError"
        assert "in cli_flaky" in data["run"]["failure"]["traceback"]

    def test_children_are_listed(self, cli: Cli, tmp_path: Path) -> None:
        """A parent's child runs (attached and detached), and a child's parent."""
        from starflow_testing import WorkflowEnvironment

        from . import cli_app

        url = f"sqlite:///{tmp_path / 'family.db'}"

        async def family() -> tuple[str, list[str]]:
            async with WorkflowEnvironment(adapter=url, patch_time=False) as env:
                handle = await env.start(cli_app.cli_parent, 4)
                assert await env.result(handle) == 8
                await env.run_until_idle()
                kids = await env.list_runs(parent_run_id=handle.run_id)
                return handle.run_id, [k.id for k in kids]

        parent, kids = anyio.run(family)
        assert len(kids) == 2
        result = cli("runs", "show", parent, "--db", url)
        assert result.code == 0, result.err
        assert "children (2):" in result.out
        assert all(k in result.out for k in kids)
        data = json.loads(cli("runs", "show", parent, "--db", url, "--json").out)
        assert sorted(c["run_id"] for c in data["children"]) == sorted(kids)
        assert sorted(c["detached"] for c in data["children"]) == [False, True]
        assert {c["status"] for c in data["children"]} == {"success"}
        child = cli("runs", "show", kids[0], "--db", url)
        assert f"parent       {parent}" in child.out
        listed = json.loads(cli("runs", "list", "--db", url, "--json", "--parent", parent).out)
        assert sorted(r["id"] for r in listed) == sorted(kids)  # the children, not the parent
        leaf = cli("runs", "list", "--db", url, "--parent", kids[0])  # a child has none
        assert leaf.code == 0 and "no runs match" in leaf.err

    def test_attempts_input_result_and_phases(self, cli: Cli, tmp_path: Path) -> None:
        """A step that took three attempts: both failed attempts, the input, result, phase."""
        from . import cli_app

        url = f"sqlite:///{tmp_path / 'retried.db'}"
        cli_app.GATEWAY_FAILS["left"] = 2

        async def retried() -> str:
            async with Starflow.open(url, maintenance=False) as sf:
                return (await sf.run(cli_app.cli_retrying, "o-7")).run_id

        run_id = anyio.run(retried)
        result = cli("runs", "show", run_id, "--db", url)
        assert result.code == 0, result.err
        out = result.out
        assert 'input        {"args":["o-7"],"kwargs":{}}' in out
        assert 'result       "paid-o-7"' in out
        assert "phase        paying" in out
        section = out[out.index("failed attempts (2):"):out.index("timeline")].splitlines()
        assert section[1].split()[:2] == ["NODE", "ATTEMPT"]
        assert section[2].split()[:2] == ["step:cli_gateway#1", "1"]
        assert section[3].split()[:2] == ["step:cli_gateway#1", "2"]
        assert "builtins.ConnectionError: gateway down for o-7" in section[2]
        assert section[2].rstrip().endswith("0.000s")
        assert "phases (1):" in out
        data = json.loads(cli("runs", "show", run_id, "--db", url, "--json").out)
        assert [(a["attempt"], a["retry_in_ms"]) for a in data["attempts"]] == [(1, 0), (2, 0)]
        assert [p["phase"] for p in data["phases"]] == ["paying"]

    def test_unknown_run(self, cli: Cli, seeded: Seeded) -> None:
        line = cli.fails("runs", "show", "no-such-run", "--db", seeded.url)
        assert "RunNotFound" in line and "no-such-run" in line and "check the id" in line


class TestRunsEvents:
    """Every event in order, payloads with wake tokens redacted."""

    def test_table_and_json(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[0]
        table = cli("runs", "events", run_id, "--db", seeded.url)
        assert table.code == 0
        assert table.out.splitlines()[0].split() == ["ID", "AT", "EVENT", "NODE", "PAYLOAD"]
        events = json.loads(cli("runs", "events", run_id, "--db", seeded.url, "--json").out)
        assert [e["event_type"] for e in events] == ["node_start", "node_complete",
                                                    "run_paused"]
        assert set(events[0]) == {"id", "run_id", "event_type", "node_id", "created_at",
                                  "payload"}
        assert events[2]["payload"]["wake_token"] == "[redacted]"
        for out in (table.out, json.dumps(events)):
            assert seeded.tokens[run_id] not in out


class TestExportAndReplay:
    """Exports load in the Replayer; `replay` is a pre-deploy determinism check."""

    def test_export_one_to_stdout(self, cli: Cli, seeded: Seeded) -> None:
        run_id = seeded.paused[0]
        result = cli("runs", "export", run_id, "--db", seeded.url)
        assert result.code == 0, result.err
        history = load_history(result.out)
        assert history.run_id == run_id and len(history.events) == 3
        assert seeded.tokens[run_id] not in result.out
        assert history.events[-1].payload_json["wake_token"] == "[redacted]"

    def test_export_by_upper_case_id(self, cli: Cli, seeded: Seeded) -> None:
        """An id pasted in upper case exports the run with its whole history (SQLite
        stores ids lowercase)."""
        run_id = seeded.paused[0]
        result = cli("runs", "export", run_id.upper(), "--db", seeded.url)
        assert result.code == 0, result.err
        history = load_history(result.out)
        assert history.run_id == run_id and len(history.events) == 3

    def test_export_all_then_replay(self, cli: Cli, seeded: Seeded, tmp_path: Path) -> None:
        target = tmp_path / "histories.json"
        result = cli("runs", "export", "--all", "--db", seeded.url, "-o", str(target))
        assert result.code == 0, result.err
        assert result.err.strip() == f"exported 4 run(s) to {target}"
        exported = json.loads(target.read_text())
        assert isinstance(exported, list) and len(exported) == 4
        assert {load_history(h).run_id for h in exported} == {*seeded.paused, seeded.done}
        replay = cli("replay", str(target), "--app", APP)
        assert replay.code == 0, replay.err
        assert ("3 run(s) that can still replay replay cleanly (1 ended run(s) checked apart)"
                in replay.err)
        rows = json.loads(cli("replay", str(target), "--app", APP, "--json").out)
        assert all(r["ok"] for r in rows)
        assert {r["outcome"] for r in rows} == {"paused", "success"}

    def test_export_filters(self, cli: Cli, seeded: Seeded, tmp_path: Path) -> None:
        target = tmp_path / "paused.json"
        assert cli("runs", "export", "--all", "--status", "paused", "--template", "cli_order",
                   "--db", seeded.url, "-o", str(target)).code == 0
        assert {h["run"]["id"] for h in json.loads(target.read_text())} == set(seeded.paused)

    def test_replay_detects_nondeterminism(self, cli: Cli, seeded: Seeded,
                                           tmp_path: Path) -> None:
        """A history whose step was called with other arguments than the code calls now."""
        run_id = seeded.paused[0]
        history = json.loads(cli("runs", "export", run_id, "--db", seeded.url).out)
        for event in history["events"]:
            if event["event_type"] == "node_start":
                event["payload_json"]["args_hash"] = "0000000000000000"
        target = tmp_path / "changed.json"
        target.write_text(json.dumps(history))
        result = cli("replay", str(target), "--app", APP)
        assert result.code == 1
        assert "nondeterminism" in result.out and "NonDeterminismError" in result.out
        assert result.err.strip().splitlines()[-1].startswith(
            "starflow: 1 of 1 run(s) that can still replay would fail on this code "
            "(1 non-deterministic)")

    def test_ended_runs_are_reported_apart(self, cli: Cli, seeded: Seeded,
                                           tmp_path: Path) -> None:
        """A finished run that would not replay is listed as ended and fails nothing."""
        exported = json.loads(cli("runs", "export", "--all", "--db", seeded.url).out)
        for history in exported:
            if history["run"]["id"] == seeded.done:
                history["run"]["workflow_version"] = 99  # a version this code no longer has
        target = tmp_path / "all.json"
        target.write_text(json.dumps(exported))
        result = cli("replay", str(target), "--app", APP)
        assert result.code == 0, result.err
        row = next(line for line in result.out.splitlines() if seeded.done in line)
        assert row.split()[2:] == ["success", "failed", "no", "(ended)"]
        assert "1 ended run(s) (success or cancelled) would not replay" in result.err
        assert "3 run(s) that can still replay replay cleanly" in result.err
        rows = json.loads(cli("replay", str(target), "--app", APP, "--json").out)
        done = next(r for r in rows if r["run_id"] == seeded.done)
        assert (done["ended"], done["ok"], done["status"]) == (True, False, "success")
        assert all(not r["ended"] and r["ok"] for r in rows if r["run_id"] != seeded.done)

    def test_unknown_run_writes_no_file(self, cli: Cli, seeded: Seeded, tmp_path: Path) -> None:
        target = tmp_path / "out.json"
        line = cli.fails("runs", "export", seeded.paused[0], "nope", "--db", seeded.url,
                         "-o", str(target))
        assert "RunNotFound" in line
        assert not target.exists()

    def test_progress_on_a_terminal_only(self) -> None:
        class Tty(io.StringIO):
            def isatty(self) -> bool:
                return True

        tty, pipe = Tty(), io.StringIO()
        for stream in (tty, pipe):
            progress = Progress("exporting", 3, stream)
            for _ in range(3):
                progress.step()
            progress.close()
        assert tty.getvalue().endswith("] 3/3\n") and "\r" in tty.getvalue()
        assert pipe.getvalue() == ""

    def test_bad_replay_input(self, cli: Cli, tmp_path: Path) -> None:
        assert "needs --app" in cli.fails("replay", "x.json", code=2)
        assert "cannot read" in cli.fails("replay", str(tmp_path / "missing.json"),
                                          "--app", APP, code=2)
        bad = tmp_path / "bad.json"
        bad.write_text("{not json")
        assert "not valid JSON" in cli.fails("replay", str(bad), "--app", APP)
        other = tmp_path / "other.json"
        other.write_text('{"hello": 1}')
        assert "not a starflow run history" in cli.fails("replay", str(other), "--app",
                                                         APP)

    def test_export_usage(self, cli: Cli, seeded: Seeded) -> None:
        assert "not both or neither" in cli.fails("runs", "export", "--db", seeded.url, code=2)
        assert "go with --all" in cli.fails("runs", "export", seeded.done, "--status",
                                            "success", "--db", seeded.url, code=2)


async def _statuses(url: str) -> dict[str, str]:
    async with Starflow.open(url, maintenance=False) as sf:
        return {r.id: r.status for r in await sf.list_runs(limit=100)}


def test_reads_write_nothing(cli: Cli, seeded: Seeded) -> None:
    """list/show/events/export leave the runs as they were."""
    before = anyio.run(_statuses, seeded.url)
    for args in (["runs", "list"], ["runs", "show", seeded.paused[0]],
                 ["runs", "events", seeded.paused[0]], ["runs", "export", "--all"]):
        assert cli(*args, "--db", seeded.url).code == 0
    assert anyio.run(_statuses, seeded.url) == before


@workflow(name="cli_tagged", version=1)
async def cli_tagged(customer: str) -> str:
    set_attributes(customer=customer)
    return customer


class TestRunsListByAttribute:
    """`starflow runs list --attr key=value` filters by starflow.set_attributes."""

    def test_attr_filter(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'attrs.db'}"

        async def seed_tagged() -> list[str]:
            async with Starflow.open(url, maintenance=False) as sf:
                return [(await sf.run(cli_tagged, c)).run_id for c in ("c-42", "c-7")]

        first, _ = anyio.run(seed_tagged)
        found = json.loads(cli("runs", "list", "--db", url, "--json",
                               "--attr", "customer=c-42").out)
        assert [r["id"] for r in found] == [first]
        none = cli("runs", "list", "--db", url, "--attr", "customer=nobody")
        assert none.code == 0 and "no runs match" in none.err
        assert "KEY=VALUE" in cli.fails("runs", "list", "--db", url, "--attr", "customer",
                                        code=2)
