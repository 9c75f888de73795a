"""Numbered SQL migrations, one folder per dialect, applied once and recorded
in ``starflow_migrations``.

The state model's own migrations keep their numbers (001 initial, 018
workspace scope, 019 lease columns); starflow's start at 020.

A PostgreSQL database where the state model's engine already ran its own
migrations (001, 018, 019; no ``starflow_migrations`` table) is *adopted*:
:func:`seed_versions` recognises the schema by its tables, columns and types,
those versions are recorded as applied, and only starflow's own run.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from importlib import resources

__all__ = ["SEED_INDEXES", "SEED_TABLES", "STARFLOW_TABLES", "Migration", "MigrationPlan",
           "load_migrations", "seed_versions"]

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str


def load_migrations(dialect: str) -> list[Migration]:
    """All migrations for ``dialect`` (``sqlite`` or ``postgres``), in order."""
    folder = resources.files(__package__).joinpath(dialect)
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration numbers for {dialect}: {versions}")
    return found


@dataclass(frozen=True)
class MigrationPlan:
    """What migrating a database would do: versions recorded as applied without
    running them (the state model's, found in place), then versions applied."""

    adopt: tuple[Migration, ...]
    apply: tuple[Migration, ...]


_TS = "timestamp with time zone"
#: The columns (name -> PostgreSQL type) each state-model migration leaves, by table.
_SEED_STEPS: tuple[tuple[int, dict[str, dict[str, str]]], ...] = (
    (1, {
        "workflow_runs": {"id": "uuid", "template_id": "text", "status": "text",
                          "started_at": _TS, "completed_at": _TS, "duration_ms": "integer",
                          "checkpoint_json": "jsonb", "error": "text"},
        "workflow_run_events": {"id": "bigint", "run_id": "uuid", "event_type": "text",
                                "node_id": "text", "payload_json": "jsonb", "created_at": _TS},
        "workflow_session_vars": {"session_id": "text", "key": "text", "value_json": "jsonb"},
    }),
    (18, {"workflow_runs": {"workspace_id": "text", "env": "text"}}),
    (19, {"workflow_runs": {"claim_state": "text", "runner_pool": "text", "leased_by": "text",
                            "lease_until": _TS, "last_heartbeat": _TS,
                            "claim_attempts": "integer", "definition_id": "uuid"}}),
)
#: The indexes each state-model migration creates (020 drops the session-var one,
#: so a database without it cannot be migrated).
_SEED_INDEXES: dict[int, tuple[str, ...]] = {
    1: ("idx_workflow_run_events_run", "idx_workflow_session_vars_key"),
    18: ("idx_workflow_runs_workspace_started",),
    19: ("idx_workflow_runs_lease_until", "idx_workflow_runs_claim_pool"),
}
#: Every index name :func:`seed_versions` looks for.
SEED_INDEXES = tuple(name for names in _SEED_INDEXES.values() for name in names)
#: The state model's tables.
SEED_TABLES = ("workflow_runs", "workflow_run_events", "workflow_session_vars")
#: Tables only starflow's migrations create.
STARFLOW_TABLES = ("workflow_definitions", "workflow_waits", "workflow_signals",
                   "mirror_outbox", "starflow_keys", "worker_jobs")


def _seed_schema(upto: int) -> dict[str, dict[str, str]]:
    schema: dict[str, dict[str, str]] = {}
    for version, tables in _SEED_STEPS:
        if version <= upto:
            for table, columns in tables.items():
                schema.setdefault(table, {}).update(columns)
    return schema


def _differences(found: Mapping[str, Mapping[str, str]],
                 expected: Mapping[str, Mapping[str, str]]) -> list[str]:
    out: list[str] = []
    for table, columns in expected.items():
        have = found.get(table)
        if have is None:
            out.append(f"table {table} is missing")
            continue
        for name, kind in columns.items():
            if name not in have:
                out.append(f"column {table}.{name} is missing")
            elif have[name] != kind:
                out.append(f"column {table}.{name} is {have[name]}, expected {kind}")
        out.extend(f"column {table}.{name} ({have[name]}) is not the state model's"
                   for name in have if name not in columns)
    out.extend(f"table {table} exists (starflow creates it; starflow_migrations is missing)"
               for table in STARFLOW_TABLES if table in found)
    return out


def seed_versions(found: Mapping[str, Mapping[str, str]],
                  indexes: Collection[str] = ()) -> list[int]:
    """The state-model migrations a PostgreSQL schema without ``starflow_migrations``
    has run: ``[]`` for a fresh database, ``[1]``, ``[1, 18]`` or ``[1, 18, 19]``.

    ``found`` maps each of :data:`SEED_TABLES` and :data:`STARFLOW_TABLES` that
    exists to its columns and types (``information_schema.columns.data_type``);
    ``indexes`` names those of :data:`SEED_INDEXES` that exist.

    Raises:
        ValueError: the tables match none of those schemas; the message lists
            what differs from the closest one.
    """
    if not found:
        return []
    best: list[str] | None = None
    for version, _ in reversed(_SEED_STEPS):
        diff = _differences(found, _seed_schema(version))
        diff += [f"index {name} is missing" for v, names in _SEED_INDEXES.items()
                 if v <= version for name in names if name not in indexes]
        if not diff:
            return [v for v, _ in _SEED_STEPS if v <= version]
        if best is None or len(diff) < len(best):
            best, closest = diff, version
    assert best is not None
    raise ValueError(
        "the database has workflow tables but no starflow_migrations, and they are neither "
        f"the state model's schema nor empty (closest: the state model after migration "
        f"{closest:03d}): "
        + "; ".join(best))
