"""starflow.logger: emits when the run executes new code, stays quiet while it replays."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from starflow import Starflow, logger, step, wait_for, workflow


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def collected() -> Iterator[list[logging.LogRecord]]:
    handler = Collect()
    target = logging.getLogger("starflow.workflow")
    target.addHandler(handler)
    old = target.level
    target.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        target.removeHandler(handler)
        target.setLevel(old)


async def test_logs_once_across_replays(sf: Starflow,
                                        collected: list[logging.LogRecord]) -> None:
    """Each line is emitted once although the body runs again after each wake."""

    step_name = unique("log-step")

    @step(name=step_name)
    async def charge(amount: int) -> int:
        logger.info("charging %s", amount)
        return amount

    @workflow(name=unique("log-wf"))
    async def wf() -> str:
        logger.info("started")
        await charge(5)
        logger.info("charged; waiting")
        first = await wait_for("one")
        logger.info("got %s", first)
        second = await wait_for("two")
        logger.info("got %s", second)
        return "ok"

    handle = await sf.run(wf)
    await sf.signal(handle.run_id, "one", "1")
    done = await sf.signal(handle.run_id, "two", "2")
    assert done.status == "success"
    lines = [r.getMessage() for r in collected]
    assert lines == ["started", "charging 5", "charged; waiting", "got 1", "got 2"]
    assert {r.filename for r in collected} == {"test_workflow_logger.py"}  # the caller
    assert {r.run_id for r in collected} == {handle.run_id}  # type: ignore[attr-defined]
    nodes = [r.node_id for r in collected]  # type: ignore[attr-defined]
    assert nodes == [None, f"step:{step_name}#1", f"step:{step_name}#1",
                     "wait:one#1", "wait:two#1"]


def test_outside_a_run_logs_plainly(collected: list[logging.LogRecord]) -> None:
    logger.warning("no run here")
    assert [r.getMessage() for r in collected] == ["no run here"]
    assert not hasattr(collected[0], "run_id")
