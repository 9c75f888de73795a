"""``starflow copy``: move runs between databases without draining them.

:func:`copy_database` copies everything that makes a run resumable from one
database to another (SQLite ↔ PostgreSQL, either way): runs with their
checkpoints and lease/claim columns, the full event history, waits and
timers, kept signals, session variables with their TTL, workflow
definitions, wake-token keys and worker jobs, ids and timestamps kept.

- **Every table.** The tables come from the source's schema; each one must be
  in :data:`TABLES` (copied) or :data:`NOT_COPIED` (with the reason), else the
  copy stops before writing anything, naming it.
- **One snapshot.** Every read happens inside one read transaction of the
  source. Runs or jobs holding a live lease refuse the copy
  (:class:`~starflow.errors.CopyRefused`) unless ``wait=True``.
- **Safe to repeat.** The target is migrated first. A row already in the
  target with the same content is skipped; with different content it is a
  :class:`Conflict` and nothing of that run is written. Runs are written in
  batches, one target transaction each, so an interrupted copy leaves whole
  runs behind and a second copy completes it.
- **Verified.** Per run, the number of events and a hash of the history and
  checkpoint are compared on both sides after writing.
- **Merged definitions.** A workflow definition the target already holds under
  another id (the same workspace, env, name and version, written by another
  database) is reused: the copied runs and schedules point at the target's id.
  The same name and version with other code (``code_hash``) is a
  :class:`Conflict` naming both hashes, and that definition's runs are not
  written.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread

from ..adapters.copying import (
    Endpoint,
    Json,
    PostgresEndpoint,
    Query,
    Side,
    TableSpec,
    chunks,
    endpoint_for,
)
from ..clock import Clock, SystemClock, format_ts, monotonic
from ..errors import ConfigError, CopyRefused, StarflowError, StorageError
from ..limits import run_key_problem
from .copy_records import Conflict, CopyOptions, CopyProgress, CopyReport, Mismatch

__all__ = [
    "NOT_COPIED",
    "TABLES",
    "Conflict",
    "CopyOptions",
    "CopyProgress",
    "CopyReport",
    "Mismatch",
    "copy_database",
]

_T = frozenset

#: The tables copied, in the order they are written (parents first).
TABLES: tuple[TableSpec, ...] = (
    TableSpec("workflow_definitions", key=("id",), lookup="id", times=_T({"created_at"}),
              uuids=_T({"id"})),
    TableSpec("starflow_keys", key=("workspace_id", "env", "key_id"), lookup="key_id",
              times=_T({"created_at"})),
    TableSpec("starflow_schedules", key=("workspace_id", "env", "id"), lookup="id",
              times=_T({"next_fire_at", "due_at", "pending_tick", "buffered_tick", "last_tick",
                        "created_at", "updated_at"}),
              json=_T({"input_json"}), uuids=_T({"definition_id", "last_run_id"}),
              bools=_T({"paused"})),
    TableSpec("starflow_pool_limits", key=("workspace_id", "env", "pool"), lookup="pool",
              times=_T({"updated_at"}), json=_T({"key_weights"}),
              bools=_T({"paused", "fair", "keep_slot"})),
    TableSpec("workflow_runs", key=("id",), lookup="id", run_column="id",
              times=_T({"started_at", "completed_at", "lease_until", "last_heartbeat",
                        "not_before", "claimed_at", "deadline_at"}),
              json=_T({"checkpoint_json", "input_json", "result_json", "failure_json",
                        "phase"}),
              uuids=_T({"id", "definition_id", "parent_run_id", "continued_as"}),
              bools=_T({"detached"})),
    TableSpec("workflow_run_events", key=("id",), lookup="id", run_column="run_id",
              tenant=False, times=_T({"created_at"}), json=_T({"payload_json"}),
              uuids=_T({"run_id"}), serial="id"),
    TableSpec("workflow_waits", key=("run_id", "node_id"), lookup="run_id",
              run_column="run_id", times=_T({"deadline", "created_at"}),
              uuids=_T({"run_id"})),
    TableSpec("workflow_signals", key=("id",), lookup="id", run_column="run_id",
              times=_T({"created_at"}), json=_T({"payload_json"}), uuids=_T({"run_id"}),
              serial="id"),
    TableSpec("workflow_session_vars", key=("workspace_id", "env", "session_id", "key"),
              lookup="session_id", run_column="run_id",
              times=_T({"keep_until", "updated_at"}), json=_T({"value_json"}),
              uuids=_T({"run_id"})),
    TableSpec("workflow_run_attributes", key=("run_id", "key"), lookup="run_id",
              run_column="run_id", times=_T({"updated_at"}), uuids=_T({"run_id"})),
    TableSpec("workflow_event_values", key=("run_id", "key"), lookup="run_id",
              run_column="run_id", times=_T({"updated_at"}), json=_T({"value_json"}),
              uuids=_T({"run_id"})),
    TableSpec("workflow_stream_items", key=("run_id", "key", "seq", "sub"), lookup="run_id",
              run_column="run_id", times=_T({"created_at"}), json=_T({"value_json"}),
              uuids=_T({"run_id"}), bools=_T({"closed"})),
    TableSpec("worker_jobs", key=("id",), lookup="id", run_column="run_id",
              times=_T({"lease_until", "last_heartbeat", "created_at", "completed_at"}),
              json=_T({"input_json", "result_json", "error_json"}),
              uuids=_T({"id", "run_id"})),
)
_BY_NAME = {spec.name: spec for spec in TABLES}
_RUNS = _BY_NAME["workflow_runs"]
_EVENTS = _BY_NAME["workflow_run_events"]
#: Tables of the schema that are deliberately not copied, and why.
NOT_COPIED: dict[str, str] = {
    "starflow_migrations": "the target's own migration record (it is migrated first)",
    "sqlite_sequence": "SQLite's id counters (they follow the copied ids)",
    "mirror_outbox": "the warm tier's delivery queue: the target's drift sweep rebuilds "
                     "the warm tier from the copied runs",
    "starflow_pool_keys": "a fair pool's round-robin bookkeeping (recent service per key): "
                          "the target's fair pools start their round robin afresh",
    "starflow_role_workspaces": "PostgreSQL role pins name roles of the source database "
                                "(pin the target's roles with starflow_pin_role)",
}
#: Tenant rows of these tables are copied once per copy, before the runs.
_TENANT_TABLES = ("workflow_definitions", "starflow_keys", "starflow_schedules",
                  "starflow_pool_limits", "workflow_session_vars")


@dataclass
class _Plan:
    """What to write of one table: rows with their target values (and whether their
    serial id is left to the target), conflicts, rows already there."""

    inserts: list[tuple[dict[str, Any], tuple[Any, ...], bool]] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    present: int = 0


def _key(spec: TableSpec, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(c) for c in spec.key)


def _history_hash(events: Sequence[dict[str, Any]], checkpoint: Any) -> str:
    h = hashlib.sha256()
    for e in events:
        payload = e.get("payload_json")
        created = e.get("created_at")
        # Not the id: a run whose ids were taken in the target gets new ones.
        h.update("\x1f".join([
            str(e.get("event_type")), str(e.get("node_id")),
            payload.text if isinstance(payload, Json) else "NULL",
            format_ts(created) if created is not None else "NULL",
        ]).encode())
        h.update(b"\x1e")
    h.update(checkpoint.text.encode() if isinstance(checkpoint, Json) else b"NULL")
    return h.hexdigest()


def _differences(a: dict[str, Any], b: dict[str, Any], columns: Iterable[str]) -> list[str]:
    return [c for c in columns if a.get(c) != b.get(c)]


# ---------------------------------------------------------------------------
# The copy
# ---------------------------------------------------------------------------


class _Copy:
    def __init__(self, options: CopyOptions, clock: Clock,
                 on_progress: Callable[[CopyProgress], None] | None,
                 on_status: Callable[[str], None] | None) -> None:
        self.o = options
        self.clock = clock
        self.on_progress = on_progress
        self.on_status = on_status or (lambda _msg: None)
        self.report = CopyReport(dry_run=options.dry_run)
        self.progress = CopyProgress()
        self.started = monotonic()
        self.src: Side
        self.dst: Side | None = None
        self._run_ids: list[str] | None = None
        self._tenant_of_copy: tuple[str, str] | None = None
        #: Source definition id -> the target's id of the same definition.
        self._definition_ids: dict[str, str] = {}
        #: Source definition id -> why the target cannot take it (other code).
        self._definition_conflicts: dict[str, str] = {}

    # -- set-up ---------------------------------------------------------------------

    def _check_schema(self, src: dict[str, list[str]], dst: dict[str, list[str]] | None) -> None:
        unknown = sorted(t for t in src if t not in _BY_NAME and t not in NOT_COPIED)
        if unknown:
            raise ConfigError(
                f"the source has table(s) starflow copy does not know how to copy: "
                f"{', '.join(unknown)} (a newer starflow, or not a starflow table: "
                "upgrade starflow, or drop the table if it is not starflow's)")
        if "workflow_runs" not in src:
            raise ConfigError("the source is not a starflow database (no workflow_runs table)")
        for end in (self.src.end, self.dst.end if self.dst is not None else None):
            if isinstance(end, PostgresEndpoint):
                unknown = end.unknown_kinds(TABLES)
                if unknown:
                    raise ConfigError(
                        "starflow copy does not know how to copy column(s) "
                        f"{', '.join(unknown)} of {end.where} (a newer starflow's schema: "
                        "upgrade starflow)")
        if dst is None:
            return
        for table, columns in src.items():
            if table in NOT_COPIED:
                continue
            if table not in dst:
                raise ConfigError(f"the target has no table {table} after migrating: the "
                                  "target runs an older schema than the source")
            missing = [c for c in columns if c not in dst[table]]
            if missing:
                raise ConfigError(f"the target's {table} lacks column(s) {', '.join(missing)} "
                                  "the source has: upgrade starflow where the target is migrated")

    async def _migrate_target(self) -> None:
        from ..adapters import adapter_from_url

        adapter = adapter_from_url(self.o.target)
        await adapter.open()  # applies pending migrations, as `starflow migrate` does
        try:
            self.report.migrations_applied = list(adapter.applied_migrations)
        finally:
            await adapter.close()

    def _tenant(self, q: Query, spec: TableSpec, tenant: tuple[str, str] | None) -> Query:
        if tenant is not None and spec.tenant:
            q.eq("workspace_id", tenant[0]).eq("env", tenant[1])
        return q

    # -- leases -----------------------------------------------------------------------

    async def _live_leases(self, run_ids: Sequence[str] | None,
                           tenant: tuple[str, str] | None) -> list[str]:
        now = self.src.end.dialect.ts(self.clock.now())
        held: set[str] = set()
        for spec_name, id_col in (("workflow_runs", "id"), ("worker_jobs", "run_id")):
            spec = _BY_NAME[spec_name]
            if not self.src.has(spec_name):
                continue

            def live(q: Query, spec: TableSpec = spec) -> Query:
                q.raw("leased_by IS NOT NULL")
                q.gt("lease_until", now, "timestamptz")
                return self._tenant(q, spec, tenant)

            if run_ids is None:
                rows = await self.src.select(spec, live(Query(self.src.end)), columns=[id_col])
            else:
                rows = await self.src.select_in(spec, id_col, run_ids, extra=live)
            held.update(str(r[id_col]) for r in rows)
        return sorted(held)

    # -- scope ------------------------------------------------------------------------

    async def _scope_runs(self) -> list[str] | None:
        """The run ids of a ``--run`` copy (with their children); None: a tenant scope."""
        if self.o.run_id is None:
            return None
        run_id = await self._run_named(self.o.run_id)
        ids = [run_id]
        if "parent_run_id" in self.src.columns["workflow_runs"]:
            frontier = [run_id]
            while frontier:
                children = await self.src.select_in(_RUNS, "parent_run_id", frontier)
                frontier = [str(c["id"]) for c in children if str(c["id"]) not in ids]
                ids.extend(frontier)
        return ids

    async def _run_named(self, given: str) -> str:
        """The id of the run ``--run`` names: a UUID, or a run key (#30), looked
        up in every scope of the source (a copy is not bound to one), which must
        hold one run with that key."""
        try:
            run_id: str | None = str(uuid.UUID(given))  # as stored (pasted ids may be upper case)
        except ValueError:
            run_id = None
        if run_id is not None:
            found = await self.src.select_in(_RUNS, "id", [run_id])
        else:
            problem = run_key_problem(given)
            if problem is not None:
                raise ConfigError(f"--run {given[:60]!r} is not a UUID nor a valid run key: "
                                  f"{problem}")
            found = (await self.src.select_in(_RUNS, "run_key", [given])
                     if "run_key" in self.src.columns["workflow_runs"] else [])
            if len(found) > 1:
                scopes = ", ".join(f"{r['workspace_id']}/{r['env']}: {r['id']}" for r in found)
                raise ConfigError(f"--run {given!r}: runs of several workspaces have this "
                                  f"key ({scopes}); pass the run's id instead")
        if not found:
            raise ConfigError(f"--run {given}: no such run in the source")
        return str(found[0]["id"])

    # -- comparing and writing ----------------------------------------------------------

    async def _existing(self, spec: TableSpec, rows: Sequence[dict[str, Any]]
                        ) -> dict[tuple[Any, ...], dict[str, Any]]:
        if self.dst is None or not rows:
            return {}
        values = [r[spec.lookup] for r in rows if r.get(spec.lookup) is not None]
        found = await self.dst.select_in(spec, spec.lookup, values)
        return {_key(spec, r): r for r in found}

    def _encode(self, spec: TableSpec, row: dict[str, Any]) -> tuple[Any, ...] | None:
        """Values for the target, or None on a dry run without a target."""
        if self.dst is None:
            return ()
        return self.dst.end.from_row(spec, self.src.columns[spec.name], row)

    def _insert(self, spec: TableSpec, rows: list[tuple[Any, ...]], remap: bool = False
                ) -> tuple[str, list[str], list[tuple[Any, ...]]]:
        cols = [c for c in self.src.columns[spec.name] if not (remap and c == spec.serial)]
        return spec.name, cols, rows

    async def _plan(self, spec: TableSpec, rows: Sequence[dict[str, Any]]) -> _Plan:
        """Rows to insert (with their encoded values), conflicts, rows already there."""
        existing = await self._existing(spec, rows)
        columns = self.src.columns[spec.name]
        plan = _Plan()
        for row in rows:
            run = row.get(spec.run_column) if spec.run_column else None
            run_id = str(run) if run is not None else None
            there = existing.get(_key(spec, row))
            if there is not None:
                diff = _differences(row, there, columns)
                if diff:
                    plan.conflicts.append(Conflict(spec.name, _key(spec, row), run_id,
                                                   f"differs in the target: {', '.join(diff)}"))
                else:
                    plan.present += 1
                continue
            try:
                values = self._encode(spec, row)
            except StarflowError as exc:
                plan.conflicts.append(Conflict(spec.name, _key(spec, row), run_id, exc.message))
                continue
            plan.inserts.append((row, values or (), False))
        return plan

    async def _plan_history(self, spec: TableSpec, ids: Sequence[str],
                            groups: dict[str, dict[str, list[dict[str, Any]]]]) -> _Plan:
        """A run's events (or kept signals) are compared as a whole, in order.

        Their ids are kept where the target has them free; a run whose ids are
        taken there (by another database's runs) gets new ids from the target's
        sequence, in the same order, so its history reads the same.
        """
        plan = _Plan()
        content = [c for c in self.src.columns[spec.name] if c != spec.serial]
        there: dict[str, list[dict[str, Any]]] = {}
        if self.dst is not None:
            for row in await self.dst.select_in(spec, spec.run_column, ids, order=spec.serial):
                there.setdefault(str(row[spec.run_column]), []).append(row)
        source_ids = [r[spec.serial] for i in ids for r in groups[i].get(spec.name, [])]
        taken: set[Any] = set()
        if self.dst is not None and source_ids:
            taken = {r[spec.serial] for r in await self.dst.select_in(
                spec, spec.serial, source_ids)}
        for run_id in ids:
            rows = groups[run_id].get(spec.name, [])
            have = there.get(run_id, [])
            if have:
                same = len(have) == len(rows) and all(
                    not _differences(a, b, content) for a, b in zip(rows, have, strict=True))
                if same:
                    plan.present += len(rows)
                else:
                    plan.conflicts.append(Conflict(
                        spec.name, (run_id,), run_id,
                        f"the target holds another history: {len(have)} row(s) there, "
                        f"{len(rows)} in the source"))
                continue
            remap = any(r[spec.serial] in taken for r in rows)
            try:
                for row in rows:
                    values = self._encode(spec, row) or ()
                    if remap:
                        values = tuple(v for c, v in zip(self.src.columns[spec.name], values,
                                                         strict=True) if c != spec.serial)
                    plan.inserts.append((row, values, remap))
            except StarflowError as exc:
                plan.conflicts.append(Conflict(spec.name, (run_id,), run_id, exc.message))
        return plan

    async def _write(self, batches: Sequence[tuple[TableSpec, list[tuple[Any, ...]]]],
                     remapped: Sequence[tuple[TableSpec, list[tuple[Any, ...]]]] = ()) -> None:
        if self.dst is None or self.o.dry_run:
            return
        await self.dst.end.write(
            [self._insert(spec, rows) for spec, rows in batches if rows]
            + [self._insert(spec, rows, remap=True) for spec, rows in remapped if rows])

    def _count(self, spec: TableSpec, n: int) -> None:
        if n:
            self.report.rows_written += n
            self.report.rows_per_table[spec.name] = self.report.rows_per_table.get(
                spec.name, 0) + n

    # -- tenant rows ------------------------------------------------------------------

    async def _tenant_rows(self, tenant: tuple[str, str] | None,
                           run_ids: Sequence[str] | None) -> None:
        """Definitions, keys and session variables that belong to no copied run."""
        batches: list[tuple[TableSpec, list[tuple[Any, ...]]]] = []
        for name in _TENANT_TABLES:
            spec = _BY_NAME[name]
            if not self.src.has(name):
                continue
            if run_ids is not None:
                rows = await self._rows_for_runs(spec, run_ids)
            else:
                q = self._tenant(Query(self.src.end), spec, tenant)
                if spec.run_column:
                    # Variables of a run are copied with it; these outlive theirs.
                    q.raw(f"({spec.run_column} IS NULL OR NOT EXISTS (SELECT 1 FROM "
                          f"workflow_runs r WHERE r.id = {spec.name}.{spec.run_column}))")
                rows = await self.src.select(spec, q)
            self.report.rows_read += len(rows)
            if name == "workflow_definitions":
                rows = await self._merge_definitions(spec, rows)
            rows = [self._remapped(spec, r) for r in rows]
            plan = await self._plan(spec, rows)
            self.report.conflicts.extend(plan.conflicts)
            batches.append((spec, [v for _r, v, _remap in plan.inserts]))
        try:
            await self._write(batches)
        except StorageError:
            # A row another one's unique key already holds in the target (a
            # definition's name and version): write row by row, report those.
            for spec, encoded in batches:
                for values in encoded:
                    try:
                        await self._write([(spec, [values])])
                    except StorageError as exc:
                        key = tuple(values[self.src.columns[spec.name].index(c)]
                                    for c in spec.key)
                        self.report.conflicts.append(Conflict(
                            spec.name, key, None, f"the target refused it: {exc.message}"))
                    else:
                        self._count(spec, 1)
        else:
            for spec, encoded in batches:
                self._count(spec, len(encoded))

    async def _merge_definitions(self, spec: TableSpec, rows: Sequence[dict[str, Any]]
                                 ) -> list[dict[str, Any]]:
        """The source definitions the target lacks; the others are mapped to the
        target's id (same code) or reported (other code)."""
        if self.dst is None:
            return list(rows)
        out = []
        for row in rows:
            q = (Query(self.dst.end).eq("workspace_id", row["workspace_id"])
                 .eq("env", row["env"]).eq("name", row["name"]).eq("version", row["version"]))
            there = await self.dst.select(spec, q)
            if not there or str(there[0]["id"]) == str(row["id"]):
                out.append(row)  # new, or the same row: compared as any other
                continue
            target = there[0]
            if target.get("code_hash") == row.get("code_hash"):
                self._definition_ids[str(row["id"])] = str(target["id"])
                continue
            reason = (f"workflow {row['name']!r} version {row['version']} has code_hash "
                      f"{row.get('code_hash')!r} in the source but {target.get('code_hash')!r} "
                      f"in the target (definition {target['id']}): the same name and version "
                      "with other code; its runs are not written (give one of them another "
                      "version, or copy it to another workspace)")
            self._definition_conflicts[str(row["id"])] = reason
            self.report.conflicts.append(Conflict(spec.name, _key(spec, row), None, reason))
        return out

    def _remapped(self, spec: TableSpec, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` pointing at the target's id of its definition, where that differs."""
        if spec.name not in ("workflow_runs", "starflow_schedules"):
            return row
        source = row.get("definition_id")
        target = self._definition_ids.get(str(source)) if source is not None else None
        return row if target is None else {**row, "definition_id": target}

    async def _rows_for_runs(self, spec: TableSpec, run_ids: Sequence[str]
                             ) -> list[dict[str, Any]]:
        """A ``--run`` copy's tenant rows: what its runs need."""
        if spec.name == "workflow_definitions":
            runs = await self.src.select_in(_RUNS, "id", run_ids)
            ids = [r["definition_id"] for r in runs if r.get("definition_id")]
            return await self.src.select_in(spec, "id", ids)
        if spec.name == "starflow_keys":
            runs = await self.src.select_in(_RUNS, "id", run_ids)
            out: list[dict[str, Any]] = []
            for ws, env in sorted({(r["workspace_id"], r["env"]) for r in runs}):
                q = Query(self.src.end).eq("workspace_id", ws).eq("env", env)
                out.extend(await self.src.select(spec, q))
            return out
        # Schedules and pool limits are the tenant's, not the run's; session
        # variables of the runs travel with them.
        return []

    # -- runs ---------------------------------------------------------------------------

    async def _run_pages(self, run_ids: Sequence[str]) -> AsyncIterator[list[dict[str, Any]]]:
        for chunk in chunks(list(run_ids), self.o.batch_runs):
            yield await self.src.select_in(_RUNS, "id", chunk, order="id")

    async def _tenant_run_ids(self, tenant: tuple[str, str] | None) -> list[str]:
        """Every run id in scope, read once. (Keyset pages of ``id > ?`` with the
        tenant filter make SQLite walk the tenant's index and sort it per page.)"""
        q = self._tenant(Query(self.src.end), _RUNS, tenant)
        rows = await self.src.end.fetch(f"SELECT id FROM workflow_runs{q.where}", q.args)
        return sorted(str(r[0]) for r in rows)

    async def _copy_page(self, runs: list[dict[str, Any]]) -> None:
        runs = [self._remapped(_RUNS, r) for r in runs]
        ids = [str(r["id"]) for r in runs]
        groups: dict[str, dict[str, list[dict[str, Any]]]] = {i: {} for i in ids}
        for spec in TABLES:
            if not spec.run_column or not self.src.has(spec.name):
                continue
            if spec is _RUNS:
                rows = runs
            else:
                order = spec.serial or ", ".join(spec.key)
                rows = await self.src.select_in(spec, spec.run_column, ids, order=order)
            self.report.rows_read += len(rows)
            for row in rows:
                groups[str(row[spec.run_column])].setdefault(spec.name, []).append(row)
        # What the target has, all tables of the page at once.
        plans: dict[str, _Plan] = {}
        for spec in TABLES:
            if not spec.run_column or not self.src.has(spec.name):
                continue
            if spec.serial:
                plans[spec.name] = await self._plan_history(spec, ids, groups)
            else:
                rows = [r for i in ids for r in groups[i].get(spec.name, [])]
                plans[spec.name] = await self._plan(spec, rows)
        bad: dict[str, list[Conflict]] = {}
        for run in runs:
            reason = self._definition_conflicts.get(str(run.get("definition_id")))
            if reason is not None:
                bad.setdefault(str(run["id"]), []).append(Conflict(
                    _RUNS.name, (str(run["id"]),), str(run["id"]),
                    f"its workflow definition {run['definition_id']} conflicts: {reason}"))
        for plan in plans.values():
            for c in plan.conflicts:
                bad.setdefault(c.run_id or "", []).append(c)
        for conflicts in bad.values():
            self.report.conflicts.extend(conflicts)
        good = [i for i in ids if i not in bad]
        if not await self._write_runs(good, plans):
            # One run the target refuses (a unique key taken by another row) must
            # not hold back the others: write them one by one.
            for run_id in good:
                await self._write_runs([run_id], plans, alone=True)
        if self.dst is not None and not self.o.dry_run:
            await self._verify(ids, groups)

    async def _write_runs(self, ids: Sequence[str], plans: dict[str, _Plan],
                          alone: bool = False) -> bool:
        """Write these runs' rows in one transaction; False if the target refused them
        (reported as a conflict when ``alone``)."""
        chosen = set(ids)
        written = dict.fromkeys(ids, 0)
        kept: list[tuple[TableSpec, list[tuple[Any, ...]]]] = []
        remapped: list[tuple[TableSpec, list[tuple[Any, ...]]]] = []
        for spec in TABLES:
            plan = plans.get(spec.name)
            if plan is None:
                continue
            mine = [(r, v, m) for r, v, m in plan.inserts if str(r[spec.run_column]) in chosen]
            for r, _v, _m in mine:
                written[str(r[spec.run_column])] += 1
            kept.append((spec, [v for _r, v, m in mine if not m]))
            remapped.append((spec, [v for _r, v, m in mine if m]))
        try:
            await self._write(kept, remapped)
        except StorageError as exc:
            if not alone:
                return False
            run_id = ids[0]
            self.report.conflicts.append(Conflict(
                "workflow_runs", (run_id,), run_id,
                f"the target refused the run's rows: {exc.message}"))
            return True
        for spec, encoded in [*kept, *remapped]:
            self._count(spec, len(encoded))
        self.report.remapped_rows += sum(len(rows) for _spec, rows in remapped)
        self.report.runs_written += sum(1 for i in ids if written[i])
        self.report.runs_present += sum(1 for i in ids if not written[i])
        return True

    async def _verify(self, ids: Sequence[str], groups: dict[str, dict[str, list[Any]]]
                      ) -> None:
        assert self.dst is not None
        cols = self.src.columns[_EVENTS.name]
        target_events: dict[str, list[dict[str, Any]]] = {}
        for row in await self.dst.select_in(_EVENTS, "run_id", ids, order="id"):
            target_events.setdefault(str(row["run_id"]), []).append(
                {c: row.get(c) for c in cols})
        target_runs = {str(r["id"]): r for r in await self.dst.select_in(_RUNS, "id", ids)}
        for run_id in ids:
            events = groups[run_id].get(_EVENTS.name, [])
            run = groups[run_id][_RUNS.name][0]
            source_hash = _history_hash(events, run.get("checkpoint_json"))
            there = target_events.get(run_id, [])
            target_run = target_runs.get(run_id)
            target_hash = (_history_hash(there, target_run.get("checkpoint_json"))
                           if target_run is not None else "missing")
            if len(events) == len(there) and source_hash == target_hash:
                self.report.verified += 1
            else:
                self.report.mismatches.append(Mismatch(run_id, len(events), len(there),
                                                       source_hash, target_hash))

    # -- the whole ----------------------------------------------------------------------

    async def run(self) -> CopyReport:
        self.o.validate()
        source = endpoint_for(self.o.source, "--from")
        target = endpoint_for(self.o.target, "--to")
        tenant = ((self.o.workspace_id, self.o.env)
                  if self.o.workspace_id is not None and self.o.env is not None else None)
        self._tenant_of_copy = tenant
        await source.connect(readonly=True, tenant=tenant)
        try:
            src_tables = await source.tables()
            self.src = Side(source, src_tables)
            self._check_schema(src_tables, None)
            if not self.o.dry_run:
                self.on_status(f"bringing {target.where} to the current schema …")
                await self._migrate_target()
            dst_open = await self._open_target(target)
            try:
                if self.dst is not None and not self.o.dry_run:
                    self._check_schema(src_tables, self.dst.columns)
                await self._snapshot(tenant)
                try:
                    if self.dst is not None and not self.o.dry_run:
                        await self.dst.end.advance_sequences(TABLES, await self._max_ids())
                    await self._copy(tenant)
                finally:
                    await source.end_snapshot()
                if self.dst is not None and not self.o.dry_run:
                    await self.dst.end.advance_sequences(TABLES)
            finally:
                if dst_open:
                    await target.close()
        finally:
            await source.close()
        self.report.seconds = monotonic() - self.started
        return self.report

    async def _max_ids(self) -> dict[str, int]:
        """The largest serial id of each source table: the target's sequences are moved
        past them first, so an id it hands out never takes a source id still to come."""
        out: dict[str, int] = {}
        for spec in TABLES:
            if spec.serial and self.src.has(spec.name):
                rows = await self.src.end.fetch(f"SELECT max({spec.serial}) FROM {spec.name}",
                                                ())
                out[spec.name] = int(rows[0][0] or 0)
        return out

    async def _open_target(self, target: Endpoint) -> bool:
        import os

        from ..adapters.copying import SQLiteEndpoint

        if self.o.dry_run and isinstance(target, SQLiteEndpoint) and not (
                await anyio.to_thread.run_sync(os.path.exists, target.path)):
            return False  # nothing there yet: everything would be written
        await target.connect(readonly=False, tenant=self._tenant_of_copy)
        try:
            self.dst = Side(target, await target.tables())
        except BaseException:
            await target.close()
            raise
        return True

    async def _snapshot(self, tenant: tuple[str, str] | None) -> None:
        """Open the source's read transaction with no live lease in it (or refuse)."""
        while True:
            await self.src.end.begin_snapshot()
            run_ids = await self._scope_runs()
            held = await self._live_leases(run_ids, tenant)
            if not held:
                self._run_ids = run_ids
                return
            await self.src.end.end_snapshot()
            shown = ", ".join(held[:20]) + (f" … ({len(held)} in all)" if len(held) > 20 else "")
            if not self.o.wait:
                raise CopyRefused(
                    f"{len(held)} run(s) hold a live lease in the source (a runner is mid-step "
                    f"and could still write there): {shown}. Stop the workers, or pass --wait "
                    "to wait until they pause or end", run_ids=tuple(held))
            self.on_status(f"waiting for {len(held)} leased run(s) to pause or end: {shown}")
            await self.clock.sleep(self.o.wait_poll)

    async def _copy(self, tenant: tuple[str, str] | None) -> None:
        run_ids = self._run_ids
        await self._tenant_rows(tenant, run_ids)
        if run_ids is None:
            run_ids = await self._tenant_run_ids(tenant)
        self.progress.runs_total = self.report.runs = len(run_ids)
        async for page in self._run_pages(run_ids):
            await self._copy_page(page)
            self.progress.runs_done += len(page)
            self.progress.runs_written = self.report.runs_written
            self.progress.runs_present = self.report.runs_present
            self.progress.rows_read = self.report.rows_read
            self.progress.rows_written = self.report.rows_written
            self.progress.seconds = monotonic() - self.started
            if self.on_progress is not None:
                self.on_progress(self.progress)


async def copy_database(options: CopyOptions, *, clock: Clock | None = None,
                        on_progress: Callable[[CopyProgress], None] | None = None,
                        on_status: Callable[[str], None] | None = None) -> CopyReport:
    """Copy runs and what they need from ``options.source`` to ``options.target``.

    Args:
        options: What to copy and where.
        clock: Where "now" comes from for the lease check (default: the system clock).
        on_progress: Called after each batch of runs.
        on_status: Called with one-line status messages (migrating, waiting).

    Returns:
        The report: rows written, conflicts, verification. ``report.ok`` is False
        on any conflict or verification difference.

    Raises:
        CopyRefused: a run holds a live lease in the source (without ``wait``).
        ConfigError: bad options, an unknown table, a schema the target cannot hold.
        StorageError: a database failed.
    """
    return await _Copy(options, clock or SystemClock(), on_progress, on_status).run()
