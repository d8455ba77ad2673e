"""A 100 MB field, once per database (not once per front: both fronts share every statement).

Ingestion: stored size, digest and chunks equal Python's, with Python's peak memory a small
fraction of the field. Reads: a window near the end, a match at the very end, a cursor page and a
projected record each hand Python at most what they return plus a small constant (seen by the
boundary audit), and tracemalloc's peak stays under 256 KiB.
"""

from __future__ import annotations

import gc
import hashlib
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _data import MAILBOX, big_text, body, owner, setup_mailbox
from _postgres import PostgresServer
from audit import BoundaryAudit
from sqlalchemy import create_engine, func, select

from pdpp_store import Store
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._core.window import MAX_LIMIT_CHARS
from pdpp_store._runtime import sync_url
from pdpp_store._sql.tables import field_chunks

pytestmark = pytest.mark.huge

FIELD_BYTES = 100_000_000
READ_PEAK_BYTES = 256 * 1024
INGEST_PEAK_BYTES = 64 * 1024 * 1024
ROW_SLACK_CHARS = 160
"""What one returned row may carry beyond the text the read returns: the field's kind, type,
digest and MIME type, or a stream's primary key and hints."""
MAX_ROWS = MAX_LIMIT_CHARS // CHUNK_CHARS + 4
"""Rows a read may return: one per chunk a window overlaps, plus catalogue rows."""

REF = f"{MAILBOX}/message_bodies:huge"


def _text_of_bytes(size: int) -> str:
    """Mixed UTF-8 prose (é, ä, emoji) of about `size` UTF-8 bytes."""
    unit_chars = len("Dear Zoë, the invoice for März is attached 😀. ")
    unit_bytes = len("Dear Zoë, the invoice for März is attached 😀. ".encode())
    return big_text(size * unit_chars // unit_bytes, mixed=True)


@pytest.fixture(scope="module")
def pg_huge_db_url(pg_server: PostgresServer, pg_template: str) -> Iterator[str]:
    name = f"pdpp_huge_{uuid.uuid4().hex}"
    url = pg_server.create_database(name, template=pg_template)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def huge(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Store, str, int]]:
    """A store holding one 100 MB field, and the ingestion's tracemalloc peak."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('huge') / 'huge.db'}"
    else:
        url = request.getfixturevalue("pg_huge_db_url")
    value = _text_of_bytes(FIELD_BYTES)
    with Store.open(url) as store:
        setup_mailbox(store)
        record = body("huge", value)
        gc.collect()
        tracemalloc.start()
        store.upsert_records(MAILBOX, "message_bodies", [record])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        yield store, value, peak


def test_ingestion_stores_size_digest_and_chunks_exactly(huge: tuple[Store, str, int]) -> None:
    store, value, peak = huge
    encoded = value.encode()
    assert len(encoded) >= FIELD_BYTES * 0.99
    info = store.describe_field(owner(), REF, "body_text")
    assert info.size_chars == len(value)
    assert info.size_bytes == len(encoded)
    assert info.digest == "sha256:" + hashlib.sha256(encoded).hexdigest()
    engine = create_engine(sync_url(store.engine.url.render_as_string(hide_password=False)))
    try:
        with engine.connect() as conn:
            count, total, shortest, longest = conn.execute(
                select(
                    func.count(),
                    func.sum(func.length(field_chunks.c.text)),
                    func.min(func.length(field_chunks.c.text)),
                    func.max(field_chunks.c.chunk_no),
                ).where(field_chunks.c.path == "body_text")
            ).one()
            last = conn.execute(
                select(field_chunks.c.text).where(
                    field_chunks.c.path == "body_text", field_chunks.c.chunk_no == longest
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert count == -(-len(value) // CHUNK_CHARS) == longest + 1
    assert total == len(value)
    assert shortest == len(value) - CHUNK_CHARS * (count - 1)
    assert last == value[CHUNK_CHARS * longest :]
    # The ingestion held the value (the caller's) plus a constant, not copies of it.
    assert peak < INGEST_PEAK_BYTES, f"ingestion peak {peak / 2**20:.1f} MiB"


def _bounded(store: Store, read: Callable[[], Any], returned: Callable[[Any], int]) -> Any:
    """Run `read` under the audit and tracemalloc; check what crossed into Python is bounded."""
    read()  # warm caches (statement compilation, fold tables) outside the measurement
    gc.collect()
    with BoundaryAudit(store.engine) as audit:
        tracemalloc.start()
        result = read()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert len(audit.rows) <= MAX_ROWS
    assert audit.chars_returned() <= returned(result) + ROW_SLACK_CHARS * len(audit.rows)
    assert peak < READ_PEAK_BYTES, f"peak {peak / 1024:.0f} KiB"
    return result


def test_a_window_near_the_end_returns_only_the_window(huge: tuple[Store, str, int]) -> None:
    store, value, _ = huge
    offset = len(value) - 5000
    window = _bounded(
        store,
        lambda: store.read_field_window(owner(), REF, "body_text", offset_chars=offset),
        lambda w: len(w.text),
    )
    assert window.text == value[offset : offset + 4096]


def test_a_match_at_the_very_end_and_its_cursor(huge: tuple[Store, str, int]) -> None:
    store, value, _ = huge
    window = _bounded(
        store,
        lambda: store.read_field_window(
            owner(), REF, "body_text", q="unique-tail-marker", before_chars=100
        ),
        lambda w: len(w.text),
    )
    assert window.match_start_chars == len(value) - len("UNIQUE-TAIL-MARKER")
    assert window.text == value[-len("UNIQUE-TAIL-MARKER") - 100 :]
    back = _bounded(
        store,
        lambda: store.read_field_window(owner(), REF, "body_text", cursor=window.previous_cursor),
        lambda w: len(w.text),
    )
    assert back.text == value[back.start_chars : back.end_chars]


def test_a_projected_record_previews_the_huge_field(huge: tuple[Store, str, int]) -> None:
    store, value, _ = huge
    view = _bounded(
        store,
        lambda: store.read_record(owner(), REF),
        lambda v: sum(len(str(x)) for x in v.to_dict()["data"].values()),
    )
    ladder = view.to_dict()["content_ladder"]["body_text"]
    assert ladder["preview_status"] == "truncated"
    assert ladder["size_chars"] == len(value)
