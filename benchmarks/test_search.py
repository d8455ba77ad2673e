"""Search and the search index (issue 13, docs/performance.md goal 6), side by side in one run,
rendered by `_report_search`:

- `q` late (`end`), absent and early (`start`) in the fields of the matrix: the library (first
  chunks scanned, then the index) against the same match statement scanning every chunk (the
  store before the index; `use_index=False`), run on the store's own engine;
- `search` for a rare, a common and an absent term over the mailbox of `_mailbox` (default
  100,000 email-sized records, cached across runs), first page (10 hits with evidence);
- index size against text size, for the matrix's big fields and for the mailbox (recorded in
  `extra_info` of a measurement of the size query, and asserted at most 3x);
- ingestion of email-sized records with the index against the same store without it (SQLite:
  the store's own index statements and the triggers dropped; Postgres: the GIN index
  dropped), records/s;
- the reference's design over the same mailbox (`_reference`: FTS5 `bm25()` over `unicode61`
  with 200 candidates; a `simple` tsvector under GIN ranked by `ts_rank_cd`): its first page
  for the same rare and common terms, its index size and its own ingestion with and without
  its index, in the same run (goal 14).

Environment: PDPP_BENCH_SEARCH_RECORDS and PDPP_BENCH_SEARCH_BODY (see `_mailbox`; the smoke
run uses 2,000 records: at 400 the Postgres GIN index's fixed overhead was 3.6x the text,
above the 3x bound asserted here) and PDPP_BENCH_SEARCH_INGEST (records per ingestion round,
default 1,000; the smoke run uses 200).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from sqlalchemy import text

from pdpp_store import Grant, NotFound, Store, fold
from pdpp_store._core.identity import RecordRef
from pdpp_store._ops import writes as write_ops
from pdpp_store._sql import index as index_sql
from pdpp_store._sql import match as sql
from pdpp_store._sql import words as words_sql
from pdpp_store._sql.dialects import capabilities
from pdpp_store._sql.requests import Execute

from . import _reference as reference
from ._bench import CONNECTION, STREAM, BenchDatabase, record_id
from ._mailbox import (
    BODY_CHARS,
    COMMON,
    MAIL,
    RARE,
    SEARCH_RECORDS,
    mailbox_records,
    open_mailbox,
    open_store,
    rare_ids,
)
from ._measure import (
    DATASETS,
    SLOW_FROM_CHARS,
    SLOW_ROUNDS,
    Dataset,
    Setup,
    in_rounds,
    label,
    measure,
)
from ._text import needles

_ids = itertools.count()

T = TypeVar("T")


def _backend(store: Store) -> str:
    """The backend's name as every benchmark's coordinates spell it (``postgres``)."""
    name = store.engine.dialect.name
    return "postgres" if name == "postgresql" else name


# ---------------------------------------------------------------- q with and without the index


def _scan_only(bench: BenchDatabase, dataset: Dataset, q: str) -> int | None:
    """The match statement with every chunk scanned (no index), on the store's engine."""
    ref = RecordRef(CONNECTION, STREAM, record_id(dataset))
    grant = bench.grant.stream(STREAM)
    request = sql.match_window(
        ref, "body", grant, needle=fold(q), before=2048, after=2048, limit=None, use_index=False
    )
    with bench.store.engine.connect() as conn:
        statement = request.statement_for(capabilities(conn.dialect.name))
        rows = conn.execute(statement, request.params).mappings().all()
    return int(rows[0]["match_start"]) if rows else None


def _library(bench: BenchDatabase, dataset: Dataset, q: str) -> int | None:
    try:
        window = bench.store.read_field_window(bench.grant, bench.ref(dataset), "body", q=q)
    except NotFound as missing:
        if missing.code != "query_not_found":
            raise
        return None
    return window.match_start_chars


@pytest.mark.parametrize("impl", ["library", "scan"])
@pytest.mark.parametrize("place", ["start", "end", "absent"])
@pytest.mark.parametrize("dataset", DATASETS, ids=str)
def test_q_with_and_without_index(
    bench: BenchDatabase, benchmark: BenchmarkFixture, dataset: Dataset, place: str, impl: str
) -> None:
    needle = needles(dataset.kind, dataset.chars)[place]
    read = _library if impl == "library" else _scan_only
    result = measure(
        benchmark,
        lambda: read(bench, dataset, needle.query),
        group=f"q-index {bench.backend} {dataset} {place}",
        slow=impl == "scan" and place != "start" and dataset.chars >= SLOW_FROM_CHARS,
        suite="q-index",
        backend=bench.backend,
        position=place,
        impl=impl,
        **dataset.coordinates(),
    )
    assert result == needle.offset


def _index_bytes(store: Store) -> tuple[int, int]:
    """(bytes of the search index, UTF-8 bytes of the text it indexes)."""
    with store.engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            index = conn.execute(
                text(  # the word index's objects are `_word_index_bytes`'
                    "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'search%'"
                    " AND name NOT IN ('search_words', 'search_word_lists', 'search_vocabulary')"
                    " AND name NOT LIKE 'search_vocabulary_trigrams%'"
                )
            ).scalar_one()
        else:
            index = conn.execute(
                text("SELECT pg_relation_size('ix_field_chunks_trigram')")
            ).scalar_one()
        chars = conn.execute(
            text("SELECT sum(length(CAST(text AS BLOB))) FROM field_chunks")
            if conn.dialect.name == "sqlite"
            else text("SELECT sum(octet_length(text)) FROM field_chunks")
        ).scalar_one()
    return int(index or 0), int(chars or 0)


def _word_index_bytes(store: Store) -> int:
    """Bytes of the word index (migration 0017): `search_words` (SQLite: the `WITHOUT ROWID`
    table, its key; Postgres: heap and key), `search_word_lists` with its key, and
    `search_vocabulary` with its key and its trigram index."""
    with store.engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            size = conn.execute(
                text(
                    "SELECT sum(pgsize) FROM dbstat WHERE name IN ('search_words',"
                    " 'search_word_lists', 'sqlite_autoindex_search_word_lists_1',"
                    " 'search_vocabulary', 'sqlite_autoindex_search_vocabulary_1')"
                    " OR name LIKE 'search_vocabulary_trigrams%'"
                )
            ).scalar_one()
        else:
            size = conn.execute(
                text(
                    "SELECT pg_total_relation_size('search_words')"
                    " + pg_total_relation_size('search_word_lists')"
                    " + pg_total_relation_size('search_vocabulary')"
                )
            ).scalar_one()
    return int(size or 0)


def _measure_size(
    benchmark: BenchmarkFixture,
    store: Store,
    impl: str,
    size: Callable[[], int] | None = None,
    *,
    of: str | None = None,
) -> tuple[int, int]:
    """(index bytes, text bytes) of an index over `store`'s text, the size query timed under
    `index-size <backend> <of, or impl>` (`impl` its coordinate): `size` when given, the text's
    bytes asked after it; otherwise `_index_bytes` (the search index and the text at once). Both
    and their ratio go into `extra_info`."""
    backend = _backend(store)
    query: Callable[[], int | tuple[int, int]] = size or (lambda: _index_bytes(store))
    measured = measure(
        benchmark,
        query,
        group=f"index-size {backend} {of or impl}",
        slow=True,
        suite="index-size",
        backend=backend,
        impl=impl,
    )
    index, stored = measured if isinstance(measured, tuple) else (measured, _index_bytes(store)[1])
    benchmark.extra_info.update(index_bytes=index, text_bytes=stored, ratio=index / stored)
    return index, stored


def test_index_size_of_the_big_fields(bench: BenchDatabase, benchmark: BenchmarkFixture) -> None:
    index, stored = _measure_size(benchmark, bench.store, "fields")
    assert index <= 3 * stored


# ---------------------------------------------------------------- search over a mailbox


def _open_mail_store(
    backend: str, request: pytest.FixtureRequest, tmp: Path, *, indexed: bool
) -> Any:
    """A fresh store with the mail manifest (and the index dropped unless `indexed`)."""
    server: Any = None
    if backend == "sqlite":
        url = f"sqlite:///{tmp / f'mail-{uuid.uuid4().hex[:8]}.sqlite'}"
        name = None
    else:
        server = request.getfixturevalue("pg_server")
        name = f"pdpp_bench_mail_{uuid.uuid4().hex[:12]}"
        url = server.create_database(name)
    store = open_store(url)
    if not indexed:
        with store.engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                # The store indexes what it writes: turn those statements into no-ops.
                skip = Execute(text("SELECT 1"), when=lambda _: False)
                request.getfixturevalue("monkeypatch").setattr(
                    index_sql, "index_fields", lambda *_: (skip, skip, skip)
                )
                for trigger in ("delete", "update"):
                    conn.execute(text(f"DROP TRIGGER search_chunks_{trigger}"))
            else:
                conn.execute(text("DROP INDEX ix_field_chunks_trigram"))
            conn.commit()
    return store, server, name


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session", params=BACKENDS)
def mailbox(request: pytest.FixtureRequest) -> Iterator[Store]:
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    store = open_mailbox(request.param, server)
    try:
        yield store
    finally:
        store.close()


TERMS = {"rare": RARE, "common": COMMON, "absent": "xylophonegnu"}
"""The terms of the first pages, the store's and the reference's: in a few records spread over
the whole key range, in every second record, and in none (`_mailbox`)."""


def _measure_first_page(
    benchmark: BenchmarkFixture, mailbox: Store, impl: str, page: Callable[[], T]
) -> T:
    """`page`, a first page over `mailbox` (the store's or the reference's, `impl`), timed in
    the group that holds them all for its database."""
    backend = _backend(mailbox)
    return measure(
        benchmark,
        page,
        group=f"search {backend} {SEARCH_RECORDS} records",
        suite="search",
        backend=backend,
        impl=impl,
        records=SEARCH_RECORDS,
        body_chars=BODY_CHARS,
    )


def _assert_first_page(term: str, found: list[str]) -> None:
    """The records a first page of `term` holds, in whatever order its ranking puts them: the
    first ten holding the rare term, ten holding the common one, none for the absent term."""
    if term == "rare":
        assert sorted(found) == sorted(rare_ids()[:10])
    elif term == "common":
        assert len(found) == 10
        assert all(int(record_id[1:]) % 2 == 0 for record_id in found)
    else:
        assert found == []


@pytest.mark.parametrize("vocabulary", ["", "-scan"])
@pytest.mark.parametrize("term", ["rare", "common", "absent"])
def test_search_first_page(
    mailbox: Store,
    benchmark: BenchmarkFixture,
    monkeypatch: pytest.MonkeyPatch,
    term: str,
    vocabulary: str,
) -> None:
    """`impl` is the term; with ``-scan`` the word index finds the words that contain it by a
    scan of the vocabulary, as before its trigram index (the same pages)."""
    grant = Grant.owner(CONNECTION, MAIL)
    if vocabulary:
        monkeypatch.setattr(words_sql, "_indexed", lambda terms: (False,) * len(terms))
    page = _measure_first_page(
        benchmark, mailbox, term + vocabulary, lambda: mailbox.search(grant, TERMS[term])
    )
    found = [hit.record_id for hit in page.hits]
    _assert_first_page(term, found)
    # Relevance order (the default): the rare records rank by their scores (a shorter body
    # first), the common ones all tie on score and come in key order.
    if term == "rare":
        scores = [hit.score or 0.0 for hit in page.hits]
        assert all(hit.score is not None for hit in page.hits)
        assert scores == sorted(scores, reverse=True)
    if term == "common":
        assert found == [f"m{n:07d}" for n in range(0, 20, 2)]
    for hit in page.hits:
        assert hit.excerpts


def test_index_size_of_the_mailbox(mailbox: Store, benchmark: BenchmarkFixture) -> None:
    index, stored = _measure_size(benchmark, mailbox, "mailbox")
    assert index <= 3 * stored


def test_word_index_size_of_the_mailbox(mailbox: Store, benchmark: BenchmarkFixture) -> None:
    """The word index's size against the text it is computed from (`impl` ``words``)."""
    index, _ = _measure_size(
        benchmark, mailbox, "words", lambda: _word_index_bytes(mailbox), of="mailbox"
    )
    assert index > 0


# ---------------------------------------------------------------- ingestion with and without


INGEST_RECORDS = int(os.environ.get("PDPP_BENCH_SEARCH_INGEST") or 1000)


def _measure_ingest(
    benchmark: BenchmarkFixture,
    backend: str,
    impl: str,
    ingest: Callable[..., T],
    *,
    setup: Setup | None = None,
    of: str = "",
) -> T:
    """`ingest` of `INGEST_RECORDS` records (the store's or the reference's, `impl`) timed in a
    few plain rounds, each fed by `setup` when given, in the group `ingest-index <backend>`
    (the reference's: `of` ``reference`` after it)."""
    label(
        benchmark,
        f"ingest-index {backend} {of}".rstrip(),
        suite="ingest-index",
        backend=backend,
        impl=impl,
        records=INGEST_RECORDS,
    )
    return in_rounds(benchmark, ingest, setup=setup, rounds=max(SLOW_ROUNDS, 3))


INDEXING = {
    "with-index": True,
    "without-index": False,
    "without-words": True,
    "without-vocabulary-trigrams": True,
}
"""`impl` of the ingestion benchmark: every index; none (neither the search index nor the
word index); the search index without the word index (its share of the cost); every index but
the vocabulary's trigram index (migration 0015: SQLite's trigger, Postgres's GIN index)."""


@pytest.mark.parametrize("impl", list(INDEXING))
@pytest.mark.parametrize("backend", BACKENDS)
def test_ingest_with_and_without_index(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    benchmark: BenchmarkFixture,
    backend: str,
    impl: str,
) -> None:
    indexed = INDEXING[impl]
    store, server, name = _open_mail_store(backend, request, tmp_path, indexed=indexed)
    if impl in {"without-index", "without-words"}:  # the writes leave the word index empty
        request.getfixturevalue("monkeypatch").setattr(write_ops, "_word_rows", lambda *_: ([], []))
    if impl == "without-vocabulary-trigrams":
        with store.engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.execute(text("DROP TRIGGER search_vocabulary_trigrams_insert"))
            else:
                conn.execute(text("DROP INDEX ix_search_vocabulary_trigram"))
            conn.commit()
    try:

        def batch() -> tuple[tuple[object, ...], dict[str, object]]:
            prefix = f"i{next(_ids)}-"
            return (list(mailbox_records(INGEST_RECORDS, prefix)),), {}

        result = _measure_ingest(
            benchmark,
            backend,
            impl,
            lambda records: store.upsert_records(CONNECTION, MAIL, records),
            setup=batch,
        )
        assert result.inserted == INGEST_RECORDS
    finally:
        store.close()
        if server is not None:
            server.drop_database(name)


# ---------------------------------------------------------------- the reference's design beside


def _reference(mailbox: Store) -> Any:
    """The reference design over the same mailbox, on the same database kind (`_reference`)."""
    if mailbox.engine.dialect.name == "sqlite":
        return reference.open_fts5(SEARCH_RECORDS)
    url = mailbox.engine.url.set(drivername="postgresql")
    return reference.open_tsvector(url.render_as_string(hide_password=False), SEARCH_RECORDS)


@pytest.fixture(scope="session")
def reference_db(mailbox: Store) -> Iterator[Any]:
    db = _reference(mailbox)
    try:
        yield db
    finally:
        db.close()


@pytest.mark.parametrize("term", ["rare", "common"])
def test_reference_first_page(
    mailbox: Store, reference_db: Any, benchmark: BenchmarkFixture, term: str
) -> None:
    """The reference's first page for the same terms, in the same run: `impl` ``ref-rare`` /
    ``ref-common`` beside the store's ``rare`` / ``common`` (relevance order, the default)."""
    page = reference.fts5_page if _backend(mailbox) == "sqlite" else reference.tsvector_page
    found = _measure_first_page(
        benchmark, mailbox, f"ref-{term}", lambda: page(reference_db, TERMS[term])
    )
    _assert_first_page(term, found)  # bm25 orders them its own way: the same records


def test_reference_index_size(
    mailbox: Store, reference_db: Any, benchmark: BenchmarkFixture
) -> None:
    size = reference.fts5_size if _backend(mailbox) == "sqlite" else reference.tsvector_size
    index, _ = _measure_size(benchmark, mailbox, "reference", lambda: size(reference_db))
    assert index > 0


@pytest.mark.parametrize("indexed", [True, False], ids=["with-index", "without-index"])
def test_reference_ingest(
    mailbox: Store,
    reference_db: Any,
    tmp_path: Path,
    benchmark: BenchmarkFixture,
    indexed: bool,
) -> None:
    """The reference's own ingestion with its index against without, `INGEST_RECORDS` a round
    (`impl` ``ref-with-index`` / ``ref-without-index``)."""
    backend = _backend(mailbox)
    records = list(mailbox_records(INGEST_RECORDS, "r"))

    def ingest() -> float:
        if backend == "sqlite":
            return reference.fts5_ingest(tmp_path, records, indexed=indexed)
        return reference.tsvector_ingest(reference_db, records, indexed=indexed)

    impl = f"ref-{'with' if indexed else 'without'}-index"
    seconds = _measure_ingest(benchmark, backend, impl, ingest, of="reference")
    assert seconds > 0
