"""``starflow copy``: runs move between SQLite and PostgreSQL and resume there.

The end-to-end test builds runs in every state on SQLite, copies them to
PostgreSQL, then drives both databases the same way (signals, timers on the
fake clock, the old wake tokens) and compares what every run ends with.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import starflow
from starflow import CopyRefused, Starflow, WaitTimeout, session_get, session_set, step, workflow
from starflow.admin.copy import CopyOptions, CopyReport, copy_database
from starflow_testing import WorkflowEnvironment
from tests.conftest import POSTGRES_URL, require_postgres

pytestmark = pytest.mark.anyio

#: Runs per kind in the end-to-end test (seven kinds, queued included): 7 x 143
#: = 1,001 runs, the issue's 1,000. The test is marked slow (it runs in the full
#: suite and in CI; about 90 s on a loaded 2-core machine) with its own timeout.
PER_KIND = int(os.environ.get("STARFLOW_COPY_TEST_PER_KIND", "143"))
TOKENS: dict[str, str] = {}
KEEP_FOR = timedelta(days=9)


class Boom(Exception):
    pass


@step
async def prepare(n: int) -> int:
    return n * 2


@step
async def issue_token(n: int) -> str:
    token = starflow.wake_token("callback", timeout=timedelta(days=3))
    TOKENS[str(n)] = token
    return token


@step(retry=starflow.RetryPolicy(max_attempts=1))
async def explode(n: int) -> None:
    raise Boom(f"boom {n}")


@workflow(name="copy_approval")
async def approval(n: int) -> dict[str, Any]:
    starflow.set_attributes(customer=f"c-{n}")
    starflow.set_event("stage", "prepared")
    starflow.write_stream("log", {"n": n})
    starflow.write_stream("log", "waiting")
    doubled = await prepare(n)
    # A TTL from the run's own clock: its history replays in the target too.
    await session_set(f"s-{n}", "seen", {"n": n}, keep_until=starflow.now() + KEEP_FOR)
    decision = await starflow.wait_for("approve")
    return {"n": doubled, "decision": decision, "var": await session_get(f"s-{n}", "seen")}


@workflow(name="copy_sleeper")
async def sleeper(n: int) -> str:
    await prepare(n)
    await starflow.sleep(timedelta(hours=1))
    return f"slept {n}"


@workflow(name="copy_timeout")
async def with_timeout(n: int) -> str:
    try:
        got = await starflow.wait_for("never", timeout=timedelta(hours=2))
    except WaitTimeout:
        return f"timed out {n}"
    return f"got {got}"


@workflow(name="copy_token")
async def token_wait(n: int) -> Any:
    await issue_token(n)
    return await starflow.wait_for("callback", timeout=timedelta(days=3))


@workflow(name="copy_failing")
async def failing(n: int) -> None:
    await prepare(n)
    await explode(n)


@workflow(name="copy_done")
async def done(n: int) -> int:
    return await prepare(n) + 1


async def build(url: str, workspace: str) -> tuple[dict[str, tuple[str, int]], Any]:
    """Runs of every kind on ``url``; returns run id → (kind, n) and the fake time."""
    made: dict[str, tuple[str, int]] = {}
    async with WorkflowEnvironment(url, workspace_id=workspace, pools=(None,)) as env:
        for n in range(PER_KIND):
            for kind, wf in (("approval", approval), ("sleeper", sleeper),
                             ("timeout", with_timeout), ("token", token_wait),
                             ("failing", failing), ("done", done)):
                handle = await env.app.run(wf, n) if kind != "done" else await env.run(wf, n)
                made[handle.run_id] = (kind, n)
            # Queued: a pool nobody serves until the drive.
            queued = await env.app.options(pool="later").start(done, 1000 + n)
            made[queued.run_id] = ("queued", 1000 + n)
        await env.app.schedule("nightly", done, 7, cron="0 3 * * *", timezone="Europe/Paris")
        await env.app.schedule("paused", done, 8, cron="*/5 * * * *")
        await env.app.pause_schedule("paused")
        await env.app.set_pool_limits("later", concurrency=4,
                                      rate_limit=(100, timedelta(minutes=1)))
        return made, env.now()


async def drive(url: str, workspace: str, made: dict[str, tuple[str, int]], start: Any
                ) -> dict[str, Any]:
    """Signal, resume with the old tokens, fire the timers; every run's outcome."""
    out: dict[str, Any] = {}
    async with WorkflowEnvironment(url, workspace_id=workspace, pools=(None, "later"),
                                   start=start) as env:
        for run_id, (kind, n) in sorted(made.items()):
            if kind == "approval":
                await env.signal(run_id, "approve", {"ok": n % 2 == 0})
            elif kind == "token":
                await env.resume(TOKENS[str(n)], {"called": n})
        await env.advance(timedelta(hours=3))
        for run_id in sorted(made):
            info = await env.get_run(run_id)
            assert info is not None
            events = [(e.event_type, e.node_id, e.payload) for e in await env.events(run_id)]
            out[run_id] = (info.status, info.result_json, info.error, events)
    return out


async def _pg_table_rows(workspace: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM workflow_runs WHERE workspace_id = $1", workspace))
    finally:
        await conn.close()


@pytest.fixture
def workspace() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def tokens() -> Iterator[None]:
    TOKENS.clear()
    yield
    TOKENS.clear()


class TestSQLiteToPostgres:
    """Runs in every state copied to PostgreSQL finish there exactly as on SQLite."""

    @pytest.mark.slow
    @pytest.mark.timeout(900)
    async def test_every_state_resumes_identically(self, tmp_path: Path, workspace: str,
                                                   tokens: None) -> None:
        """Signals, timers and old wake tokens drive copies and control alike."""
        require_postgres()
        src = f"sqlite:///{tmp_path / 'app.db'}"
        made, now = await build(src, workspace)
        options = CopyOptions(source=src, target=POSTGRES_URL, workspace_id=workspace,
                              env="prod")
        report = await copy_database(options)
        assert report.ok, (report.conflicts[:3], report.mismatches[:3])
        assert report.runs == len(made) == 7 * PER_KIND
        assert report.verified == len(made)
        for table in ("workflow_runs", "workflow_run_events", "workflow_waits",
                      "workflow_session_vars", "starflow_keys", "workflow_definitions"):
            assert report.rows_per_table.get(table), table
        assert report.rows_per_table["starflow_schedules"] == 2
        assert report.rows_per_table["starflow_pool_limits"] == 1
        assert report.rows_per_table["workflow_run_attributes"] == PER_KIND
        assert report.rows_per_table["workflow_event_values"] == PER_KIND
        assert report.rows_per_table["workflow_stream_items"] == 2 * PER_KIND
        async with Starflow.open(POSTGRES_URL, workspace_id=workspace) as copied:
            some = next(r for r, (kind, _n) in made.items() if kind == "approval")
            assert await copied.get_event(some, "stage", timeout=0) == "prepared"
            items = await copied.adapter.list_stream_items(some)
            assert [(i.seq, i.node_id) for i in items] == [(1, "stream:log#1"),
                                                          (2, "stream:log#2")]
        # Idempotent: a second copy writes nothing and verifies the same.
        again = await copy_database(options)
        assert again.ok and again.rows_written == 0 and again.verified == len(made)
        assert again.runs_present == len(made)

        on_pg = await drive(POSTGRES_URL, workspace, made, now)
        on_sqlite = await drive(src, workspace, made, now)
        assert on_pg == on_sqlite
        statuses = {kind: set() for kind, _ in made.values()}  # type: dict[str, set[str]]
        for run_id, (kind, _n) in made.items():
            statuses[kind].add(on_pg[run_id][0])
        assert statuses == {"approval": {"success"}, "sleeper": {"success"},
                            "timeout": {"success"}, "token": {"success"},
                            "failing": {"error"}, "done": {"success"}, "queued": {"success"}}


class TestRefusalsAndConflicts:
    """A live lease refuses the copy; a differing row is a conflict; nothing is written."""

    async def test_live_lease_refuses(self, tmp_path: Path, workspace: str,
                                      tokens: None) -> None:
        """The refusal names the leased run and the target gets no run."""
        require_postgres()
        path = tmp_path / "app.db"
        made, _now = await build_small(f"sqlite:///{path}", workspace)
        leased = next(iter(made))
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE workflow_runs SET leased_by = 'w1', "
                         "lease_until = '2999-01-01T00:00:00.000000Z' WHERE id = ?", (leased,))
        with pytest.raises(CopyRefused) as caught:
            await copy_database(CopyOptions(source=f"sqlite:///{path}", target=POSTGRES_URL,
                                            workspace_id=workspace, env="prod"))
        assert caught.value.run_ids == (leased,)
        assert leased in str(caught.value) and "--wait" in str(caught.value)
        assert await _pg_table_rows(workspace) == 0

    async def test_wait_copies_once_the_lease_ends(self, tmp_path: Path, tokens: None) -> None:
        """With wait=True the copy polls on its clock until the lease has expired."""
        from starflow.clock import format_ts
        from starflow_testing import FakeClock

        src, dst = tmp_path / "a.db", tmp_path / "b.db"
        made, now = await build_small(f"sqlite:///{src}", "celestial")
        leased = min(made)
        clock = FakeClock(now)
        with closing(sqlite3.connect(src)) as conn, conn:
            conn.execute("UPDATE workflow_runs SET leased_by = 'w1', lease_until = ? "
                         "WHERE id = ?", (format_ts(now + timedelta(seconds=30)), leased))
        statuses: list[str] = []
        reports: list[CopyReport] = []
        waiting = anyio.Event()

        def status(message: str) -> None:
            statuses.append(message)
            if "waiting" in message:
                waiting.set()

        async def copy() -> None:
            reports.append(await copy_database(
                CopyOptions(source=f"sqlite:///{src}", target=f"sqlite:///{dst}",
                            all_tenants=True, wait=True, wait_poll=10.0),
                clock=clock, on_status=status))

        async with anyio.create_task_group() as tg:
            tg.start_soon(copy)
            await waiting.wait()
            assert not reports
            await clock.advance(timedelta(seconds=40))
        assert reports[0].ok and reports[0].verified == len(made)
        assert leased in next(s for s in statuses if "waiting" in s)

    async def test_conflict_reported_and_run_not_written(self, tmp_path: Path,
                                                         tokens: None) -> None:
        """A run that differs in the target is reported by id; none of its rows is written."""
        src, dst = tmp_path / "a.db", tmp_path / "b.db"
        made, _now = await build_small(f"sqlite:///{src}", "celestial")
        first = await copy_database(CopyOptions(source=f"sqlite:///{src}",
                                                target=f"sqlite:///{dst}", all_tenants=True))
        assert first.ok
        victim, other = sorted(made)[:2]
        with closing(sqlite3.connect(dst)) as conn, conn:
            conn.execute("UPDATE workflow_runs SET status = 'tampered' WHERE id = ?", (victim,))
            conn.execute("DELETE FROM workflow_run_events WHERE run_id IN (?, ?)",
                         (victim, other))
        report = await copy_database(CopyOptions(source=f"sqlite:///{src}",
                                                 target=f"sqlite:///{dst}", all_tenants=True))
        assert not report.ok
        assert [c.run_id for c in report.conflicts] == [victim]
        assert "status" in report.conflicts[0].reason
        with closing(sqlite3.connect(dst)) as conn, conn:
            assert conn.execute("SELECT count(*) FROM workflow_run_events WHERE run_id = ?",
                                (victim,)).fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM workflow_run_events WHERE run_id = ?",
                                (other,)).fetchone()[0] > 0
        assert [m.run_id for m in report.mismatches] == [victim]

    async def test_unknown_table_is_an_error_before_writing(self, tmp_path: Path,
                                                             tokens: None) -> None:
        """A table copy does not know stops it, naming the table; no target is created."""
        src, dst = tmp_path / "a.db", tmp_path / "b.db"
        await build_small(f"sqlite:///{src}", "celestial")
        with closing(sqlite3.connect(src)) as conn, conn:
            conn.execute("CREATE TABLE mystery (id INTEGER)")
        with pytest.raises(starflow.ConfigError, match="mystery"):
            await copy_database(CopyOptions(source=f"sqlite:///{src}",
                                            target=f"sqlite:///{dst}", all_tenants=True))
        assert not dst.exists()


async def build_small(url: str, workspace: str) -> tuple[dict[str, tuple[str, int]], Any]:
    made: dict[str, tuple[str, int]] = {}
    async with WorkflowEnvironment(url, workspace_id=workspace) as env:
        for n in range(3):
            made[(await env.app.run(approval, n)).run_id] = ("approval", n)
            made[(await env.run(done, n)).run_id] = ("done", n)
        await env.app.schedule("hourly", done, 9, cron="0 * * * *")
        await env.app.pause_schedule("hourly")
        return made, env.now()


class TestRowLevelSecurity:
    """A role Row Level Security applies to copies its tenant, and never "nothing"."""

    async def test_rls_role_copies_its_tenant_and_is_refused_all_tenants(
            self, tmp_path: Path, workspace: str, tokens: None) -> None:
        """--all-tenants would see no rows: refused; --workspace sees the tenant's runs."""
        require_postgres()
        from urllib.parse import urlsplit, urlunsplit

        from tests.conftest import POOLER_RLS_ROLE, ensure_pooler_rls_role

        ensure_pooler_rls_role()
        made, _ = await build_small(POSTGRES_URL, workspace)
        parts = urlsplit(POSTGRES_URL)
        host = parts.netloc.split("@", 1)[-1]
        as_role = urlunsplit(parts._replace(netloc=f"{POOLER_RLS_ROLE}@{host}"))
        dst = tmp_path / "mine.db"
        with pytest.raises(starflow.ConfigError, match="Row Level Security"):
            await copy_database(CopyOptions(source=as_role, target=f"sqlite:///{dst}",
                                            all_tenants=True))
        report = await copy_database(CopyOptions(source=as_role, target=f"sqlite:///{dst}",
                                                 workspace_id=workspace, env="prod"))
        assert report.ok and report.verified == len(made) == report.runs


class TestInterruptedAndReverse:
    """A SIGKILLed copy completes on a second run; PostgreSQL copies back to SQLite."""

    @pytest.mark.slow  # SIGKILLs a real copy
    async def test_sigkill_then_rerun(self, tmp_path: Path, workspace: str,
                                      tokens: None) -> None:
        """The re-run verifies every run, as an uninterrupted copy does."""
        require_postgres()
        src = f"sqlite:///{tmp_path / 'app.db'}"
        made, _now = await build(src, workspace)
        argv = [sys.executable, "-m", "starflow", "copy", "--from", src, "--to", POSTGRES_URL,
                "--workspace", workspace, "--env", "prod", "--batch", "5"]
        proc = await anyio.open_process(argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        # Kill once some runs are in the target, not all (real time: a real process).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            copied = await _pg_table_rows(workspace)
            if copied >= 10 or proc.returncode is not None:
                break
            await anyio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        partial = await _pg_table_rows(workspace)
        assert 0 < partial < len(made), partial
        result = await anyio.run_process([*argv, "--json"], check=False)
        assert result.returncode == 0, result.stderr.decode()
        summary = json.loads(result.stdout)
        assert summary["ok"] and summary["verified"] == len(made)
        assert summary["runs_present"] >= partial - 5  # the killed batch may be whole or not
        assert await _pg_table_rows(workspace) == len(made)

    async def test_postgres_to_sqlite_and_single_run(self, tmp_path: Path, workspace: str,
                                                     tokens: None) -> None:
        """The reverse copy resumes on SQLite; --run pulls one run into a fresh file."""
        require_postgres()
        made, now = await build_small(POSTGRES_URL, workspace)
        dst = f"sqlite:///{tmp_path / 'local.db'}"
        report = await copy_database(CopyOptions(source=POSTGRES_URL, target=dst,
                                                 workspace_id=workspace, env="prod"))
        assert report.ok and report.verified == len(made)
        assert report.rows_per_table["starflow_schedules"] == 1
        again = await copy_database(CopyOptions(source=POSTGRES_URL, target=dst,
                                                workspace_id=workspace, env="prod"))
        assert again.ok and again.rows_written == 0
        async with WorkflowEnvironment(dst, workspace_id=workspace) as env:
            assert [(s.id, s.paused) for s in await env.app.schedules()] == [("hourly", True)]
        on_sqlite = await drive(dst, workspace, made, now)
        on_pg = await drive(POSTGRES_URL, workspace, made, now)
        assert on_sqlite == on_pg
        one = sorted(made)[0]
        single = tmp_path / "one.db"
        report = await copy_database(CopyOptions(source=POSTGRES_URL,
                                                 target=f"sqlite:///{single}", run_id=one))
        assert report.ok and report.runs == 1 and report.verified == 1
        with closing(sqlite3.connect(single)) as conn, conn:
            assert conn.execute("SELECT id FROM workflow_runs").fetchall() == [(one,)]
            assert conn.execute("SELECT count(*) FROM starflow_keys").fetchone()[0] >= 1


def check_report_shape(report: CopyReport) -> None:
    assert set(report.to_dict()) >= {"ok", "runs", "verified", "conflicts", "rows_per_second"}


class TestMergingAndCli:
    """Two databases merge into one target; the command prints, dry-runs and exits."""

    async def test_two_sources_into_one_target_remap_taken_ids(self, tmp_path: Path,
                                                               tokens: None) -> None:
        """The second source's event ids are taken: its runs get new ids in order and resume."""
        one, two, dst = tmp_path / "one.db", tmp_path / "two.db", tmp_path / "all.db"
        made_one, _ = await build_small(f"sqlite:///{one}", "team-a")
        made_two, now = await build_small(f"sqlite:///{two}", "team-b")
        first = await copy_database(CopyOptions(source=f"sqlite:///{one}",
                                                target=f"sqlite:///{dst}", all_tenants=True))
        assert first.ok and first.remapped_rows == 0 and first.verified == len(made_one)
        second = await copy_database(CopyOptions(source=f"sqlite:///{two}",
                                                 target=f"sqlite:///{dst}", all_tenants=True))
        assert second.ok, second.conflicts
        assert second.remapped_rows > 0 and second.verified == len(made_two)
        again = await copy_database(CopyOptions(source=f"sqlite:///{two}",
                                                target=f"sqlite:///{dst}", all_tenants=True))
        assert again.ok and again.rows_written == 0 and again.verified == len(made_two)
        merged = await drive(f"sqlite:///{dst}", "team-b", made_two, now)
        alone = await drive(f"sqlite:///{two}", "team-b", made_two, now)
        assert merged == alone

    @pytest.mark.parametrize("target_kind", ["sqlite", "postgres"])
    async def test_two_databases_of_one_workspace_merge_definitions(
            self, tmp_path: Path, tokens: None, target_kind: str) -> None:
        """Two databases of the same workspace hold the same workflow definitions under
        different ids: the second copy reuses the target's definitions (its runs point
        at them) and writes every run; a definition whose code differs is a conflict
        that names it, and only the runs of that definition are held back."""
        ws = f"merge-{uuid.uuid4().hex[:8]}"
        one, two = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
        if target_kind == "postgres":
            require_postgres()
            dst = POSTGRES_URL
        else:
            dst = f"sqlite:///{tmp_path / 'all.db'}"
        made_one, _ = await build_small(one, ws)
        made_two, now = await build_small(two, ws)
        with closing(sqlite3.connect(tmp_path / "two.db")) as conn, conn:
            conn.execute("UPDATE workflow_definitions SET code_hash = 'changed' "
                         "WHERE name = 'copy_approval'")
        scope = {"workspace_id": ws, "env": "prod"}
        first = await copy_database(CopyOptions(source=one, target=dst, **scope))
        assert first.ok and first.runs_written == len(made_one)
        second = await copy_database(CopyOptions(source=two, target=dst, **scope))
        changed = {r for r, (kind, _n) in made_two.items() if kind == "approval"}
        kept = set(made_two) - changed
        by_table: dict[str, list[Any]] = {}
        for c in second.conflicts:
            assert c.run_id is None or c.run_id in changed, c
            by_table.setdefault(c.table, []).append(c)
        # The definition is named with both hashes; its runs are held back, by id.
        (definition,) = by_table.pop("workflow_definitions")
        assert "copy_approval" in definition.reason and "'changed'" in definition.reason
        assert {c.run_id for c in by_table.pop("workflow_runs")} == changed
        # Each database made its own wake key, schedule and session variables for the
        # workspace: reported as conflicts too (the variables' runs are held back).
        assert set(by_table) <= {"starflow_keys", "starflow_schedules",
                                 "workflow_session_vars"}
        assert second.runs_written == len(kept) and second.verified == len(kept)
        assert second.runs_present == 0
        again = await copy_database(CopyOptions(source=two, target=dst, **scope))
        assert again.rows_written == 0 and again.runs_present == len(kept)
        assert again.runs_written == 0 and again.verified == len(kept)
        async with Starflow.open(dst, workspace_id=ws, maintenance=False) as sf:
            runs = await sf.list_runs(limit=1000)
            assert {r.id for r in runs} == set(made_one) | kept
            definitions = {(r.template_id, r.workflow_version, r.definition_id) for r in runs}
            assert len(definitions) == 2  # one definition per workflow, shared
            merged = await drive(dst, ws, {r: made_two[r] for r in kept}, now)
        alone = await drive(two, ws, {r: made_two[r] for r in kept}, now)
        assert merged == alone

    async def test_single_run_by_upper_case_id(self, tmp_path: Path, tokens: None) -> None:
        """--run takes a run id pasted in upper case (SQLite stores ids lowercase)."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        made, _ = await build_small(src, "celestial")
        one = sorted(made)[0]
        report = await copy_database(CopyOptions(source=src, run_id=one.upper(),
                                                 target=f"sqlite:///{tmp_path / 'one.db'}"))
        assert report.ok and report.runs == 1 and report.runs_written == 1
        with closing(sqlite3.connect(tmp_path / "one.db")) as conn, conn:
            assert conn.execute("SELECT id FROM workflow_runs").fetchall() == [(one,)]

    @pytest.mark.slow  # runs the CLI three times
    async def test_cli_dry_run_json_and_plain_progress(self, tmp_path: Path,
                                                       tokens: None) -> None:
        """--dry-run writes nothing; the text summary and progress lines; exit 1 on conflict."""
        src, dst = tmp_path / "a.db", tmp_path / "b.db"
        made, _ = await build_small(f"sqlite:///{src}", "celestial")
        base = [sys.executable, "-m", "starflow", "copy", "--from", f"sqlite:///{src}",
                "--to", f"sqlite:///{dst}", "--all-tenants"]
        dry = await anyio.run_process([*base, "--dry-run", "--json"], check=False)
        assert dry.returncode == 0, dry.stderr.decode()
        summary = json.loads(dry.stdout)
        assert summary["dry_run"] and summary["rows_written"] > 0 and not dst.exists()
        real = await anyio.run_process(base, check=False)
        assert real.returncode == 0, real.stderr.decode()
        text = real.stdout.decode()
        assert f"verified: {len(made)} run(s) identical" in text and "conflicts: 0" in text
        assert (f"{len(made)}/{len(made)} runs compared: {len(made)} written, "
                "0 already there, 0 not written") in real.stderr.decode()
        with closing(sqlite3.connect(dst)) as conn, conn:
            conn.execute("UPDATE workflow_runs SET status = 'x' WHERE id = ?", (min(made),))
        again = await anyio.run_process(base, check=False)
        assert again.returncode == 1
        assert f"CONFLICT run {min(made)}" in again.stdout.decode()
        # What was written is counted, not what was looked at: the run held back is not.
        assert (f"{len(made)}/{len(made)} runs compared: 0 written, {len(made) - 1} already "
                "there, 1 not written") in again.stderr.decode()
        assert (f"runs: {len(made)} in scope, 0 written now, {len(made) - 1} already there, "
                "1 not written") in again.stdout.decode()
        bad = await anyio.run_process([*base[:-1], "--workspace", "celestial"], check=False)
        assert bad.returncode == 2 and b"--env" in bad.stderr


class TestSchemaCoverage:
    """Every column of the copied tables crosses with the right codec."""

    async def test_every_postgres_column_type_is_described(self) -> None:
        """The migrated schema has no timestamp/JSON/uuid/boolean column copy would pass raw."""
        require_postgres()
        from starflow.adapters import adapter_from_url
        from starflow.adapters.copying import PostgresEndpoint
        from starflow.admin.copy import NOT_COPIED, TABLES

        owner = adapter_from_url(POSTGRES_URL)
        await owner.open()  # migrated
        await owner.close()
        end = PostgresEndpoint(POSTGRES_URL)
        await end.connect(readonly=True)
        try:
            tables = await end.tables()
            assert end.unknown_kinds(TABLES) == []
            assert sorted(t for t in tables if t not in NOT_COPIED) == sorted(
                s.name for s in TABLES)
            end._types[("workflow_runs", "woken_at")] = "timestamptz"
            assert end.unknown_kinds(TABLES) == ["workflow_runs.woken_at: timestamptz"]
        finally:
            await end.close()
