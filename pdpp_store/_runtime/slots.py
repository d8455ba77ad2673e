"""The read slots of an `AsyncStore`: how many of its reads may hold a connection at once.

Rules:
1. Waiters are served first come, first served: a freed slot goes to the oldest waiter
   directly, so a newcomer never takes it from one that waits.
2. Each waiter waits at most the store's busy timeout, then `storage_busy`.
3. No slot is lost: a waiter cancelled just as a slot was handed to it gives it back.
"""

from __future__ import annotations

import asyncio
from collections import deque

from .errors import busy

__all__ = ["_Slots"]


class _Slots:
    """The read slots of an `AsyncStore`: a counting semaphore whose waiters, served first come
    first served, each wait at most `timeout_s` (then `storage_busy`).

    Not `asyncio.Semaphore` under `asyncio.timeout`: that arms (and cancels) a timer for every
    read that waits, which at 16 tasks on 10 slots is most of them, and cost 7.2 µs of loop CPU
    per read against 2.9 µs here (measured, a stand-in read of one loop round trip): a cost only
    the higher concurrency paid, so reads/s on Postgres fell from 4 to 16 tasks. Every waiter
    has the same timeout, so their deadlines come in the order they queued: one timer, armed
    for the oldest waiter's deadline, serves them all. A freed slot goes to the oldest waiter
    directly, so a newcomer never takes it from one that waits."""

    __slots__ = ("_free", "_timeout_s", "_timer", "_timer_loop", "_waiters")

    def __init__(self, slots: int, timeout_s: float) -> None:
        self._free = slots
        self._timeout_s = timeout_s
        self._waiters: deque[tuple[float, asyncio.Future[None]]] = deque()
        """(deadline, future) of each waiter, oldest first (a cancelled one stays until met)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        """The loop `_timer` was armed on: a store used on a later loop (`asyncio.run` per job)
        arms its own, and the timer is cancelled when no one waits, so none outlives its loop."""

    def free(self) -> int:
        """How many slots are free (none, while anyone waits for one)."""
        return self._free

    def take(self) -> bool:
        """Take a free slot, unless none is free or others wait for one (they come first)."""
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Wait for a slot: handed over by `release`, or `storage_busy` at the deadline. A
        waiter cancelled just as a slot was handed to it gives it back: no slot is lost."""
        loop = asyncio.get_running_loop()
        slot = loop.create_future()
        self._waiters.append((loop.time() + self._timeout_s, slot))
        if self._timer is None or self._timer_loop is not loop:  # none, or one of a loop gone
            self._disarm()
            self._arm(loop)
        try:
            await slot
        except asyncio.CancelledError:
            if slot.done() and not slot.cancelled() and slot.exception() is None:
                self.release()
            raise

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_at(self._waiters[0][0], self._expire, loop)
        self._timer_loop = loop

    def _disarm(self) -> None:
        """Cancel the timer: no one waits any more (or it belongs to a loop gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Refuse the waiters whose deadline has come; arm the timer for the next one."""
        self._timer = None
        now = loop.time()
        while self._waiters:
            deadline, slot = self._waiters[0]
            if not slot.done() and deadline > now:
                break
            self._waiters.popleft()
            if not slot.done():
                slot.set_exception(busy("every read connection of this store is in use; retry"))
        if self._waiters:
            self._arm(loop)

    def release(self) -> None:
        """Give a slot back: to the oldest waiter still waiting, else to the free ones."""
        while self._waiters:
            _, slot = self._waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                if not self._waiters:
                    self._disarm()
                return
        self._disarm()
        self._free += 1
