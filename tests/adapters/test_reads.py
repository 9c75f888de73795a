"""The port's reads: declared once (``@read`` in base.py), answered by every adapter.

A read's body in :class:`WorkflowStateAdapter` is what the null adapter answers;
the adapters that store override every read, and :class:`DelegatingAdapter`
forwards every read without a line of its own. So a new read is written in
base.py, ``sql/queries.py`` and ``sql/adapter.py``, and nowhere else.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from typing import Any

import pytest

from starflow.adapters.base import READS, WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.null import NullWorkflowStateAdapter
from starflow.adapters.pages import RunPageQuery
from starflow.adapters.postgres import PostgresWorkflowStateAdapter
from starflow.adapters.sqlite import LocalWorkflowStateAdapter

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _defined_by(cls: type, name: str) -> type:
    return next(c for c in cls.__mro__ if name in vars(c))


class TestDeclared:
    def test_the_reads_are_found(self) -> None:
        assert {"get_run", "list_runs", "read_stream", "queue_stats", "session_get"} <= set(READS)
        assert len(READS) == len(set(READS)) >= 30

    def test_no_read_is_left_abstract(self) -> None:
        assert not set(READS) & set(WorkflowStateAdapter.__abstractmethods__)

    @pytest.mark.parametrize("adapter", [LocalWorkflowStateAdapter, PostgresWorkflowStateAdapter],
                             ids=["sqlite", "postgres"])
    @pytest.mark.parametrize("name", READS)
    def test_an_adapter_that_stores_answers_every_read(self, adapter: type, name: str) -> None:
        assert _defined_by(adapter, name) is not WorkflowStateAdapter, (
            f"{adapter.__name__} does not answer the read {name}: it would find nothing")

    @pytest.mark.parametrize("name", READS)
    def test_the_delegating_adapter_forwards_every_read(self, name: str) -> None:
        method = getattr(DelegatingAdapter, name)
        assert _defined_by(DelegatingAdapter, name) is DelegatingAdapter
        assert inspect.signature(method) == inspect.signature(getattr(WorkflowStateAdapter, name))
        assert method.__doc__ == getattr(WorkflowStateAdapter, name).__doc__


class _Answers(NullWorkflowStateAdapter):
    """Answers every read with (its name, the arguments it was given)."""


def _answer(name: str) -> Any:
    async def answer(self: Any, *args: Any, **kwargs: Any) -> Any:
        return name, args, kwargs
    return answer


for _name in READS:
    setattr(_Answers, _name, _answer(_name))


class TestForwarded:
    async def test_arguments_and_answers_pass_through_unchanged(self) -> None:
        wrapper = DelegatingAdapter(_Answers())
        got: Any = await wrapper.list_runs(status="failed", limit=3)
        assert got == ("list_runs", (), {"status": "failed", "limit": 3})
        got = await wrapper.read_stream("r1", "tokens", after_seq=2)
        assert got == ("read_stream", ("r1", "tokens"), {"after_seq": 2})
        got = await wrapper.queue_stats(NOW)
        assert got == ("queue_stats", (NOW,), {})

    async def test_a_subclass_overrides_a_read_and_super_forwards(self) -> None:
        seen: list[str] = []

        class Spy(DelegatingAdapter):
            async def get_run(self, run_id: str) -> Any:
                seen.append(run_id)
                return await super().get_run(run_id)

        got: Any = await Spy(_Answers()).get_run("r9")
        assert seen == ["r9"] and got == ("get_run", ("r9",), {})

    async def test_a_wrapped_database_answers_through_the_wrapper(self) -> None:
        inner = LocalWorkflowStateAdapter(":memory:", workspace_id="ws-reads")
        wrapper = DelegatingAdapter(inner)
        await wrapper.open()
        try:
            assert await wrapper.get_run("nope") is None
            page = await wrapper.list_runs_page(RunPageQuery(counts=True))
            assert page.runs == [] and page.counts is not None
        finally:
            await wrapper.close()


class TestNothingStored:
    """The null adapter's answers are the read bodies of the port."""

    async def test_every_read_finds_nothing(self) -> None:
        null = NullWorkflowStateAdapter()
        assert await null.get_run("r") is None
        assert await null.list_runs() == []
        assert await null.get_run_attributes("r") == {}
        assert await null.next_deadline() is None
        lag = await null.outbox_lag(NOW, (1.0, 5.0))
        assert (lag.pending, lag.older_than) == (0, (0, 0))
        page = await null.list_runs_page(RunPageQuery(counts=True))
        assert page.runs == [] and page.counts is not None and not any(page.counts.values())

