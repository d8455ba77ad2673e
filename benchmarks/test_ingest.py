"""Ingestion throughput: one large field per record at every size of the matrix, and many small
records; the library's `upsert_records` against a raw single-row INSERT of the same value into
one plain column (what storing costs before any chunking, folding or digesting).

Each round writes a record under a fresh id into a scratch database, so every round really
writes (an identical record would be skipped as unchanged). `extra_info` carries the UTF-8
bytes and records per round; `report.py` turns medians into MB/s and records/s.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from ._bench import CONNECTION, STREAM, BenchDatabase
from ._measure import DATASETS, SLOW_ROUNDS, Dataset, in_rounds, label
from ._text import KINDS, field_text

SMALL_RECORDS = 2000
SMALL_CHARS = 1000
INGEST_IMPLS = ("library", "raw-insert")
_ids = itertools.count()


@lru_cache(maxsize=2)
def text_of(kind: str, chars: int) -> str:
    return field_text(kind, chars)


def rounds_for(chars: int) -> int:
    """Enough rounds for a median where a round is cheap; the slow-case budget where it is not."""
    if chars >= 100_000_000:
        return 1
    if chars >= 10_000_000:
        return min(SLOW_ROUNDS, 2)
    return max(SLOW_ROUNDS, 5)


def fresh_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


@pytest.mark.parametrize("impl", INGEST_IMPLS)
@pytest.mark.parametrize("dataset", DATASETS, ids=str)
def test_ingest_field(
    ingest_db: BenchDatabase, benchmark: BenchmarkFixture, dataset: Dataset, impl: str
) -> None:
    text = text_of(dataset.kind, dataset.chars)
    db = ingest_db

    def library(rid: str) -> Any:
        return db.store.upsert_records(CONNECTION, STREAM, [{"id": rid, "body": text}])

    def raw_insert(rid: str) -> Any:
        cursor = db.raw_tx.cursor()
        cursor.execute(db.sql.insert_plain, (rid, None, None, text))
        cursor.close()
        db.raw_tx.commit()

    targets: dict[str, Callable[[str], Any]] = {"library": library, "raw-insert": raw_insert}
    label(
        benchmark,
        f"ingest-field {db.backend} {dataset}",
        suite="ingest-field",
        backend=db.backend,
        impl=impl,
        **dataset.coordinates(),
        records=1,
        utf8_bytes=len(text.encode("utf-8")),
    )
    result = in_rounds(
        benchmark,
        targets[impl],
        setup=lambda: ((fresh_id(str(dataset)),), {}),
        rounds=rounds_for(dataset.chars),
    )
    if impl == "library":
        assert result.inserted == 1


@pytest.mark.parametrize("kind", KINDS)
def test_ingest_small_records(
    ingest_db: BenchDatabase, benchmark: BenchmarkFixture, kind: str
) -> None:
    source = text_of(kind, SMALL_RECORDS * SMALL_CHARS)
    bodies = [source[i * SMALL_CHARS : (i + 1) * SMALL_CHARS] for i in range(SMALL_RECORDS)]
    db = ingest_db

    def batch() -> tuple[tuple[object, ...], dict[str, object]]:
        prefix = fresh_id(f"small-{kind}")
        records = [
            {
                "id": f"{prefix}-{n}",
                "subject": f"Message {n}",
                "sent_at": f"2026-02-{1 + n % 28:02d}T08:00:00Z",
                "body": body,
            }
            for n, body in enumerate(bodies)
        ]
        return (records,), {}

    label(
        benchmark,
        f"ingest-small {db.backend} {kind}",
        suite="ingest-small",
        backend=db.backend,
        kind=kind,
        size=f"{SMALL_RECORDS}x{SMALL_CHARS}",
        chars=SMALL_RECORDS * SMALL_CHARS,
        impl="library",
        records=SMALL_RECORDS,
        utf8_bytes=sum(len(body.encode("utf-8")) for body in bodies),
    )
    result = in_rounds(
        benchmark,
        lambda records: db.store.upsert_records(CONNECTION, STREAM, records),
        setup=batch,
        rounds=max(SLOW_ROUNDS, 3),
    )
    assert result.inserted == SMALL_RECORDS
