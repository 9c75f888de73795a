"""``starflow migrate`` and ``starflow sweep``: database administration."""

from __future__ import annotations

import argparse
import os
import sys

from ._base import EXIT_OK, app_args, command, db_args, open_app, redact_url, resolve_app, say

__all__: list[str] = []


@command("migrate", help="apply pending database migrations", args=[app_args, db_args])
async def _migrate(ns: argparse.Namespace) -> int:
    from ..adapters.base import DelegatingAdapter
    from ..migrations import load_migrations

    sf = await resolve_app(ns)
    adapter = sf.adapter
    base = adapter
    while isinstance(base, DelegatingAdapter):  # the mirror, fault injection: the real one
        base = base.inner
    where = getattr(ns, "db", None) or os.environ.get("STARFLOW_DATABASE_URL") or "--app's"
    say(f"migrating {redact_url(where)} database …")
    await adapter.open()  # applies pending migrations under the adapter's lock
    try:
        applied = [*base.applied_migrations, *await adapter.migrate()]
    finally:
        await adapter.close()
    names = {m.version: m.name for dialect in ("sqlite", "postgres")
             for m in load_migrations(dialect)}
    for version in applied:
        sys.stdout.write(f"applied {version:03d} {names.get(version, '')}".rstrip() + "\n")
    sys.stdout.write(f"{len(applied)} migration(s) applied; schema up to date\n"
                     if applied else "schema up to date (nothing to apply)\n")
    return EXIT_OK


@command("sweep", help="run one lease-sweep pass now and print how many runs it recovered",
         args=[app_args, db_args])
async def _sweep(ns: argparse.Namespace) -> int:
    async with open_app(ns) as sf:
        count = await sf.sweep()
    sys.stdout.write(f"{count} run(s) requeued or abandoned\n")
    return EXIT_OK
