"""Match windows (`q`): a needle near the start, across an internal chunk boundary in the
middle, at the very end, and absent; the library against its raw-SQL floor, the naive peer
(select the value, `lower()` and `find` in Python) and the reference design (`instr`/`strpos`
on the `lower()`ed extracted field, then `substr`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from pdpp_store import NotFound

from ._bench import WINDOW_CHARS, BenchDatabase, Captured, record_id
from ._measure import DATASETS, SLOW_FROM_CHARS, Dataset, measure
from ._text import NEEDLE_PLACES, needles

MATCH_IMPLS = ("library", "floor", "naive", "reference")


@dataclass(frozen=True, slots=True)
class MatchCase:
    q: str
    expected: str | None
    captured: Captured


def library_match(bench: BenchDatabase, ref: str, q: str) -> str | None:
    try:
        return bench.store.read_field_window(bench.grant, ref, "body", q=q).text
    except NotFound as missing:
        if missing.code != "query_not_found":
            raise
        return None


def match_case(bench: BenchDatabase, dataset: Dataset, place: str) -> MatchCase:
    needle = needles(dataset.kind, dataset.chars)[place]
    ref = bench.ref(dataset)

    def make() -> MatchCase:
        expected = library_match(bench, ref, needle.query)
        return MatchCase(
            needle.query, expected, bench.capture(lambda: library_match(bench, ref, needle.query))
        )

    return bench.case(("match", dataset, place), make)


@pytest.mark.parametrize("impl", MATCH_IMPLS)
@pytest.mark.parametrize("place", NEEDLE_PLACES)
@pytest.mark.parametrize("dataset", DATASETS, ids=str)
def test_match(
    bench: BenchDatabase, benchmark: BenchmarkFixture, dataset: Dataset, place: str, impl: str
) -> None:
    case = match_case(bench, dataset, place)
    needle = needles(dataset.kind, dataset.chars)[place]
    if needle.offset is None:
        assert case.expected is None
    else:
        assert case.expected is not None
        assert needle.planted in case.expected
    assert case.captured.chars_returned <= 3 * WINDOW_CHARS
    rid, ref = record_id(dataset), bench.ref(dataset)
    readers: dict[str, Callable[[], object]] = {
        "library": lambda: library_match(bench, ref, case.q),
        "floor": lambda: bench.replay(case.captured.executions),
        "naive": lambda: bench.naive_match(rid, case.q),
        "reference": lambda: bench.reference_match(rid, case.q),
    }
    scans = place != "start"
    result = measure(
        benchmark,
        readers[impl],
        group=f"match {bench.backend} {dataset} {place}",
        slow=dataset.chars >= SLOW_FROM_CHARS and (impl in ("naive", "reference") or scans),
        suite="match",
        backend=bench.backend,
        position=place,
        impl=impl,
        **dataset.coordinates(),
    )
    assert result == (case.captured.rows if impl == "floor" else case.expected)
