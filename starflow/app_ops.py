"""Operating an open :class:`~starflow.Starflow`: schedules, pool limits, the
warm tier, session variables, worker jobs, sweeps and retention."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from .config import int_problem
from .limits import check_name, duration_problem, name_problem

__all__ = ["check_session_names"]


def check_session_names(session_id: object, key: object) -> None:
    """A session variable's id and key: storable names (both indexed)."""
    check_name("session_id", session_id)
    check_name("key", key)


#: The most weights one pool stores (``set_pool_limits(key_weights=)``).
MAX_KEY_WEIGHTS = 10_000
#: The largest weight of one key.
MAX_KEY_WEIGHT = 1_000


def _rate_limit(param: str, value: object, problems: list[str]
                ) -> tuple[int | None, timedelta | None]:
    """``(n, period)`` of a rate limit argument, or its problem appended."""
    if value is None:
        return None, None
    if (not isinstance(value, tuple) or len(value) != 2
            or int_problem("n", value[0], 1) is not None
            or not isinstance(value[1], timedelta)
            or value[1] < timedelta(milliseconds=1)):
        problems.append(f"{param} must be (n, period): an int n >= 1 and a "
                        f"timedelta period >= 1 ms: {value!r}")
        return None, None
    if (problem := duration_problem(f"{param} period", value[1])) is not None:
        problems.append(problem)
        return None, None
    return value[0], value[1]


def _key_weights(value: object, fair: object, problems: list[str]) -> dict[str, int] | None:
    """The ``key_weights`` to store (None: none), or their problems appended."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(f"key_weights must be a mapping of concurrency key to weight: {value!r}")
        return None
    if fair is not True:
        problems.append("key_weights needs fair=True (weights share a fair pool's claims)")
    if len(value) > MAX_KEY_WEIGHTS:
        problems.append(f"key_weights has {len(value)} keys; the most is {MAX_KEY_WEIGHTS} "
                        "(keys without a weight weigh 1)")
        return None
    weights: dict[str, int] = {}
    for key, weight in value.items():
        problem = name_problem("key_weights key", key)
        if problem is None and (isinstance(weight, bool) or not isinstance(weight, int)
                                or not 1 <= weight <= MAX_KEY_WEIGHT):
            problem = (f"key_weights[{key!r}] must be an int from 1 to {MAX_KEY_WEIGHT}: "
                       f"{weight!r}")
        if problem is not None:
            problems.append(problem)
        else:
            weights[key] = weight
    return dict(sorted(weights.items())) or None
