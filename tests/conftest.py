"""Shared fixtures: the anyio backend and the adapter matrix."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter

POSTGRES_URL = os.environ.get(
    "STARFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
#: Set in CI: a missing PostgreSQL fails the suite instead of skipping.
REQUIRE_POSTGRES = bool(os.environ.get("STARFLOW_REQUIRE_POSTGRES"))

#: A PgBouncer in ``pool_mode = transaction`` in front of that PostgreSQL (.ci/run starts one).
PGBOUNCER_URL = os.environ.get(
    "STARFLOW_TEST_PGBOUNCER_URL", "postgresql://postgres@127.0.0.1:6432/test"
)
#: Set in CI: a missing PgBouncer fails the pooler tests instead of skipping them.
REQUIRE_PGBOUNCER = bool(os.environ.get("STARFLOW_REQUIRE_PGBOUNCER"))

_reachable: dict[str, bool] = {}


def service_available(url: str, default_port: int) -> bool:
    """Whether something answers at ``url``'s host and port (checked once per session)."""
    if url not in _reachable:
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        try:
            with socket.create_connection(
                    (parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1):
                _reachable[url] = True
        except OSError:
            _reachable[url] = False
    return _reachable[url]


def require_service(name: str, url: str, default_port: int, *, required: bool,
                    url_variable: str) -> None:
    """Skip (locally) or fail (when ``required``, as in CI) if the service is unreachable."""
    if service_available(url, default_port):
        return
    if required:
        pytest.fail(f"{name} is required in CI but not reachable at {url}")
    pytest.skip(f"no {name} at {url} (set {url_variable})")


def postgres_available() -> bool:
    """Whether the test PostgreSQL answers."""
    return service_available(POSTGRES_URL, 5432)


def require_postgres() -> None:
    """Skip (locally) or fail (in CI) when PostgreSQL is not reachable."""
    require_service("PostgreSQL", POSTGRES_URL, 5432, required=REQUIRE_POSTGRES,
                    url_variable="STARFLOW_TEST_POSTGRES_URL")


def run_bench(script: str, kind: str, *args: str, timeout: float = 120
              ) -> subprocess.CompletedProcess[str]:
    """Run ``bench/<script>`` with ``--db kind`` and ``args`` against the test
    databases (PostgreSQL required for ``postgres``); its output, unchecked."""
    if kind == "postgres":
        require_postgres()
    bench = Path(__file__).resolve().parent.parent / "bench" / script
    env = {**os.environ, "STARFLOW_TEST_POSTGRES_URL": POSTGRES_URL}
    return subprocess.run([sys.executable, str(bench), "--db", kind, *args],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)


def require_pgbouncer() -> None:
    """Skip (locally) or fail (in CI) when the test PgBouncer is not reachable."""
    require_service("PgBouncer", PGBOUNCER_URL, 6432, required=REQUIRE_PGBOUNCER,
                    url_variable="STARFLOW_TEST_PGBOUNCER_URL")


def pgbouncer_url(user: str | None = None, **params: str) -> str:
    """The test PgBouncer's URL with ``?pooler=transaction`` (and ``params``), as ``user``."""
    from urllib.parse import urlencode, urlsplit, urlunsplit

    url = PGBOUNCER_URL
    if user is not None:
        parts = urlsplit(url)
        url = urlunsplit(parts._replace(netloc=f"{user}@{parts.hostname}:{parts.port}"))
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}{urlencode({'pooler': 'transaction', **params})}"


#: A login role that does not own the tables (RLS applies); .ci/run lists it in
#: PgBouncer's auth_file.
POOLER_RLS_ROLE = "starflow_pooler_rls"
_rls_role_ready: list[bool] = []


def ensure_pooler_rls_role() -> None:
    """Create :data:`POOLER_RLS_ROLE` with table grants (once per session), after
    migrating the test database as its owner."""
    if _rls_role_ready:
        return
    import asyncio
    import threading

    async def setup() -> None:
        import asyncpg

        owner = adapter_from_url(POSTGRES_URL)
        await owner.open()  # migrated, so the grants cover every table
        await owner.close()
        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1",
                                       POOLER_RLS_ROLE):
                await conn.execute(f'CREATE ROLE "{POOLER_RLS_ROLE}" LOGIN')
            await conn.execute(f'GRANT USAGE ON SCHEMA public TO "{POOLER_RLS_ROLE}"')
            await conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA '
                               f'public TO "{POOLER_RLS_ROLE}"')
            await conn.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public '
                               f'TO "{POOLER_RLS_ROLE}"')
        finally:
            await conn.close()

    errors: list[BaseException] = []

    def run() -> None:  # its own thread: a test's event loop may be running here
        try:
            asyncio.run(setup())
        except BaseException as exc:  # reported in the calling thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    _rls_role_ready.append(True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def adapter_url(kind: str, tmp_path: Path) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'starflow.db'}"
    if kind == "postgres":
        require_postgres()
        return POSTGRES_URL
    if kind == "pgbouncer":  # PostgreSQL through a transaction pooler
        require_pgbouncer()
        return pgbouncer_url()
    if kind == "pgbouncer-rls":  # ...as a role Row Level Security applies to
        require_postgres()
        require_pgbouncer()
        ensure_pooler_rls_role()
        return pgbouncer_url(user=POOLER_RLS_ROLE)
    if kind == "null":
        return "null://"
    raise ValueError(kind)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def adapter_kind(request: pytest.FixtureRequest) -> str:
    """Every durable adapter kind."""
    return str(request.param)


@pytest.fixture
def workspace_id() -> str:
    """A fresh tenant per test: isolation on a shared PostgreSQL comes from tenancy."""
    return f"ws-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def db_url(adapter_kind: str, tmp_path: Path) -> str:
    return adapter_url(adapter_kind, tmp_path)


@pytest.fixture
async def adapter(db_url: str, workspace_id: str) -> AsyncIterator[WorkflowStateAdapter]:
    """An open adapter of each durable kind, scoped to a fresh workspace."""
    a = adapter_from_url(db_url, workspace_id=workspace_id)
    await a.open()
    try:
        yield a
    finally:
        await a.close()
