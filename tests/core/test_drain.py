"""The drain's guard: nothing while the service serves; once the drain begins, a block
still inside it at the deadline is cancelled and answered ``ServiceStopping``, and only
that block: a stream's write between two guarded waits, or a cancellation from
elsewhere, is left as it is. (The whole process under a real shutdown:
``tests/reliability/test_lifecycle.py``.)"""

from __future__ import annotations

import asyncio

import pytest

from dynagent.core.drain import Drain
from dynagent.exceptions import ServiceStopping


async def _next_turn() -> None:
    """Suspend until the loop's next turn (a wait a deadline can cut)."""
    resumed = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(resumed.set_result, None)
    await resumed


async def test_while_serving_a_guard_changes_nothing() -> None:
    drain = Drain()
    async with drain.guard("t1"):
        assert drain.running == 1
        await _next_turn()
    assert drain.running == 0
    with pytest.raises(TimeoutError):  # a block's own timeout stays its own
        async with drain.guard("t1"):
            raise TimeoutError
    with pytest.raises(KeyError):
        async with drain.guard("t1"):
            raise KeyError("x")
    assert drain.running == 0


async def test_a_block_inside_when_the_drain_begins_is_stopped_at_the_deadline() -> None:
    drain = Drain()
    never = asyncio.Event()
    entered = asyncio.Event()

    async def run() -> None:
        async with drain.guard("trace-1"):
            entered.set()
            await never.wait()

    task = asyncio.create_task(run())
    await entered.wait()
    drain.begin(0.05)
    with pytest.raises(ServiceStopping) as raised:
        await task
    assert raised.value.trace_id == "trace-1"
    assert "listen.drain_seconds = 0.05 s" in raised.value.message
    assert drain.running == 0


async def test_a_block_entered_after_the_drain_began_has_what_is_left() -> None:
    drain = Drain()
    drain.begin(0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ServiceStopping):
        async with drain.guard("t2"):
            await asyncio.Event().wait()
    assert loop.time() - started < 5
    drain.begin(0)  # past the deadline: stopped at its first wait
    with pytest.raises(ServiceStopping):
        async with drain.guard("t3"):
            await asyncio.Event().wait()


async def test_a_block_that_ends_in_time_is_not_touched_by_the_deadline() -> None:
    drain = Drain()
    drain.begin(5)
    async with drain.guard("t4"):
        await _next_turn()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_reused_guard_stops_only_the_wait_it_is_in_not_what_runs_between() -> None:
    drain = Drain()
    guard = drain.guard("stream")
    outside = asyncio.Event()
    between_done = asyncio.Event()
    outcome: list[str] = []

    go_on = asyncio.Event()

    async def stream() -> None:
        async with guard:
            await _next_turn()
        outside.set()
        await go_on.wait()  # the write of an event, while the deadline passes: not cut
        between_done.set()
        try:
            async with guard:
                await asyncio.Event().wait()
        except ServiceStopping:
            outcome.append("stopped")

    task = asyncio.create_task(stream())
    await outside.wait()
    assert drain.running == 0
    drain.begin(0)  # past at once: a timer armed for the stream would fire next turn,
    asyncio.get_running_loop().call_soon(go_on.set)  # before the stream resumes
    await task
    assert (between_done.is_set(), outcome, drain.running) == (True, ["stopped"], 0)


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    drain = Drain()
    entered = asyncio.Event()

    async def run() -> None:
        async with drain.guard("t5"):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(run())
    await entered.wait()
    drain.begin(30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert drain.running == 0


async def test_the_running_count_follows_blocks_in_and_out() -> None:
    drain = Drain()
    release = asyncio.Event()
    inside = [asyncio.Event() for _ in range(3)]

    async def run(index: int) -> None:
        async with drain.guard(f"t{index}"):
            inside[index].set()
            await release.wait()

    tasks = [asyncio.create_task(run(i)) for i in range(3)]
    for event in inside:
        await event.wait()
    assert drain.running == 3
    release.set()
    await asyncio.gather(*tasks)
    assert drain.running == 0
