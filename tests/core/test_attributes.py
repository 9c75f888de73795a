"""Searchable run attributes: set in workflow code (recorded, replay-safe), found with
list_runs(attributes=...) on every adapter, and an index lookup on PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from starflow import (
    InvalidArgument,
    RunNotFound,
    Starflow,
    set_attributes,
    step,
    wait_for,
    workflow,
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_set_and_find_by_attributes(sf: Starflow) -> None:
    step_name = unique("attr-step")

    @step(name=step_name)
    async def work() -> None:
        return None

    @workflow(name=unique("attr-wf"))
    async def order(customer: str, region: str) -> str:
        set_attributes(customer=customer, region=region, priority=1)
        await work()
        await wait_for("go")
        set_attributes(region="us")  # replaces the value, after the wake
        return customer

    a = await sf.run(order, "c-42", "eu")
    b = await sf.run(order, "c-7", "eu")
    assert a.status == b.status == "paused"
    found = await sf.list_runs(attributes={"customer": "c-42"})
    assert [r.id for r in found] == [a.run_id]
    both = await sf.list_runs(attributes={"region": "eu"})
    assert {r.id for r in both} == {a.run_id, b.run_id}
    assert [r.id for r in await sf.list_runs(attributes={"region": "eu", "customer": "c-7"})
            ] == [b.run_id]
    assert [r.id for r in await sf.list_runs(attributes={"priority": 1})] == [b.run_id,
                                                                             a.run_id]
    assert await sf.list_runs(attributes={"priority": "1"}) == []  # types differ
    done = await sf.signal(a.run_id, "go")
    assert done.status == "success"
    assert [r.id for r in await sf.list_runs(attributes={"region": "us"})] == [a.run_id]
    assert [r.id for r in await sf.list_runs(attributes={"region": "eu"})] == [b.run_id]
    # Recorded once each: the replay after the wake wrote nothing more.
    nodes = [e.node_id for e in await sf.events(a.run_id) if e.node_id
             and e.node_id.startswith("attributes")]
    assert nodes == ["attributes#1", "attributes#2"]


async def test_bad_attributes_are_refused(sf: Starflow) -> None:
    @workflow(name=unique("attr-bad"))
    async def wf(kind: int) -> str:
        try:
            if kind == 0:
                set_attributes()
            elif kind == 1:
                set_attributes(amount=1.5)
            else:
                set_attributes(note="x" * 300)
        except InvalidArgument as exc:
            return str(exc)
        return "accepted"

    for kind in range(3):
        handle = await sf.run(wf, kind)
        assert handle.status == "success" and handle.result != "accepted"
        assert not [e for e in await sf.events(handle.run_id) if e.node_id]
    with pytest.raises(InvalidArgument, match="list_runs"):
        await sf.list_runs(attributes={"a": None})  # type: ignore[dict-item]


async def test_attributes_are_per_workspace(db_url: str, workspace_id: str) -> None:
    if db_url.startswith("memory"):
        pytest.skip("a private in-memory database cannot be shared by two apps")
    name = unique("attr-ws")

    @workflow(name=name)
    async def tagged() -> None:
        set_attributes(customer="shared")

    async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False) as one, \
            Starflow.open(db_url, workspace_id=workspace_id + "-b", maintenance=False) as two:
        mine = await one.run(tagged)
        theirs = await two.run(tagged)
        assert [r.id for r in await one.list_runs(attributes={"customer": "shared"})
                ] == [mine.run_id]
        assert [r.id for r in await two.list_runs(attributes={"customer": "shared"})
                ] == [theirs.run_id]


async def test_attributes_set_at_start_are_found_and_read_back(sf: Starflow) -> None:
    """#30: the caller sets attributes with the start; the workflow may replace them."""

    @workflow(name=unique("attr-start"))
    async def order(region: str) -> str:
        await wait_for("go")
        set_attributes(region=region)
        return region

    tenant = unique("tenant")
    queued = await sf.options(attributes={"tenant": tenant, "tier": 2}).start(order, "us")
    inline = await sf.run(order, "eu", attributes={"tenant": tenant, "vip": True})
    assert inline.status == "paused"
    assert await sf.get_attributes(queued.run_id) == {"tenant": tenant, "tier": 2}
    assert await sf.get_attributes(inline.run_id) == {"tenant": tenant, "vip": True}
    found = await sf.list_runs(attributes={"tenant": tenant})
    assert {r.id for r in found} == {queued.run_id, inline.run_id}
    assert [r.id for r in await sf.list_runs(attributes={"vip": True, "tenant": tenant})
            ] == [inline.run_id]
    await sf.signal(inline.run_id, "go")
    assert await sf.get_attributes(inline.run_id) == {"tenant": tenant, "vip": True,
                                                      "region": "eu"}
    plain = await sf.run(order, "us")
    assert await sf.get_attributes(plain.run_id) == {}


async def test_bad_start_attributes_write_nothing(sf: Starflow) -> None:
    name = unique("attr-start-bad")

    @workflow(name=name)
    async def wf() -> None:
        return None

    for bad in ({}, {"amount": 1.5}, {"note": "x" * 300}, {"": "x"}):
        with pytest.raises(InvalidArgument, match="attributes"):
            await sf.options(attributes=bad).start(wf)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="attributes"):
            await sf.run(wf, attributes=bad)
    assert await sf.list_runs(template_id=name) == []  # nothing written
    with pytest.raises(RunNotFound):
        await sf.get_attributes(str(uuid.uuid4()))
