"""``starflow start``, a worker without workflows, ``runs retry`` of a success, an empty list."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from .support import APP, Cli, Seeded


class TestStart:
    """starflow start WORKFLOW --app M --args JSON queues (or drives) a run by name."""

    def test_queued_by_name(self, cli: Cli, seeded: Seeded) -> None:
        """Positional arguments as a JSON array; the run is queued for workers."""
        result = cli("start", "cli_quick", "--app", APP, "--db", seeded.url, "--args", "[21]",
                     "--json")
        assert result.code == 0, result.err
        data = json.loads(result.out)
        assert data["status"] == "queued"
        row = json.loads(cli("runs", "show", data["run_id"], "--db", seeded.url, "--json").out)
        assert row["run"]["input"] == {"args": [21], "kwargs": {}}
        assert row["run"]["start_mode"] == "queued"

    def test_inline_with_keyword_arguments(self, cli: Cli, seeded: Seeded) -> None:
        """A JSON object is keyword arguments; --inline drives the run here."""
        result = cli("start", "cli_quick", "--app", APP, "--db", seeded.url, "--args",
                     '{"n": 4}', "--inline")
        assert result.code == 0, result.err
        assert result.out.startswith("started run ") and "now success" in result.out

    def test_unknown_workflow_and_bad_args(self, cli: Cli, seeded: Seeded) -> None:
        """Exit 2 with why, and nothing started."""
        before = json.loads(cli("runs", "list", "--db", seeded.url, "--json").out)
        line = cli.fails("start", "no_such", "--app", APP, "--db", seeded.url, code=2)
        assert "registers no workflow 'no_such'" in line and "cli_quick" in line
        line = cli.fails("start", "cli_quick", "--app", APP, "--db", seeded.url, "--args",
                         "3", code=2)
        assert "JSON array" in line
        line = cli.fails("start", "cli_quick", "--db", seeded.url, code=2)
        assert "needs --app" in line
        assert json.loads(cli("runs", "list", "--db", seeded.url, "--json").out) == before


class TestStartLater:
    """--at WHEN / --after AGE write the run now, for a worker to claim then (#30)."""

    def test_after_and_at(self, cli: Cli, seeded: Seeded) -> None:
        """The run is queued and scheduled; list and show say when it starts."""
        result = cli("start", "cli_quick", "--app", APP, "--db", seeded.url, "--args", "[1]",
                     "--after", "2h", "--json")
        assert result.code == 0, result.err
        data = json.loads(result.out)
        assert data["status"] == "queued" and data["starts_at"].endswith("Z")
        at = "2099-06-01T09:30:00+02:00"
        result = cli("start", "cli_quick", "--app", APP, "--db", seeded.url, "--args", "[2]",
                     "--at", at)
        assert result.code == 0, result.err
        assert result.out.endswith("now queued, starts at 2099-06-01T07:30:00.000Z\n")
        run_id = result.out.split()[2].rstrip(":")
        show = json.loads(cli("runs", "show", run_id, "--db", seeded.url, "--json").out)
        assert (show["run"]["claim_state"], show["run"]["starts_at"]) == (
            "scheduled", "2099-06-01T07:30:00.000Z")
        text = cli("runs", "show", run_id, "--db", seeded.url).out
        assert re.search(r"^starts at +2099-06-01T07:30:00.000Z$", text, re.M)
        listed = cli("runs", "list", "--db", seeded.url, "--status", "queued").out
        assert "queued (starts at 2099-06-01T07:30:00.000Z)" in listed

    def test_bad_start_times_start_nothing(self, cli: Cli, seeded: Seeded) -> None:
        """Exit 2 with one line saying why; nothing written."""
        before = json.loads(cli("runs", "list", "--db", seeded.url, "--json").out)
        base = ("start", "cli_quick", "--app", APP, "--db", seeded.url, "--args", "[1]")
        assert "not an ISO date/time" in cli.fails(*base, "--at", "tomorrow", code=2)
        assert "not an age like" in cli.fails(*base, "--after=-5m", code=2)
        assert "not allowed with argument" in cli.fails(*base, "--at", "2099-01-01",
                                                        "--after", "1h", code=2)
        assert "drop --inline" in cli.fails(*base, "--after", "1h", "--inline", code=2)
        line = cli.fails(*base, "--at", "2199-01-01", code=2)
        assert "from now" in line and "nothing was started" in line
        assert json.loads(cli("runs", "list", "--db", seeded.url, "--json").out) == before


class TestExplainedRefusals:
    """Commands that cannot do what was asked say why and what to do instead."""

    def test_retry_of_a_successful_run(self, cli: Cli, seeded: Seeded) -> None:
        """It names the status and what can be retried."""
        line = cli.fails("runs", "retry", seeded.done, "--app", APP, "--db", seeded.url)
        assert "'success'" in line and "only a run that ended in 'error' can be retried" in line
        assert "starflow start cli_quick" in line

    def test_no_runs_match_names_the_scope(self, cli: Cli, seeded: Seeded) -> None:
        """An empty list says which workspace and env it looked in."""
        result = cli("runs", "list", "--db", seeded.url, "--workspace", "shop")
        assert result.code == 0 and result.out == ""
        assert "no runs match in workspace 'shop', env 'prod'" in result.err

    def test_worker_without_workflows_exits_2(self, tmp_path: Path) -> None:
        """A worker whose --app module registers no workflow refuses to start."""
        (tmp_path / "empty_app.py").write_text("X = 1\n")
        db = f"sqlite:///{tmp_path / 'w.db'}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARFLOW_")}
        proc = subprocess.run([sys.executable, "-m", "starflow", "worker", "--app", "empty_app",
                               "--db", db], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env=env, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "defines no workflow" in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "w.db").exists()
