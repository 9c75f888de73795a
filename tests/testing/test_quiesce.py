"""quiesce(): a task about to wake through queued callbacks is not idle."""

from __future__ import annotations

import asyncio

import anyio

from starflow_testing._quiesce import quiesce, wait_all_tasks_blocked


async def test_a_wake_up_through_chained_callbacks_is_waited_for() -> None:
    """A future resolved three callbacks later: its waiter looks blocked until then."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    woke: list[bool] = []

    async def waiter() -> None:
        await fut
        woke.append(True)

    def hop(n: int) -> None:
        if n == 0:
            fut.set_result(None)
        else:
            loop.call_soon(hop, n - 1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await wait_all_tasks_blocked()
        assert woke == []
        loop.call_soon(hop, 3)
        await quiesce(None)
        assert woke == [True]


async def test_a_task_group_torn_down_by_an_event_is_waited_for() -> None:
    """The worker's idle wait: an event wakes it, its nested task groups unwind in
    several loop cycles (cancellation, task-done callbacks) before it resumes."""
    for _ in range(20):
        event = anyio.Event()
        resumed: list[bool] = []

        async def idle_wait(ev: anyio.Event = event, out: list[bool] = resumed) -> None:
            async with anyio.create_task_group() as tg:
                async def poll() -> None:
                    async with anyio.create_task_group() as inner:
                        inner.start_soon(anyio.sleep_forever)
                        await anyio.sleep_forever()

                tg.start_soon(poll)
                await ev.wait()
                tg.cancel_scope.cancel()
            out.append(True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(idle_wait)
            await wait_all_tasks_blocked()
            event.set()
            await quiesce(None)
            assert resumed == [True]
