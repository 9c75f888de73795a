"""The claim rule of a pool with stored limits (#18), decided once for both SQL adapters.

What a claim of a limited pool may take is decided by :func:`pick_claims`
(oldest first) or, for a fair pool (#30), by :func:`fair_keys` and
:func:`fair_pick`, inside each dialect's claim transaction (PostgreSQL: with
the pool's limits row locked ``FOR UPDATE``; SQLite: inside the writer's
``BEGIN IMMEDIATE``), so a limit is never checked in one transaction and spent
in another. The SQL of the counts and candidates is in
:mod:`starflow.adapters._sql` and :mod:`starflow.adapters.queries`.

The fair claim is weighted round robin by virtual time (stride scheduling):
each key has a *pass*, its weighted service so far; a claim takes from the
key with the lowest pass and adds ``1 / weight`` to it. The pool's *virtual
time* is the pass the last claim started from; a key never seen, or idle
while others were served, stands at the virtual time (no credit piles up
while a key has nothing queued), so only keys served ahead of it need a
stored pass (``starflow_pool_keys``; the rest are trimmed).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..records import PoolLimits

__all__ = [
    "NO_KEY",
    "Candidate",
    "FairPick",
    "KeyHead",
    "Queued",
    "fair_keys",
    "fair_pick",
    "full_keys",
    "key_blocked",
    "merge_claims",
    "pick_claims",
    "room_left",
    "scan_size",
    "take_holders",
]

#: The fair claim's name for the runs without a concurrency key (one share
#: together); no key can be empty.
NO_KEY = ""


class Candidate(msgspec.Struct, frozen=True):
    """A queued run a limited claim considers (in claim order)."""

    id: str
    runner_pool: str | None
    concurrency_key: str | None


class Queued(msgspec.Struct, frozen=True):
    """A queued run in claim order: ``(-priority, started_at)`` sorts it."""

    id: str
    priority: int
    started_at: Any  # datetime (PostgreSQL) or its fixed-format text (SQLite)

    @property
    def order(self) -> tuple[int, Any]:
        return (-self.priority, self.started_at)


class KeyHead(msgspec.Struct, frozen=True):
    """A concurrency key with claimable runs in a fair pool, and its first run's place."""

    key: str  # NO_KEY: the runs without a key
    priority: int
    started_at: Any


class FairPick(msgspec.Struct, frozen=True):
    """What a fair claim takes: runs in pick order, the new passes of the keys
    it served and the pool's new virtual time."""

    runs: list[Queued]
    passes: dict[str, float]
    vtime: float


def key_blocked(key: str, limits: PoolLimits, key_active: Mapping[str, int],
                key_recent: Mapping[str, int]) -> bool:
    """Whether ``key``'s runs may not be claimed now (its concurrency or rate is spent)."""
    if key == NO_KEY:
        return False
    if limits.key_concurrency is not None and key_active.get(key, 0) >= limits.key_concurrency:
        return True
    return (limits.key_rate_limit is not None
            and key_recent.get(key, 0) >= limits.key_rate_limit)


def fair_keys(heads: Sequence[KeyHead], limits: PoolLimits, *, vtime: float,
              passes: Mapping[str, float], key_active: Mapping[str, int],
              key_recent: Mapping[str, int], limit: int) -> list[str]:
    """The at most ``limit`` keys a fair claim of ``limit`` runs can take from.

    Priority first, then the least served (pass), then the key's first run in
    claim order; no key past these can be reached: before a pick reaches a key
    after them in that order, each of these was picked at least once. Returned
    in the claim order of their first runs, which breaks ties in :func:`fair_pick`.
    """
    open_ = [h for h in heads if not key_blocked(h.key, limits, key_active, key_recent)]
    open_.sort(key=lambda h: (-h.priority, max(passes.get(h.key, vtime), vtime),
                              h.started_at))
    chosen = open_[:limit]
    chosen.sort(key=lambda h: (-h.priority, h.started_at))
    return [h.key for h in chosen]


def fair_pick(queued: Mapping[str, Sequence[Queued]], keys: Sequence[str], limits: PoolLimits,
              *, vtime: float, passes: Mapping[str, float], key_active: Mapping[str, int],
              key_recent: Mapping[str, int], budget: int | None, limit: int) -> FairPick:
    """Weighted round robin over ``keys`` within a priority level: each pick takes
    the next run of highest priority and, among the keys whose next run has that
    priority, of the key with the lowest pass, and adds ``1 / weight`` to it.

    Args:
        queued: Per key, its claimable runs in claim order (at most ``limit``).
        keys: The keys to take from (:func:`fair_keys`): of equal priority and
            pass, the first in this order goes first.
        limits: The pool's limits (weights, per-key concurrency and rate).
        vtime: The pool's virtual time.
        passes: Stored passes (a key without one stands at ``vtime``).
        key_active: Runs executing (or keeping their slot) per key.
        key_recent: Claims within the key rate window per key.
        budget: Runs the pool may still claim (None: unbounded).
        limit: Most runs to take.
    """
    active = dict(key_active)
    recent = dict(key_recent)
    taken: list[Queued] = []
    served: dict[str, float] = {}
    heap = [(-runs[0].priority, max(passes.get(k, vtime), vtime), i, k)
            for i, k in enumerate(keys) if (runs := queued.get(k))]
    heapq.heapify(heap)
    nxt = dict.fromkeys(keys, 0)
    while heap and len(taken) < limit and (budget is None or budget > 0):
        _, start, i, key = heapq.heappop(heap)
        if key_blocked(key, limits, active, recent):
            continue  # out of room: the key drops out of this claim
        runs = queued[key]
        taken.append(runs[nxt[key]])
        nxt[key] += 1
        active[key] = active.get(key, 0) + 1
        recent[key] = recent.get(key, 0) + 1
        vtime = max(vtime, start)
        served[key] = start + 1.0 / limits.weight(key)
        if nxt[key] < len(runs):
            heapq.heappush(heap, (-runs[nxt[key]].priority, served[key], i, key))
        if budget is not None:
            budget -= 1
    return FairPick(runs=taken, passes=served, vtime=vtime)


def merge_claims(first: Sequence[Queued], other: Sequence[Queued], limit: int) -> list[str]:
    """``first`` (in its own order) interleaved with ``other`` by claim order:
    a run of ``other`` goes before the next of ``first`` if it is ahead of it in
    claim order (runs queued for any pool keep their turn beside a fair pick)."""
    out: list[str] = []
    i = j = 0
    while len(out) < limit and (i < len(first) or j < len(other)):
        if j < len(other) and (i >= len(first) or other[j].order < first[i].order):
            out.append(other[j].id)
            j += 1
        else:
            out.append(first[i].id)
            i += 1
    return out


def pick_claims(candidates: Sequence[Candidate], limits: PoolLimits, *, limit: int,
                active: int, claimed_in_window: int, key_active: Mapping[str, int],
                key_recent: Mapping[str, int] | None = None) -> list[str]:
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
        key_recent: Claims per concurrency key within the key rate window.
    """
    budget = room_left(limits, active, claimed_in_window)
    keys = dict(key_active)
    recent = dict(key_recent or {})
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
        if key is not None:
            if key_blocked(key, limits, keys, recent):
                continue
            keys[key] = keys.get(key, 0) + 1
            recent[key] = recent.get(key, 0) + 1
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


def full_keys(limits: PoolLimits, key_active: Mapping[str, int],
              key_recent: Mapping[str, int] | None = None) -> list[str]:
    """Concurrency keys already at ``key_concurrency`` or at ``key_rate_limit``
    (their runs are not candidates)."""
    return sorted(k for k in {*key_active, *(key_recent or {})}
                  if key_blocked(k, limits, key_active, key_recent or {}))


def scan_size(limit: int, limits: PoolLimits) -> int:
    """Candidates a limited claim reads: more than ``limit`` when keys may pass some over."""
    if limits.key_concurrency is None and limits.key_rate_limit is None:
        return limit
    return max(limit * 4, 32)


def take_holders(rows: Sequence[tuple[Queued, str | None]], limits: PoolLimits, *,
                 recent: int, key_recent: dict[str, int]) -> tuple[list[Queued], int]:
    """The runs queued again that kept their slot (``keep_slot``) a claim takes.

    They need no room of the concurrency limits (they are counted there
    already), but the rate limits hold: taken in claim order while the pool's
    and their key's rate leave room. ``key_recent`` is updated in place.

    Returns:
        The runs taken, and the pool's claims in the rate window with them.
    """
    taken: list[Queued] = []
    if limits.paused:
        return taken, recent
    for run, key in rows:
        if limits.rate_limit is not None and recent >= limits.rate_limit:
            break
        if key is not None and limits.key_rate_limit is not None:
            if key_recent.get(key, 0) >= limits.key_rate_limit:
                continue
            key_recent[key] = key_recent.get(key, 0) + 1
        taken.append(run)
        recent += 1
    return taken, recent
