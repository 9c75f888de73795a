"""``starflow migrate`` and ``starflow sweep``: database administration."""

from __future__ import annotations

import argparse
import sys

from ..config import database_url_from_env
from ..errors import StarflowError
from ._base import (
    EXIT_OK,
    CommandError,
    app_args,
    command,
    db_args,
    open_app,
    redact_url,
    resolve_app,
    say,
)

__all__: list[str] = []


def _migrate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be adopted and applied; change nothing")


@command("migrate", help="apply pending database migrations", args=[app_args, db_args],
         configure=_migrate_args)
async def _migrate(ns: argparse.Namespace) -> int:
    from ..adapters.delegating import DelegatingAdapter
    from ..migrations import load_migrations

    sf = await resolve_app(ns)
    adapter = sf.adapter
    base = adapter
    while isinstance(base, DelegatingAdapter):  # the mirror, fault injection: the real one
        base = base.inner
    where = getattr(ns, "db", None) or database_url_from_env() or "--app's"
    if ns.dry_run:
        planner = getattr(base, "migration_plan", None)
        if planner is None:
            raise CommandError(f"--dry-run: {type(base).__name__} has no migrations")
        try:
            plan = await planner()
        except StarflowError as exc:
            raise CommandError(str(exc)) from exc
        say(f"dry run on {redact_url(where)} database: nothing is changed")
        for mig in plan.adopt:
            sys.stdout.write(f"would record {mig.version:03d} {mig.name} as applied "
                             "(the state model's schema is in place)\n")
        for mig in plan.apply:
            sys.stdout.write(f"would apply {mig.version:03d} {mig.name}\n")
        sys.stdout.write(f"{len(plan.apply)} migration(s) to apply"
                         + (f", {len(plan.adopt)} to adopt" if plan.adopt else "") + "\n"
                         if plan.adopt or plan.apply else "schema up to date (nothing to do)\n")
        return EXIT_OK
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
