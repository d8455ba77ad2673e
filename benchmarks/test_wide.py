"""Wide-record projections (issue 14): `read_record` of records of 100, 1,000 and 10,000 keys,
its first page and every page walked by `next`, against baselines in the same run:

- `floor`: the statements the library sent for the same pages (captured by `BoundaryAudit`),
  replayed on a bare DBAPI connection, one transaction per page as the library runs them;
- `reference-page`: the reference's design (the whole record as one JSON document, jsonb on
  Postgres) paged in SQL as well as it can be: `json_each` / `jsonb_each_text`, keys after the
  last one shown, in key order, `RECORD_MAX_FIELDS` at a time, values cut to the preview;
- `reference-whole`: the same document read whole and every value previewed, which is what the
  reference serves (and what `read_record` did before its field budget: unbounded).

Untimed, each library case records in `extra_info` the page's JSON bytes, the text that crossed
the database boundary, the number of pages and the Python peak memory of one first page: the
page stays bounded whatever the width, and the test asserts it.

Environment: PDPP_BENCH_WIDE_KEYS, the record widths (default ``100,1000,10000``; the smoke run
uses ``100,1000``).
"""

from __future__ import annotations

import json
import os
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from pdpp_store import RecordView
from pdpp_store._ops.reads import (
    PREVIEW_CHARS,
    RECORD_MAX_FIELDS,
    RECORD_PAGE_CHARS,
)

from ._bench import CONNECTION, STREAM, BenchDatabase, Captured, postgres_database, sqlite_database
from ._measure import measure

WIDTHS = tuple(
    int(keys) for keys in (os.environ.get("PDPP_BENCH_WIDE_KEYS") or "100,1000,10000").split(",")
)
IMPLS = ("library", "floor", "reference-page", "reference-whole")
VALUE_CHARS = 24
PAGE_BYTES_BOUND = 4 * RECORD_PAGE_CHARS
"""A page's JSON in UTF-8: its code points (values and naming, `RECORD_PAGE_CHARS`) at up to
four bytes each; the JSON punctuation around 64 fields fits in what naming costs."""

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

REFERENCE_PAGE = {
    "sqlite": "SELECT j.key, substr(j.value, 1, ?) FROM peer_json p, json_each(p.doc) j"
    " WHERE p.id = ? AND j.key > ? ORDER BY j.key LIMIT ?",
    "postgres": "SELECT j.key, left(j.value, %s) FROM peer_json p, jsonb_each_text(p.doc) j"
    ' WHERE p.id = %s AND j.key COLLATE "C" > %s ORDER BY j.key COLLATE "C" LIMIT %s',
}


def wide_record(keys: int) -> dict[str, Any]:
    """A record of `keys` short string fields (plus its id), as connectors send settings-like
    or spreadsheet-like rows."""
    record: dict[str, Any] = {"id": f"wide-{keys}"}
    record.update({f"k{n:05d}": f"value {n:05d} ".ljust(VALUE_CHARS, ".") for n in range(keys)})
    return record


@pytest.fixture(scope="session", params=BACKENDS)
def wide_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BenchDatabase]:
    """A scratch database holding every width through the library and as one JSON document."""
    server: Any = None
    if request.param == "sqlite":
        path: Path = tmp_path_factory.mktemp("wide") / "wide.sqlite"
        database = sqlite_database(path)
    else:
        server = request.getfixturevalue("pg_server")
        name = f"pdpp_bench_wide_{uuid.uuid4().hex[:12]}"
        server.create_database(name)
        database = postgres_database(server, name)
    try:
        cursor = database.raw_tx.cursor()
        for keys in WIDTHS:
            record = wide_record(keys)
            database.store.upsert_records(CONNECTION, STREAM, [record])
            cursor.execute(database.sql.insert_json, (record["id"], json.dumps(record)))
        cursor.close()
        database.raw_tx.commit()
        if database.backend == "postgres":
            for table in ("records", "fields", "field_chunks", "peer_json"):
                database.raw.execute(f"VACUUM ANALYZE {table}")
        yield database
    finally:
        database.close()
        if server is not None:
            server.drop_database(name)


# ---------------------------------------------------------------- the designs


def library_walk(db: BenchDatabase, ref: str) -> list[RecordView]:
    """Every page, following each page's `next` continuation with its own arguments only."""
    pages = [db.store.read_record(db.grant, ref)]
    while (step := pages[-1].next) is not None:
        pages.append(db.store.read_record(db.grant, **step.arguments))
    return pages


def reference_page(db: BenchDatabase, rid: str, after: str) -> list[tuple[str, str]]:
    cursor = db.raw.cursor()
    try:
        cursor.execute(REFERENCE_PAGE[db.backend], (PREVIEW_CHARS, rid, after, RECORD_MAX_FIELDS))
        return [(str(key), str(value)) for key, value in cursor.fetchall()]
    finally:
        cursor.close()


def reference_walk(db: BenchDatabase, rid: str) -> list[list[tuple[str, str]]]:
    pages = [reference_page(db, rid, "")]
    while len(pages[-1]) == RECORD_MAX_FIELDS:
        pages.append(reference_page(db, rid, pages[-1][-1][0]))
    return pages


def reference_whole(db: BenchDatabase, rid: str) -> dict[str, Any]:
    cursor = db.raw.cursor()
    try:
        cursor.execute(db.sql.reference_record, (rid,))
        doc = cursor.fetchone()[0]
    finally:
        cursor.close()
    record: dict[str, Any] = json.loads(doc) if isinstance(doc, str) else doc
    return {key: value[:PREVIEW_CHARS] for key, value in record.items()}


# ---------------------------------------------------------------- untimed: captures and bounds


@dataclass(frozen=True, slots=True)
class WideCase:
    rid: str
    ref: str
    first: Captured
    pages: list[Captured]
    first_keys: list[str]
    page_bytes: int
    max_page_bytes: int
    peak_bytes: int


def shown(page: RecordView) -> list[str]:
    return [preview.info.path for preview in page.fields]


def page_bytes(page: RecordView) -> int:
    return len(json.dumps(page.to_dict(), ensure_ascii=False).encode())


def wide_case(db: BenchDatabase, keys: int) -> WideCase:
    rid = f"wide-{keys}"
    ref = f"{CONNECTION}/{STREAM}:{rid}"

    def make() -> WideCase:
        pages = library_walk(db, ref)
        steps: list[Mapping[str, Any]] = [{"record": ref}]
        for page in pages[:-1]:
            assert page.next is not None
            steps.append(page.next.arguments)
        captures = [db.capture(partial(db.store.read_record, db.grant, **step)) for step in steps]
        tracemalloc.start()
        db.store.read_record(db.grant, ref).to_dict()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return WideCase(
            rid,
            ref,
            captures[0],
            captures,
            shown(pages[0]),
            page_bytes(pages[0]),
            max(page_bytes(page) for page in pages),
            peak,
        )

    return db.case(("wide", keys), make)


def assert_bounded(db: BenchDatabase, case: WideCase, keys: int) -> None:
    """Every page bounded in fields and bytes, every field shown once over the walk."""
    pages = library_walk(db, case.ref)
    assert [path for page in pages for path in shown(page)] == sorted(wide_record(keys))
    assert all(len(page.fields) <= RECORD_MAX_FIELDS for page in pages)
    assert case.max_page_bytes <= PAGE_BYTES_BOUND
    for captured in case.pages:
        assert captured.chars_returned <= 2 * RECORD_PAGE_CHARS


def time_impl(
    benchmark: BenchmarkFixture,
    db: BenchDatabase,
    readers: dict[str, Callable[[], object]],
    impl: str,
    *,
    op: str,
    keys: int,
) -> object:
    return measure(
        benchmark,
        readers[impl],
        group=f"wide {db.backend} {keys} keys {op}",
        suite="wide",
        backend=db.backend,
        op=op,
        keys=keys,
        impl=impl,
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("keys", WIDTHS)
def test_wide_first_page(
    wide_db: BenchDatabase, benchmark: BenchmarkFixture, keys: int, impl: str
) -> None:
    db = wide_db
    case = wide_case(db, keys)
    assert_bounded(db, case, keys)
    readers: dict[str, Callable[[], object]] = {
        "library": lambda: db.store.read_record(db.grant, case.ref).to_dict(),
        "floor": lambda: db.replay(case.first.executions),
        "reference-page": lambda: reference_page(db, case.rid, ""),
        "reference-whole": lambda: reference_whole(db, case.rid),
    }
    result = time_impl(benchmark, db, readers, impl, op="first-page", keys=keys)
    if impl == "library":
        assert isinstance(result, dict)
        assert sorted(result["data"]) == case.first_keys
        benchmark.extra_info.update(
            page_bytes=case.page_bytes,
            boundary_chars=case.first.chars_returned,
            peak_bytes=case.peak_bytes,
        )
    elif impl == "floor":
        assert result == case.first.rows
    elif impl == "reference-page":
        assert isinstance(result, list)
        assert [key for key, _ in result] == case.first_keys
    else:
        assert isinstance(result, dict)
        assert len(result) == keys + 1
        benchmark.extra_info.update(page_bytes=len(json.dumps(result).encode()))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("keys", WIDTHS)
def test_wide_all_pages(
    wide_db: BenchDatabase, benchmark: BenchmarkFixture, keys: int, impl: str
) -> None:
    db = wide_db
    case = wide_case(db, keys)
    readers: dict[str, Callable[[], object]] = {
        "library": lambda: library_walk(db, case.ref),
        "floor": lambda: [db.replay(captured.executions) for captured in case.pages],
        "reference-page": lambda: reference_walk(db, case.rid),
        "reference-whole": lambda: reference_whole(db, case.rid),
    }
    result = time_impl(benchmark, db, readers, impl, op="all-pages", keys=keys)
    assert isinstance(result, list | dict)
    if impl == "floor":
        assert result == [captured.rows for captured in case.pages]
    elif impl != "reference-whole":
        assert len(result) == len(case.pages)
        benchmark.extra_info.update(pages=len(case.pages), max_page_bytes=case.max_page_bytes)
    else:
        assert len(result) == keys + 1
