"""The claim rule of a pool with stored limits (#18), decided once for both SQL adapters.

What a claim of a limited pool may take is decided by :func:`pick_claims`,
inside each dialect's claim transaction (PostgreSQL: with the pool's limits
row locked ``FOR UPDATE``; SQLite: inside the writer's ``BEGIN IMMEDIATE``),
so a limit is never checked in one transaction and spent in another. The SQL
of the counts and candidates is in :mod:`starflow.adapters._sql`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from ..records import PoolLimits

__all__ = [
    "Candidate",
    "full_keys",
    "pick_claims",
    "room_left",
    "scan_size",
]


class Candidate(msgspec.Struct, frozen=True):
    """A queued run a limited claim considers (in claim order)."""

    id: str
    runner_pool: str | None
    concurrency_key: str | None


def pick_claims(candidates: Sequence[Candidate], limits: PoolLimits, *, limit: int,
                active: int, claimed_in_window: int, key_active: Mapping[str, int]
                ) -> list[str]:
    """The ids a claim takes from ``candidates`` (highest priority first, FIFO within).

    Runs queued for any pool (``runner_pool`` NULL) are not the pool's and are
    taken freely; runs of the limited pool only while the pool's concurrency,
    its rate limit and their key's concurrency leave room. A run that does not
    fit is passed over, not a barrier: a run of another key behind it may go.

    Args:
        candidates: Queued runs, in claim order.
        limits: The pool's limits.
        limit: Most runs to take.
        active: Runs of the pool executing now.
        claimed_in_window: Runs of the pool claimed within the rate window.
        key_active: Runs executing now per concurrency key.
    """
    budget = room_left(limits, active, claimed_in_window)
    keys = dict(key_active)
    taken: list[str] = []
    for cand in candidates:
        if len(taken) >= limit:
            break
        if cand.runner_pool is None:
            taken.append(cand.id)
            continue
        if budget is not None and budget <= 0:
            continue
        key = cand.concurrency_key
        if key is not None and limits.key_concurrency is not None:
            if keys.get(key, 0) >= limits.key_concurrency:
                continue
            keys[key] = keys.get(key, 0) + 1
        if budget is not None:
            budget -= 1
        taken.append(cand.id)
    return taken


def room_left(limits: PoolLimits, active: int, claimed_in_window: int) -> int | None:
    """How many more runs of the pool may be claimed now (None: unbounded).

    A paused pool (``sf.pause_pool``) has no room: its queued runs wait.
    """
    if limits.paused:
        return 0
    room: int | None = None
    if limits.concurrency is not None:
        room = limits.concurrency - active
    if limits.rate_limit is not None:
        left = limits.rate_limit - claimed_in_window
        room = left if room is None else min(room, left)
    return room


def full_keys(limits: PoolLimits, key_active: Mapping[str, int]) -> list[str]:
    """Concurrency keys already at ``key_concurrency`` (their runs are not candidates)."""
    if limits.key_concurrency is None:
        return []
    return sorted(k for k, n in key_active.items() if n >= limits.key_concurrency)


def scan_size(limit: int, limits: PoolLimits) -> int:
    """Candidates a limited claim reads: more than ``limit`` when keys may pass some over."""
    return limit if limits.key_concurrency is None else max(limit * 4, 32)
