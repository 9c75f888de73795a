"""State adapters: the cold tier behind one port.

Drivers are imported lazily: importing ``starflow`` never imports asyncpg or
aiosqlite until an adapter that needs it is opened.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..urls import normalize_scheme, scheme_of
from .base import WorkflowStateAdapter
from .delegating import DelegatingAdapter

__all__ = ["DelegatingAdapter", "WorkflowStateAdapter", "adapter_from_url"]


def adapter_from_url(url: str, *, workspace_id: str = "celestial", env: str = "prod",
                     **options: Any) -> WorkflowStateAdapter:
    """Build the adapter a URL names.

    Schemes: ``sqlite:///path.db``, ``memory://``, ``postgresql://…`` (or
    ``postgres://``), ``null://``; in any case (``SQLITE:///x.db`` too).
    """
    given, scheme, url = url, scheme_of(url), normalize_scheme(url)
    if scheme in ("sqlite", "memory"):
        from .sqlite import LocalWorkflowStateAdapter

        return LocalWorkflowStateAdapter.from_url(url, workspace_id=workspace_id, env=env,
                                                  **options)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresWorkflowStateAdapter

        return PostgresWorkflowStateAdapter(url, workspace_id=workspace_id, env=env, **options)
    if scheme == "null":
        from .null import NullWorkflowStateAdapter

        return NullWorkflowStateAdapter(workspace_id=workspace_id, env=env)
    raise ConfigError(
        f"unsupported database URL {given!r}: use sqlite:///path.db, memory://, "
        "postgresql://user@host/db or null://"
    )
