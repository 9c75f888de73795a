"""Numbered SQL migrations, one folder per dialect, applied once and recorded
in ``starflow_migrations``.

The state model's own migrations keep their numbers (001 initial, 018
workspace scope, 019 lease columns); starflow's start at 020.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Migration", "load_migrations"]

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
