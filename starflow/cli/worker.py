"""``starflow worker`` and ``starflow server``: the long-running processes."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from ._base import (
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    app_args,
    command,
    db_args,
    nonnegative_seconds,
    on_signals,
    open_app,
    positive_int,
    positive_seconds,
    resolve_app,
    say,
)

__all__: list[str] = []


def _worker_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pool", default=None,
                        help="claim runs queued for this pool (and runs with no pool)")
    parser.add_argument("--concurrency", type=positive_int, default=16, metavar="N",
                        help="most runs driven at once (default 16)")
    parser.add_argument("--maintenance", action="store_true",
                        help="also run the lease sweep, cron schedules and session-var GC "
                             "in this process (durable timers fire in every worker)")
    parser.add_argument("--no-timers", dest="timers", action="store_false",
                        help="do not fire due durable timers (sleeps, wait_for timeouts) in "
                             "this worker; by default every worker fires them, each once. "
                             "Use it only when a starflow server or a --maintenance worker "
                             "runs against the database")
    parser.add_argument("--grace", type=nonnegative_seconds, default=30.0, metavar="SECONDS",
                        help="on SIGTERM/SIGINT, how long active runs may go on before they "
                             "are cancelled and handed back to the queue (default 30)")
    parser.add_argument("--metrics-port", type=positive_int, default=None, metavar="PORT",
                        help="serve Prometheus metrics on this port (/metrics, all "
                             "interfaces; needs the metrics extra): runs, steps, leases, "
                             "and per pool the queue depth, the oldest queued run's age and "
                             "the runs executing")
    parser.add_argument("--metrics-interval", type=positive_seconds, default=15.0,
                        metavar="SECONDS",
                        help="with --metrics-port, how often this worker reads the queue "
                             "per pool (one query; default 15)")


@command("worker", help="claim queued runs and drive them until SIGTERM/SIGINT",
         args=[app_args, db_args], configure=_worker_args)
async def _worker(ns: argparse.Namespace) -> int:
    if not ns.app:
        raise CommandError("starflow worker needs --app MODULE[:ATTR]: the module that "
                           "defines your workflows", EXIT_USAGE)
    from ..workflow.decorators import registry

    sf = await resolve_app(ns)
    if not registry.names():
        # A worker without workflows would claim nothing, for ever.
        raise CommandError(
            f"--app {ns.app} defines no workflow: a worker claims only runs of the workflows "
            "its --app module registers (@workflow functions it defines or imports); point "
            "--app at that module", EXIT_USAGE)
    server = _serve_metrics(ns.metrics_port) if ns.metrics_port is not None else None
    try:
        async with sf:
            return await _serve(sf, ns)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _serve_metrics(port: int) -> Any:
    """Enable metrics in the default registry and serve it on ``port`` (a thread)."""
    from ..observability import enable_metrics

    try:
        enable_metrics()  # ConfigError without prometheus-client: the extra
        from prometheus_client import start_http_server

        server, _ = start_http_server(port)
    except OSError as exc:
        raise CommandError(f"--metrics-port {port}: cannot listen: {exc}; pick a free "
                           "port", EXIT_USAGE) from None
    say(f"metrics on http://0.0.0.0:{port}/metrics")
    return server


async def _serve(sf: Any, ns: argparse.Namespace) -> int:
    from ..workflow.decorators import registry

    worker = sf.worker(pool=ns.pool, concurrency=ns.concurrency, maintenance=ns.maintenance,
                       grace=ns.grace, timers=ns.timers, metrics_interval=ns.metrics_interval)
    say(f"worker {sf.runner_id} serving {', '.join(registry.names()) or 'no workflows'}"
         f" (pool {ns.pool or 'any'}, concurrency {ns.concurrency}"
         f"{', maintenance' if ns.maintenance else ''}"
         f"{', timers' if worker.fires_timers else ''})")
    if not worker.fires_timers:
        say("warning: --no-timers: this worker fires no durable timers; runs paused on "
            "sleep() or a wait_for() timeout stay paused past their deadline unless a "
            "starflow server or another worker fires them")
    async with anyio.create_task_group() as tg:
        tg.start_soon(on_signals, worker.stop, lambda: worker.stop(0))
        await worker.run()
        tg.cancel_scope.cancel()
    say(f"worker stopped: {worker.completed} run execution(s), "
         f"{worker.released} handed back to the queue")
    return EXIT_OK


def _server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warm", metavar="URL", default=None,
                        help="also drain the mirror outbox to this warm tier (redis://...); "
                             "needs --db, not --app")


@command("server", help="run the lease sweep, durable timers and (with --warm) the outbox "
                        "drainer until SIGTERM/SIGINT",
         args=[app_args, db_args], configure=_server_args)
async def _server(ns: argparse.Namespace) -> int:
    from ..runtime.maintenance import Maintenance

    async with open_app(ns) as sf:
        maintenance = Maintenance(sf.runner, poll=True)
        say(f"server {sf.runner_id}: lease sweep every "
             f"{sf.config.sweep_interval.total_seconds():g} s, durable timers"
             + (", outbox drainer" if maintenance.drainer is not None else ""))
        async with anyio.create_task_group() as tg:
            tg.start_soon(on_signals, tg.cancel_scope.cancel, tg.cancel_scope.cancel)
            await maintenance.run()
    say("server stopped")
    return EXIT_OK
