"""``starflow schedules …`` and ``starflow pools``: cron schedules and pool limits.

Human output is aligned tables on stdout; ``--json`` gives stable keys
instead. Timestamps are ISO-8601 UTC.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from ..records import PoolLimits, PoolUsage, ScheduleRecord
from ._base import EXIT_OK, app_args, command, db_args, open_app
from ._format import iso, json_flag, render_table, write, write_json

if TYPE_CHECKING:
    from ..app import Starflow

__all__ = ["pool_json", "schedule_json"]


def _duration(delta: timedelta | None) -> str | None:
    if delta is None:
        return None
    seconds = delta.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def schedule_json(rec: ScheduleRecord) -> dict[str, Any]:
    """A schedule, JSON-ready (``schedules list/show --json``)."""
    return {
        "id": rec.id,
        "workflow": rec.workflow,
        "version": rec.workflow_version,
        "cron": rec.cron,
        "timezone": rec.timezone,
        "overlap": rec.overlap,
        "catchup_seconds": rec.catchup.total_seconds(),
        "pool": rec.pool,
        "paused": rec.paused,
        "next_fire_at": iso(rec.next_fire_at),
        "last_tick": iso(rec.last_tick),
        "last_run_id": rec.last_run_id,
        "pending_tick": iso(rec.pending_tick),
        "buffered_tick": iso(rec.buffered_tick),
        "started": rec.started,
        "skipped_missed": rec.skipped_missed,
        "skipped_overlap": rec.skipped_overlap,
        "input": rec.input,
        "created_at": iso(rec.created_at),
        "updated_at": iso(rec.updated_at),
    }


def pool_json(usage: PoolUsage) -> dict[str, Any]:
    """A pool's limits and use, JSON-ready (``pools --json``)."""
    lim = usage.limits
    return {
        "pool": usage.pool,
        "concurrency": lim.concurrency if lim else None,
        "rate_limit": lim.rate_limit if lim else None,
        "rate_period_seconds": lim.rate_period.total_seconds() if lim and lim.rate_period
        else None,
        "key_concurrency": lim.key_concurrency if lim else None,
        "key_rate_limit": lim.key_rate_limit if lim else None,
        "key_rate_period_seconds": lim.key_rate_period.total_seconds()
        if lim and lim.key_rate_period else None,
        "fair": bool(lim and lim.fair),
        "key_weights": dict(lim.key_weights) if lim and lim.key_weights else None,
        "keep_slot": bool(lim and lim.keep_slot),
        "paused": bool(lim and lim.paused),
        "queued": usage.queued,
        "active": usage.active,
        "kept": usage.kept,
        "claimed_in_window": usage.claimed_in_window,
    }


def _id_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("schedule_id", metavar="SCHEDULE_ID")
    json_flag(parser)


@command("list", group="schedules", help="every schedule, with its next tick and counters",
         args=[app_args, db_args], configure=json_flag)
async def _schedules_list(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        schedules = await sf.schedules()
    if ns.json:
        write_json([schedule_json(s) for s in schedules])
        return EXIT_OK
    if not schedules:
        sys.stderr.write("no schedules\n")
        return EXIT_OK
    write(render_table(
        ["id", "workflow", "cron", "timezone", "state", "next", "last run", "started",
         "skipped"],
        [(s.id, s.workflow, s.cron, s.timezone, "paused" if s.paused else "active",
          iso(s.next_fire_at), s.last_run_id, s.started, s.skipped_missed + s.skipped_overlap)
         for s in schedules], max_width=40))
    return EXIT_OK


def _print_schedule(rec: ScheduleRecord, as_json: bool) -> None:
    if as_json:
        write_json(schedule_json(rec))
        return
    fields: list[tuple[str, Any]] = [
        ("schedule", rec.id),
        ("workflow", f"{rec.workflow} v{rec.workflow_version}"),
        ("cron", f"{rec.cron} ({rec.timezone})"),
        ("state", "paused" if rec.paused else "active"),
        ("overlap", rec.overlap),
        ("catchup", _duration(rec.catchup)),
        ("pool", rec.pool),
        ("next tick", iso(rec.next_fire_at)),
        ("last tick", iso(rec.last_tick)),
        ("last run", rec.last_run_id),
        ("buffered tick", iso(rec.buffered_tick)),
        ("started", rec.started),
        ("skipped (missed)", rec.skipped_missed),
        ("skipped (overlap)", rec.skipped_overlap),
        ("arguments", msgspec.json.encode(rec.input).decode()),
    ]
    width = max(len(k) for k, _ in fields)
    for key, value in fields:
        if value is not None:
            write(f"{key.ljust(width)}  {value}\n")


async def _on_schedule(ns: argparse.Namespace,
                       call: Callable[[Starflow], Awaitable[ScheduleRecord]]) -> int:
    """Open the app, ``call`` it, print the schedule it returns."""
    async with open_app(ns, must_exist=True) as sf:
        rec = await call(sf)
    _print_schedule(rec, ns.json)
    return EXIT_OK


@command("show", group="schedules", help="one schedule's settings, next tick and counters",
         args=[app_args, db_args], configure=_id_arg)
async def _schedules_show(ns: argparse.Namespace) -> int:
    return await _on_schedule(ns, lambda sf: sf.get_schedule(ns.schedule_id))


@command("pause", group="schedules", help="stop firing a schedule's ticks",
         args=[app_args, db_args], configure=_id_arg)
async def _schedules_pause(ns: argparse.Namespace) -> int:
    return await _on_schedule(ns, lambda sf: sf.pause_schedule(ns.schedule_id))


@command("resume", group="schedules",
         help="fire a paused schedule again, from its next tick (no catch-up)",
         args=[app_args, db_args], configure=_id_arg)
async def _schedules_resume(ns: argparse.Namespace) -> int:
    return await _on_schedule(ns, lambda sf: sf.resume_schedule(ns.schedule_id))


@command("delete", group="schedules", help="delete a schedule (its runs are kept)",
         args=[app_args, db_args], configure=_id_arg)
async def _schedules_delete(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        await sf.delete_schedule(ns.schedule_id)
    if ns.json:
        write_json({"deleted": ns.schedule_id})
    else:
        write(f"deleted schedule {ns.schedule_id}\n")
    return EXIT_OK


@command("trigger", group="schedules", help="queue a run of a schedule now",
         args=[app_args, db_args], configure=_id_arg)
async def _schedules_trigger(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        handle = await sf.trigger_schedule(ns.schedule_id)
    if ns.json:
        write_json({"run_id": handle.run_id, "status": handle.status})
    else:
        write(f"{handle.run_id} {handle.status}\n")
    return EXIT_OK


@command("pools", help="pool limits, pause and current use (queued, executing, claims in "
                       "window); pools pause|resume NAME",
         args=[app_args, db_args], configure=json_flag)
async def _pools(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        pools = await sf.pools()
    if ns.json:
        write_json([pool_json(p) for p in pools])
        return EXIT_OK
    if not pools:
        sys.stderr.write("no pools with limits or queued runs\n")
        return EXIT_OK

    def limit(used: int, cap: int | None) -> str:
        return f"{used}/{cap}" if cap is not None else str(used)

    write(render_table(
        ["pool", "state", "queued", "executing", "rate", "key concurrency", "key rate",
         "claims"],
        [(p.pool, "paused" if p.limits and p.limits.paused else "active", p.queued,
          limit(p.active, p.limits.concurrency if p.limits else None)
          + (f" (+{p.kept} kept)" if p.kept else ""),
          (f"{p.claimed_in_window}/{p.limits.rate_limit} per "
           f"{_duration(p.limits.rate_period)}")
          if p.limits and p.limits.rate_limit is not None else None,
          p.limits.key_concurrency if p.limits else None,
          (f"{p.limits.key_rate_limit} per {_duration(p.limits.key_rate_period)}")
          if p.limits and p.limits.key_rate_limit is not None else None,
          _claim_policy(p.limits))
         for p in pools]))
    return EXIT_OK


def _claim_policy(limits: PoolLimits | None) -> str:
    """How a pool's claims are ordered and its slots kept (``starflow pools``)."""
    if limits is None or not limits.fair:
        policy = "oldest first"
    else:
        weights = ", ".join(f"{k}={w}" for k, w in (limits.key_weights or {}).items())
        policy = "fair" + (f" ({weights})" if weights else "")
    return policy + ("; paused runs keep their slot" if limits and limits.keep_slot else "")


def _pool_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pool", metavar="NAME")
    json_flag(parser)


def _print_pool(pool: str, limits: PoolLimits | None, as_json: bool) -> None:
    paused = bool(limits and limits.paused)
    if as_json:
        write_json({"pool": pool, "paused": paused})
    else:
        write(f"pool {pool}: {'paused' if paused else 'active'}\n")


@command("pause", group="pools",
         help="stop claims of a pool's queued runs (its running runs finish)",
         args=[app_args, db_args], configure=_pool_arg)
async def _pools_pause(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        limits = await sf.pause_pool(ns.pool)
    _print_pool(ns.pool, limits, ns.json)
    return EXIT_OK


@command("resume", group="pools", help="let workers claim a paused pool's runs again",
         args=[app_args, db_args], configure=_pool_arg)
async def _pools_resume(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        limits = await sf.resume_pool(ns.pool)
    _print_pool(ns.pool, limits, ns.json)
    return EXIT_OK
