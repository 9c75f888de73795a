"""What ``starflow copy`` is asked (:class:`CopyOptions`) and what it reports
(:class:`CopyReport`, with its :class:`Conflict` and :class:`Mismatch` rows, and
:class:`CopyProgress` while it runs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

__all__ = ["Conflict", "CopyOptions", "CopyProgress", "CopyReport", "Mismatch"]


@dataclass(frozen=True)
class CopyOptions:
    """What :func:`copy_database` copies.

    Attributes:
        source: ``sqlite:///path.db`` or ``postgresql://…`` to read from.
        target: The URL to write to (migrated first, created if a SQLite file).
        workspace_id: Copy this workspace's runs (with ``env``)…
        env: … in this environment.
        all_tenants: … or every workspace and environment.
        run_id: … or this one run (and its children) with what it needs.
        dry_run: Compare only: count what would be written and the conflicts.
        wait: Wait for live leases to end instead of refusing.
        batch_runs: Runs per target transaction.
        wait_poll: Seconds between lease checks with ``wait``.
    """

    source: str
    target: str
    workspace_id: str | None = None
    env: str | None = None
    all_tenants: bool = False
    run_id: str | None = None
    dry_run: bool = False
    wait: bool = False
    batch_runs: int = 200
    wait_poll: float = 1.0

    def validate(self) -> None:
        chosen = sum([self.all_tenants, self.run_id is not None,
                      self.workspace_id is not None or self.env is not None])
        if chosen != 1:
            raise ConfigError("choose what to copy: --workspace W --env E, --all-tenants, "
                              "or --run RUN_ID (exactly one)")
        if (self.workspace_id is None) != (self.env is None):
            raise ConfigError("--workspace and --env go together: "
                              f"workspace={self.workspace_id!r}, env={self.env!r}")
        if self.batch_runs < 1:
            raise ConfigError(f"batch_runs must be >= 1: {self.batch_runs}")
        if self.source == self.target:
            raise ConfigError(f"--from and --to name the same database: {self.source!r}")


@dataclass(frozen=True)
class Conflict:
    """A row the target holds with other content (or cannot hold).

    Attributes:
        table: Its table.
        key: Its key columns' values.
        run_id: The run it belongs to (nothing of that run was written), if any.
        reason: What differs.
    """

    table: str
    key: tuple[Any, ...]
    run_id: str | None
    reason: str

    def describe(self) -> str:
        who = f"run {self.run_id}: " if self.run_id else ""
        return f"{who}{self.table} {self.key!r}: {self.reason}"


@dataclass(frozen=True)
class Mismatch:
    """A run whose verification differs between source and target."""

    run_id: str
    source_events: int
    target_events: int
    source_hash: str
    target_hash: str


@dataclass
class CopyProgress:
    """How far a copy is (passed to ``on_progress`` after each batch)."""

    runs_total: int = 0
    #: Runs compared so far: written, already there, or held back by a conflict.
    runs_done: int = 0
    #: Of those, runs with rows written now, and runs already complete in the target.
    runs_written: int = 0
    runs_present: int = 0
    rows_read: int = 0
    rows_written: int = 0
    seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        return self.rows_read / self.seconds if self.seconds > 0 else 0.0

    @property
    def runs_held_back(self) -> int:
        """Runs compared but not written (a conflict, or the target refused them)."""
        return self.runs_done - self.runs_written - self.runs_present


@dataclass
class CopyReport:
    """What a copy did.

    Attributes:
        runs: Runs in scope in the source.
        runs_written: Runs with at least one row written now.
        runs_present: Runs already complete and identical in the target.
        rows_read: Rows read from the source.
        rows_written: Rows written (or, on a dry run, that would be).
        rows_per_table: Rows written per table.
        conflicts: Rows that differ; their runs were not written.
        verified: Runs whose count and hash match on both sides.
        mismatches: Runs whose count or hash differ.
        migrations_applied: Migrations applied to the target first.
        remapped_rows: Events and signals given new ids (theirs were taken in the
            target by another database's rows); their order is kept.
        seconds: Wall time.
        dry_run: Nothing was written.
    """

    runs: int = 0
    runs_written: int = 0
    runs_present: int = 0
    rows_read: int = 0
    rows_written: int = 0
    rows_per_table: dict[str, int] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    verified: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    migrations_applied: list[int] = field(default_factory=list)
    remapped_rows: int = 0
    seconds: float = 0.0
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """No conflict and no verification difference."""
        return not self.conflicts and not self.mismatches

    @property
    def rows_per_second(self) -> float:
        return self.rows_read / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "dry_run": self.dry_run, "runs": self.runs,
            "runs_written": self.runs_written, "runs_present": self.runs_present,
            "rows_read": self.rows_read, "rows_written": self.rows_written,
            "rows_per_table": dict(sorted(self.rows_per_table.items())),
            "verified": self.verified,
            "conflicts": [{"table": c.table, "key": [str(k) for k in c.key],
                           "run_id": c.run_id, "reason": c.reason} for c in self.conflicts],
            "mismatches": [{"run_id": m.run_id, "source_events": m.source_events,
                            "target_events": m.target_events, "source_hash": m.source_hash,
                            "target_hash": m.target_hash} for m in self.mismatches],
            "migrations_applied": self.migrations_applied,
            "remapped_rows": self.remapped_rows,
            "seconds": round(self.seconds, 3),
            "rows_per_second": round(self.rows_per_second, 1),
        }
