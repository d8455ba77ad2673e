"""The door's deadline work met in slices (`pdpp_store.door._protocol`, rule 7), on uvloop (what
`serve` runs) and on asyncio's own loop: a burst of deadlines is done in order, in slices of at
most `PACED_SLICE_S` (and at least one deadline), with a rest of `PACED_REST_S` between slices,
so that a burst takes a bounded share of the loop's time; a lone deadline is met at once."""

from __future__ import annotations

import asyncio
import itertools
import math
import time

import pytest
import uvloop

from pdpp_store.door import PACED_REST_S, PACED_SLICE_S
from pdpp_store.door._protocol import _Pacer

BASES: dict[str, type[asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.Loop,
    "asyncio": asyncio.SelectorEventLoop,
}
COST_S = 0.00005
"""What each deadline costs here (a 408 costs about 60 us on a loaded runner)."""
BURST = 200

pytestmark = pytest.mark.serial  # the share of the loop's time: nothing else may run


Ran = tuple[int, float, float]
"""A deadline done: its number, when it began and when it ended."""


def _costly(ran: list[Ran], number: int) -> None:
    began = time.perf_counter()
    while time.perf_counter() - began < COST_S:
        pass
    ran.append((number, began, time.perf_counter()))


def _slices(ran: list[tuple[int, float, float]]) -> list[list[tuple[int, float, float]]]:
    """The runs of deadlines done back to back (less than a tenth of a rest apart)."""
    slices = [[ran[0]]]
    for one in ran[1:]:
        if one[1] - slices[-1][-1][2] < PACED_REST_S / 10:
            slices[-1].append(one)
        else:
            slices.append([one])
    return slices


class _Recorded(_Pacer):
    """A pacer that records each slice: when it began, when it ended, how many it did."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ran: list[Ran]) -> None:
        super().__init__(loop)
        self.ran = ran
        self.slices: list[tuple[float, float, int]] = []

    def _slice(self) -> None:
        began, done = time.perf_counter(), len(self.ran)
        super()._slice()
        self.slices.append((began, time.perf_counter(), len(self.ran) - done))


@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_a_burst_of_deadlines_is_met_in_slices_with_rests(
    base: type[asyncio.AbstractEventLoop],
) -> None:
    ran: list[Ran] = []

    async def main() -> tuple[_Recorded, float]:
        pacer = _Recorded(asyncio.get_running_loop(), ran)
        began = time.perf_counter()
        for number in range(BURST):
            pacer.add(lambda number=number: _costly(ran, number))  # type: ignore[misc]
        while len(ran) < BURST:
            await asyncio.sleep(PACED_REST_S)
        return pacer, time.perf_counter() - began

    with asyncio.Runner(loop_factory=base) as runner:
        pacer, took = runner.run(main())
    assert [number for number, _, _ in ran] == list(range(BURST))  # in order, each once
    # A slice begins the next deadline only while its time is left, and each takes at least
    # COST_S: so no slice holds more than fit in its time, plus the one begun last.
    most = math.floor(PACED_SLICE_S / COST_S) + 1
    assert all(1 <= count <= most for _, _, count in pacer.slices), pacer.slices
    assert sum(count for _, _, count in pacer.slices) == BURST
    busy = BURST * COST_S
    assert len(pacer.slices) >= busy / (PACED_SLICE_S + COST_S), len(pacer.slices)
    rests = [later[0] - earlier[1] for earlier, later in itertools.pairwise(pacer.slices)]
    if base is asyncio.SelectorEventLoop:  # its clock counts true time
        assert min(rests) >= PACED_REST_S * 0.9, rests
    # uvloop's clock counts whole milliseconds, so a rest may end early within its first one;
    # on either, the burst's work is at most half of the loop's time (about a fifth on asyncio).
    assert busy / took <= 0.5, (busy, took, pacer.slices)


@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_a_lone_deadline_is_met_in_the_next_turn(base: type[asyncio.AbstractEventLoop]) -> None:
    ran: list[Ran] = []

    async def main() -> int:
        pacer = _Pacer(asyncio.get_running_loop())
        pacer.add(lambda: _costly(ran, 0))
        turns = 0
        while not ran:
            await asyncio.sleep(0)
            turns += 1
        return turns

    with asyncio.Runner(loop_factory=base) as runner:
        assert runner.run(main()) == 1


@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_a_deadline_that_raises_does_not_stop_the_others(
    base: type[asyncio.AbstractEventLoop],
) -> None:
    ran: list[int] = []

    def failing() -> None:
        raise RuntimeError("a deadline failed")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        failed: list[BaseException] = []
        loop.set_exception_handler(lambda _loop, context: failed.append(context["exception"]))
        pacer = _Pacer(loop)
        pacer.add(failing)
        pacer.add(lambda: ran.append(1))
        for _ in range(100):
            await asyncio.sleep(PACED_REST_S)
            if ran:
                break
        pacer.add(lambda: ran.append(2))
        for _ in range(100):
            await asyncio.sleep(PACED_REST_S)
            if len(ran) == 2:
                break
        assert [str(error) for error in failed] == ["a deadline failed"]

    with asyncio.Runner(loop_factory=base) as runner:
        runner.run(main())
    assert ran == [1, 2]
