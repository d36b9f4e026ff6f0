"""``dynagent.deadlines.cancelled``: background tasks stopped without losing the stopper's
own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from dynagent.deadlines import cancelled


async def _slow_to_stop(
    started: asyncio.Event, stopping: asyncio.Event, release: asyncio.Event
) -> None:
    """Runs until cancelled, then takes until ``release`` to clean up."""
    started.set()
    try:
        await asyncio.Event().wait()
    finally:
        stopping.set()
        await asyncio.shield(release.wait())


async def test_tasks_are_cancelled_and_awaited() -> None:
    tasks = [asyncio.create_task(asyncio.Event().wait()) for _ in range(2)]
    await asyncio.sleep(0)
    await cancelled(*tasks)
    assert all(task.cancelled() for task in tasks)


async def test_the_stoppers_cancellation_is_raised_once_the_tasks_have_ended() -> None:
    started, stopping, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    background = asyncio.create_task(_slow_to_stop(started, stopping, release))
    await started.wait()
    after: list[str] = []

    async def stop() -> None:
        await cancelled(background)
        after.append("went on as if not cancelled")

    stopper = asyncio.create_task(stop())
    await stopping.wait()  # the background task is in its clean-up
    stopper.cancel()
    await asyncio.sleep(0)
    assert not stopper.done()  # it still waits for the clean-up to end
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert background.done()
    assert after == []


async def test_a_stopper_already_handling_its_cancellation_is_not_cancelled_again() -> None:
    background = asyncio.create_task(asyncio.Event().wait())
    finished: list[str] = []

    async def shut_down() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await cancelled(background)  # the clean-up of a cancelled task
            finished.append("cleaned up")
            raise

    task = asyncio.create_task(shut_down())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["cleaned up"]
    assert background.cancelled()


async def test_an_error_a_task_raised_is_raised_after_every_task_ended() -> None:
    async def fail() -> None:
        raise ValueError("broken before the stop")

    failed = asyncio.create_task(fail())
    running = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="broken before the stop"):
        await cancelled(failed, running)
    assert running.cancelled()
