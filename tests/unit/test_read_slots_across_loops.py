"""`_Slots` used on one event loop after another (`asyncio.run` per job): a slot handed to a
waiter before its deadline leaves no timer behind on the loop that ends, so a waiter on the next
loop still gets `storage_busy` at the store's busy timeout."""

from __future__ import annotations

import asyncio

import pytest

from pdpp_store import StoreError
from pdpp_store._runtime import _Slots

TIMEOUT_S = 0.05


def test_a_waiter_on_a_later_loop_still_times_out() -> None:
    slots = _Slots(1, TIMEOUT_S)

    async def handed_over() -> None:
        assert slots.take()
        waiter = asyncio.ensure_future(slots.wait())
        await asyncio.sleep(0)
        slots.release()  # handed to the waiter before its deadline: the timer stays armed
        await waiter
        slots.release()

    asyncio.run(handed_over())  # the loop closes before the timer fires

    async def waits() -> None:
        assert slots.take()
        await asyncio.wait_for(slots.wait(), 100 * TIMEOUT_S)

    with pytest.raises(StoreError) as refused:
        asyncio.run(waits())
    assert refused.value.code == "storage_busy"
