"""Property: any JSON-like value round-trips exactly, or is refused with nothing written.

Hypothesis feeds values, names and numbers (NUL, lone surrogates, NaN,
infinities, huge integers, deep nesting included) through ``sf.run``,
``sf.signal``, ``session_set`` and ``list_runs`` on every adapter. Either the
value comes back equal, or a :class:`StarflowError` is raised and no unit was
written. The example budget is fixed and the search derandomized, so the test
takes bounded time and finds the same examples on every run.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starflow import InvalidArgument, Starflow, StarflowError, wait_for, workflow
from starflow.limits import MAX_VALUE_DEPTH

from .conftest import SpyAdapter

T = TypeVar("T")

EXAMPLES = 40
PROPERTY = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: Any code point, lone surrogates (category Cs) included, and the ones that matter most.
characters = st.characters(exclude_categories=())
texts = st.one_of(st.text(characters, max_size=12),
                  st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "#", ""]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30),
                    st.floats(allow_nan=True, allow_infinity=True), texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12)


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


values = st.one_of(json_values,
                   st.integers(MAX_VALUE_DEPTH - 8, MAX_VALUE_DEPTH + 8).map(_nested))


@workflow(name="property-echo")
async def echo(value: Any) -> Any:
    return value


@workflow(name="property-waits")
async def waits() -> Any:
    return await wait_for("go")


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _bad_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(_bad_scalar(v) for v in value)
    if isinstance(value, dict):
        return any(_bad_scalar(k) or _bad_scalar(v) for k, v in value.items())
    return False


def _verdict(value: Any) -> str:
    """The oracle, written independently of the codec: ``refuse`` for what no database
    may be asked to hold, ``accept`` for what both can, ``either`` within the few
    levels of nesting starflow wraps around a value."""
    if _bad_scalar(value) or _depth(value) > MAX_VALUE_DEPTH:
        return "refuse"
    return "accept" if _depth(value) <= MAX_VALUE_DEPTH - 2 else "either"


def _same(stored: Any, given_: Any) -> bool:
    """Equal as JSON: numbers by value (PostgreSQL's jsonb keeps them as decimals, so
    ``1e20`` may come back as the int ``100000000000000000000``)."""
    if isinstance(given_, bool) or isinstance(stored, bool):
        return stored is given_
    if isinstance(given_, int | float) and isinstance(stored, int | float):
        if isinstance(given_, int) and isinstance(stored, int):
            return stored == given_
        return float(stored) == float(given_)
    if isinstance(given_, list):
        return (isinstance(stored, list) and len(stored) == len(given_)
                and all(_same(a, b) for a, b in zip(stored, given_, strict=True)))
    if isinstance(given_, dict):
        return (isinstance(stored, dict) and stored.keys() == given_.keys()
                and all(_same(stored[k], given_[k]) for k in given_))
    return bool(stored == given_)


def _on_loop(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return anyio.from_thread.run(fn, *args)


async def _in_thread(test: Callable[[], None]) -> None:
    """Run a hypothesis test in a worker thread; it drives the app on this loop."""
    await anyio.to_thread.run_sync(test)


class TestRoundTripOrRefused:
    """Every value round-trips exactly or is refused by a StarflowError, nothing written."""

    async def test_run_arguments(self, sf: Starflow, spy: SpyAdapter) -> None:
        @PROPERTY
        @given(values)
        def check(value: Any) -> None:
            before = len(spy.units)
            try:
                handle = _on_loop(sf.run, echo, value)
            except StarflowError:
                assert _verdict(value) != "accept", value
                assert len(spy.units) == before
                return
            assert _verdict(value) != "refuse", value
            assert handle.status == "success"
            assert _same(_on_loop(sf.result, handle.run_id), value)

        await _in_thread(check)

    async def test_signal_payloads(self, sf: Starflow, spy: SpyAdapter) -> None:
        @PROPERTY
        @given(values)
        def check(value: Any) -> None:
            handle = _on_loop(sf.run, waits)
            before = len(spy.units)
            try:
                done = _on_loop(sf.signal, handle.run_id, "go", value)
            except StarflowError:
                assert _verdict(value) != "accept", value
                assert len(spy.units) == before
                assert _on_loop(sf.get_run, handle.run_id).status == "paused"
                _on_loop(sf.cancel, handle.run_id)
                return
            assert _verdict(value) != "refuse", value
            assert done.status == "success"
            assert _same(_on_loop(sf.result, handle.run_id), value)

        await _in_thread(check)

    async def test_session_vars(self, sf: Starflow, spy: SpyAdapter) -> None:
        @PROPERTY
        @given(texts, texts, values)
        def check(session_id: str, key: str, value: Any) -> None:
            before = len(spy.units)
            try:
                _on_loop(sf.session_set, session_id, key, value)
            except StarflowError:
                names_ok = (len(session_id) > 0 and len(key) > 0
                            and not _bad_scalar([session_id, key]))
                assert not names_ok or _verdict(value) != "accept", (session_id, key, value)
                assert len(spy.units) == before
                return
            assert not _bad_scalar([session_id, key]) and _verdict(value) != "refuse"
            assert _same(_on_loop(sf.session_get, session_id, key), value)

        await _in_thread(check)

    async def test_list_runs_filters(self, sf: Starflow, spy: SpyAdapter) -> None:
        _ = await sf.run(echo, 1)

        @PROPERTY
        @given(st.integers(-5, 10**30), st.one_of(st.none(), texts),
               st.sampled_from([None, "success", "paused", "bogus", "\x00"]))
        def check(limit: int, template_id: str | None, status: str | None) -> None:
            try:
                runs = _on_loop(lambda: sf.list_runs(status=status, template_id=template_id,
                                                     limit=limit))
            except InvalidArgument:
                return
            assert 1 <= limit <= 2**31 - 1
            assert all(r.template_id == template_id for r in runs) or template_id is None

        await _in_thread(check)
        assert len(spy.units) >= 1
