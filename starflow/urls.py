"""URL schemes, matched as RFC 3986 (3.1) says: case-insensitively.

Shared by the cold tier (``adapter_from_url``) and the warm tier
(``warm_from_url``), so ``SQLITE:///x.db``, ``PostgreSQL://…``, ``MEMORY://``
and ``Redis://…`` mean what their lowercase forms mean.
"""

from __future__ import annotations

import re

__all__ = ["normalize_scheme", "scheme_of"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def scheme_of(url: str) -> str:
    """The URL's scheme, lowercased (``""`` if it has none)."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else ""


def normalize_scheme(url: str) -> str:
    """``url`` with its scheme lowercased; the rest (paths, passwords) untouched."""
    match = _SCHEME.match(url)
    if match is None:
        return url
    return match.group(1).lower() + url[match.end(1):]
