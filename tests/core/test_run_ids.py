"""Run ids starflow makes are time-ordered UUIDs (version 7), so runs started
close together sit close together in every B-tree keyed by run id (issue #24:
a prune then rewrites a few index pages per batch, not one per run)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import starflow
from starflow import Starflow
from starflow.limits import new_run_id
from starflow_testing import FakeClock

START = datetime(2030, 1, 1, tzinfo=UTC)


@starflow.workflow(name="ids-job")
async def job(n: int) -> int:
    return n


def millis(run_id: str) -> int:
    return uuid.UUID(run_id).int >> 80


class TestNewRunId:
    """``new_run_id`` is RFC 9562's version 7 at the time it is given."""

    def test_layout(self) -> None:
        run_id = new_run_id(START)
        parsed = uuid.UUID(run_id)
        assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
        assert str(parsed) == run_id  # canonical lowercase text
        assert millis(run_id) == int(START.timestamp() * 1000)
        assert new_run_id(START) != run_id  # 74 random bits

    def test_later_is_greater(self) -> None:
        ids = [new_run_id(START + timedelta(milliseconds=i)) for i in range(200)]
        assert ids == sorted(ids)


async def test_started_runs_get_ordered_ids_at_the_clocks_time() -> None:
    """``sf.start`` and ``sf.run`` without a ``run_id``; a given id is kept."""
    clock = FakeClock(START)
    async with Starflow.open("memory://", clock=clock, maintenance=False) as sf:
        ids = []
        for n in range(3):
            ids.append((await sf.start(job, n)).run_id)
            await clock.advance(timedelta(seconds=1))
        ids.append((await sf.run(job, 3)).run_id)
        assert ids == sorted(ids)
        assert [uuid.UUID(i).version for i in ids] == [7] * 4
        assert millis(ids[0]) == int(START.timestamp() * 1000)
        assert millis(ids[3]) == int((START + timedelta(seconds=3)).timestamp() * 1000)
        given = str(uuid.uuid4())
        assert (await sf.start(job, 9, run_id=given)).run_id == given  # yours, unchanged
