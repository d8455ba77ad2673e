"""The read slots of an `AsyncStore` (`_runtime._Slots`): a counting semaphore whose waiters are
served first come first served, each waiting at most the store's busy timeout, with one timer
for all of them; no slot is lost to a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from pdpp_store import StoreError
from pdpp_store._runtime import _Slots

TIMEOUT_S = 0.05


async def _served_in_order() -> tuple[list[int], int]:
    slots = _Slots(1, 30)
    assert slots.take()
    served: list[int] = []

    async def waiter(number: int) -> None:
        await slots.wait()
        served.append(number)
        slots.release()

    waiters = [asyncio.ensure_future(waiter(number)) for number in range(5)]
    await asyncio.sleep(0)  # all queued
    assert not slots.take()  # a newcomer does not pass those who wait
    slots.release()
    await asyncio.gather(*waiters)
    return served, slots.free()


def test_waiters_are_served_first_come_first_served() -> None:
    served, free = asyncio.run(_served_in_order())
    assert served == [0, 1, 2, 3, 4]
    assert free == 1


async def _timed_out() -> tuple[list[str], int, int]:
    slots = _Slots(1, TIMEOUT_S)
    assert slots.take()
    outcomes: list[str] = []

    async def waiter() -> None:
        try:
            await slots.wait()
        except StoreError as error:
            outcomes.append(error.code)
        else:
            outcomes.append("served")
            slots.release()

    waiters = [asyncio.ensure_future(waiter()) for _ in range(3)]
    await asyncio.sleep(0)
    timers = 1 if slots._timer is not None else 0  # one timer for the three of them
    await asyncio.gather(*waiters)
    slots.release()
    return outcomes, timers, slots.free()


def test_a_waiter_is_refused_with_storage_busy_at_the_timeout() -> None:
    outcomes, timers, free = asyncio.run(_timed_out())
    assert outcomes == ["storage_busy"] * 3
    assert timers == 1
    assert free == 1


async def _cancelled_waiters() -> int:
    slots = _Slots(1, 30)
    assert slots.take()
    waiting = asyncio.ensure_future(slots.wait())
    handed = asyncio.ensure_future(slots.wait())
    await asyncio.sleep(0)
    waiting.cancel()  # cancelled while waiting: it held no slot
    slots.release()  # the slot goes to `handed`, which is cancelled before it resumes
    handed.cancel()
    for task in (waiting, handed):
        with pytest.raises(asyncio.CancelledError):
            await task
    return slots.free()


def test_no_slot_is_lost_to_a_cancelled_waiter() -> None:
    assert asyncio.run(_cancelled_waiters()) == 1
