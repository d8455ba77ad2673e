"""Window reads and record projections, against the naive peer, the reference design and the
raw-SQL floor, at the start, middle and end of fields of every size in the matrix.

Each case first checks, untimed, that the library's read crossed the database boundary with a
bounded amount of text (`BoundaryAudit`), then every design must return the library's text, and
the floor the very rows the library received.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._ops.reads import PREVIEW_CHARS

from ._bench import WINDOW_CHARS, BenchDatabase, Captured, record_id
from ._measure import DATASETS, SLOW_FROM_CHARS, Dataset, measure

POSITIONS = ("start", "middle", "end")
WINDOW_IMPLS = (
    "library-offset",
    "library-cursor",
    "floor-offset",
    "floor-cursor",
    "naive",
    "reference",
)
RECORD_IMPLS = ("library", "floor", "naive", "reference")
BASELINES = ("naive", "reference")


def window_offset(position: str, chars: int) -> int:
    """Where each window starts; the middle one deliberately not on a chunk boundary."""
    return {"start": 0, "middle": chars // 2 + 321, "end": chars - WINDOW_CHARS}[position]


@dataclass(frozen=True, slots=True)
class WindowCase:
    rid: str
    offset: int
    cursor: str
    expected: str
    by_offset: Captured
    by_cursor: Captured


def window_case(bench: BenchDatabase, dataset: Dataset, position: str) -> WindowCase:
    ref = bench.ref(dataset)
    offset = window_offset(position, dataset.chars)

    def make() -> WindowCase:
        store, grant = bench.store, bench.grant
        at = store.read_field_window(
            grant, ref, "body", offset_chars=offset, limit_chars=WINDOW_CHARS
        )
        after = store.read_field_window(
            grant, ref, "body", offset_chars=offset + WINDOW_CHARS, limit_chars=WINDOW_CHARS
        )
        assert after.previous_cursor is not None
        cursor = after.previous_cursor
        return WindowCase(
            record_id(dataset),
            offset,
            cursor,
            at.text,
            bench.capture(
                lambda: store.read_field_window(
                    grant, ref, "body", offset_chars=offset, limit_chars=WINDOW_CHARS
                )
            ),
            bench.capture(lambda: store.read_field_window(grant, ref, "body", cursor=cursor)),
        )

    return bench.case(("window", dataset, position), make)


def assert_bounded(captured: Captured, budget: int) -> None:
    """The library's read handed Python no more text than the window plus metadata."""
    assert captured.max_text_cell <= max(CHUNK_CHARS, PREVIEW_CHARS + 1)
    assert captured.chars_returned <= budget


def measure_impl(
    benchmark: BenchmarkFixture,
    bench: BenchDatabase,
    readers: dict[str, Callable[[], object]],
    impl: str,
    *,
    suite: str,
    dataset: Dataset,
    position: str | None = None,
) -> object:
    """Time `readers[impl]` in the group of the designs compared with it (`suite` on this
    backend, at `dataset` and `position` if any); a baseline on a large field is a slow case."""
    at = {} if position is None else {"position": position}
    return measure(
        benchmark,
        readers[impl],
        group=" ".join([suite, bench.backend, str(dataset), *at.values()]),
        slow=impl in BASELINES and dataset.chars >= SLOW_FROM_CHARS,
        suite=suite,
        backend=bench.backend,
        **at,
        impl=impl,
        **dataset.coordinates(),
    )


@pytest.mark.parametrize("impl", WINDOW_IMPLS)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("dataset", DATASETS, ids=str)
def test_window(
    bench: BenchDatabase,
    benchmark: BenchmarkFixture,
    dataset: Dataset,
    position: str,
    impl: str,
) -> None:
    case = window_case(bench, dataset, position)
    assert len(case.expected) == min(WINDOW_CHARS, dataset.chars - case.offset)
    assert_bounded(case.by_offset, 2 * WINDOW_CHARS)
    assert_bounded(case.by_cursor, 2 * WINDOW_CHARS)
    store, grant, ref = bench.store, bench.grant, bench.ref(dataset)
    readers: dict[str, Callable[[], object]] = {
        "library-offset": lambda: (
            store.read_field_window(
                grant, ref, "body", offset_chars=case.offset, limit_chars=WINDOW_CHARS
            ).text
        ),
        "library-cursor": lambda: (
            store.read_field_window(grant, ref, "body", cursor=case.cursor).text
        ),
        "floor-offset": lambda: bench.replay(case.by_offset.executions),
        "floor-cursor": lambda: bench.replay(case.by_cursor.executions),
        "naive": lambda: bench.naive_window(case.rid, case.offset, WINDOW_CHARS),
        "reference": lambda: bench.reference_window(case.rid, case.offset, WINDOW_CHARS),
    }
    result = measure_impl(
        benchmark, bench, readers, impl, suite="window", dataset=dataset, position=position
    )
    expected: object = {
        "floor-offset": case.by_offset.rows,
        "floor-cursor": case.by_cursor.rows,
    }.get(impl, case.expected)
    assert result == expected


@pytest.mark.parametrize("impl", RECORD_IMPLS)
@pytest.mark.parametrize("dataset", DATASETS, ids=str)
def test_record(
    bench: BenchDatabase, benchmark: BenchmarkFixture, dataset: Dataset, impl: str
) -> None:
    rid, ref = record_id(dataset), bench.ref(dataset)
    store, grant = bench.store, bench.grant
    captured = bench.case(
        ("record", dataset), lambda: bench.capture(lambda: store.read_record(grant, ref))
    )
    assert_bounded(captured, 4 * PREVIEW_CHARS)
    readers: dict[str, Callable[[], object]] = {
        "library": lambda: store.read_record(grant, ref).to_dict(),
        "floor": lambda: bench.replay(captured.executions),
        "naive": lambda: bench.naive_record(rid, PREVIEW_CHARS),
        "reference": lambda: bench.reference_record(rid, PREVIEW_CHARS),
    }
    result = measure_impl(benchmark, bench, readers, impl, suite="record", dataset=dataset)
    if impl == "floor":
        assert result == captured.rows
    else:
        assert isinstance(result, dict)
        assert str(result.get("id", rid)).endswith(rid)
