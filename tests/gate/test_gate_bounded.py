"""P0 gate, proof 2: every read of a multi-megabyte field is bounded, on every backend and front.

One record holds a field of `FIELD_CHARS` code points of mixed UTF-8 prose (about 4.7 MB) and
points at a `BLOB_BYTES` blob. Each read operation (offset windows at the start, middle and end,
a match at the start and at the very end, a cursor page, a projected record, a field
description, blob metadata and a blob range) is run under `BoundaryAudit` and tracemalloc, and
`check_bounded` asserts:

0. the audit saw the read: at least one row, and at least as many characters as the operation
   returns (a blind audit, which sees nothing, would otherwise pass every upper bound);
1. at most `MAX_ROWS` rows crossed from the database (one per chunk a window overlaps, plus
   catalogue rows);
2. the characters (str cells) and bytes (bytes cells) that crossed are at most what the
   operation returns plus `ROW_SLACK_CHARS` per row;
3. tracemalloc's peak during the read stays under `READ_PEAK_BYTES` (256 KiB), a small fraction
   of the field, on every front (see `test_the_peak_measures_the_read_on_every_front` for why
   the async fronts are measured too).

The 100 MB case runs once per database in `test_huge.py`; this file runs every read on every
front with a field small enough to ingest in seconds. `test_gate_bites` calls `check_bounded`
on a broken statement to show that the proof fails when a whole body crosses.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from _data import MAILBOX, attachment, big_text, body, owner, setup_mailbox
from _fronts import StoreFront, open_front
from _postgres import PostgresServer
from audit import BoundaryAudit

from pdpp_store import Grant, Store
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._core.window import MAX_LIMIT_CHARS

FIELD_CHARS = 4_000_000
BLOB_BYTES = 4_000_000
READ_PEAK_BYTES = 256 * 1024
ROW_SLACK_CHARS = 160
"""What one returned row may carry beyond the text the read returns: the field's kind, type,
digest and MIME type, or a stream's primary key and hints (as in `test_huge`)."""
MAX_ROWS = MAX_LIMIT_CHARS // CHUNK_CHARS + 4
"""Rows a read may return: one per chunk a window overlaps, plus catalogue rows."""

HEAD = "HEAD-MARKER-c0ffee "
TAIL = "UNIQUE-TAIL-MARKER"  # `big_text` ends with it
RECORD = f"{MAILBOX}/message_bodies:big"
ATTACHMENT = f"{MAILBOX}/attachments:big-a"
FIELD = "body_text"
GRANT = Grant.from_dict(
    {
        "grant_id": "g-bounded",
        "streams": [
            {"name": "message_bodies", "instance_ids": [MAILBOX]},
            {"name": "attachments", "instance_ids": [MAILBOX]},
        ],
    }
)


def huge_field(chars: int = FIELD_CHARS) -> str:
    """`chars` code points of mixed prose (é, ä, emoji) with a marker at each end."""
    return HEAD + big_text(chars - len(HEAD), mixed=True)


def huge_blob(size: int = BLOB_BYTES) -> bytes:
    return random.Random(5).randbytes(size)


@dataclass(frozen=True, slots=True)
class Big:
    """What the store holds: the field's text and the blob's bytes and id."""

    text: str
    blob: bytes
    blob_id: str


def load_big(store: StoreFront, chars: int = FIELD_CHARS, blob_size: int = BLOB_BYTES) -> Big:
    setup_mailbox(store)
    text, data = huge_field(chars), huge_blob(blob_size)
    blob = store.put_blob(data, "application/pdf")
    store.upsert_records(MAILBOX, "message_bodies", [body("big", text)])
    store.upsert_records(MAILBOX, "attachments", [attachment("big-a", blob.as_ref())])
    return Big(text, data, blob.blob_id)


# ================================================================ the check


@dataclass(frozen=True, slots=True)
class Measured:
    result: Any
    rows: int
    crossed: int
    returned: int
    peak: int


def measure(store: StoreFront, read: Callable[[], Any], returned: Callable[[Any], int]) -> Measured:
    """Run `read` once to warm caches (statement compilation, fold tables), then again under
    the audit and tracemalloc."""
    read()
    gc.collect()
    with BoundaryAudit(store.engine) as audit:
        tracemalloc.start()
        try:
            result = read()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return Measured(result, len(audit.rows), audit.chars_returned(), returned(result), peak)


def check_bounded(
    store: StoreFront, read: Callable[[], Any], returned: Callable[[Any], int]
) -> Measured:
    """The proof: rows, characters and memory of one read are bounded by what it returns."""
    seen = measure(store, read, returned)
    assert seen.rows > 0, "the audit saw no row of the read: its bounds would prove nothing"
    assert seen.crossed >= seen.returned, (
        f"the audit saw {seen.crossed} characters for a result of {seen.returned}: "
        "the result reached Python by a path it does not see"
    )
    assert seen.rows <= MAX_ROWS, f"{seen.rows} rows crossed the boundary (at most {MAX_ROWS})"
    bound = seen.returned + ROW_SLACK_CHARS * seen.rows
    assert seen.crossed <= bound, (
        f"{seen.crossed} characters crossed the boundary for a result of {seen.returned} "
        f"in {seen.rows} rows (at most {bound})"
    )
    assert seen.peak < READ_PEAK_BYTES, f"tracemalloc peak {seen.peak / 1024:.0f} KiB"
    return seen


def window_text(window: Any) -> int:
    return len(window.text)


def record_text(view: Any) -> int:
    """What a projected record returns: its values (a preview for the big field); the ladder's
    metadata is what the per-row slack is for."""
    return sum(len(str(value)) for value in view.to_dict()["data"].values())


def nothing(_: Any) -> int:
    return 0


Read = Callable[[StoreFront, Big], tuple[Callable[[], Any], Callable[[Any], int]]]


def _window(**selector: Any) -> Read:
    def make(store: StoreFront, big: Big) -> tuple[Callable[[], Any], Callable[[Any], int]]:
        args = {key: value(big) if callable(value) else value for key, value in selector.items()}
        return (lambda: store.read_field_window(GRANT, RECORD, FIELD, **args)), window_text

    return make


def _cursor_page(store: StoreFront, big: Big) -> tuple[Callable[[], Any], Callable[[Any], int]]:
    first = store.read_field_window(
        GRANT, RECORD, FIELD, offset_chars=len(big.text) // 3, limit_chars=MAX_LIMIT_CHARS
    )
    cursor = first.next_cursor
    return (lambda: store.read_field_window(GRANT, RECORD, FIELD, cursor=cursor)), window_text


READS: dict[str, Read] = {
    "offset-start": _window(offset_chars=0),
    "offset-middle": _window(
        offset_chars=lambda big: len(big.text) // 2 + 17, limit_chars=MAX_LIMIT_CHARS
    ),
    "offset-end": _window(offset_chars=lambda big: len(big.text) - 100),
    "offset-past-end": _window(offset_chars=lambda big: len(big.text) + 5),
    "match-start": _window(q=HEAD.strip().lower(), before_chars=100),
    "match-end": _window(q=TAIL.lower(), before_chars=100, after_chars=8192),
    "cursor-page": _cursor_page,
    "record": lambda store, big: ((lambda: store.read_record(GRANT, RECORD)), record_text),
    "describe-field": lambda store, big: (
        (lambda: store.describe_field(GRANT, RECORD, FIELD)),
        nothing,
    ),
    "blob-info": lambda store, big: ((lambda: store.blob_info(GRANT, big.blob_id)), nothing),
    "blob-range": lambda store, big: (
        (lambda: store.read_blob_range(GRANT, big.blob_id, BLOB_BYTES // 2 + 3, 65536)),
        lambda got: len(got.data),
    ),
    "attachment-record": lambda store, big: (
        (lambda: store.read_record(GRANT, ATTACHMENT)),
        record_text,
    ),
}


# ================================================================ fixtures: one load per database


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def big_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Big]]:
    """A database holding the big record and blob, loaded once (both fronts read it)."""
    server: PostgresServer | None = None
    name = f"pdpp_gate_{uuid.uuid4().hex}"
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('gate') / 'big.db'}"
    else:
        server = request.getfixturevalue("pg_server")
        url = server.create_database(name, template=request.getfixturevalue("pg_template"))
    try:
        with Store.open(url) as store:
            big = load_big(store)
        yield url, big
    finally:
        if server is not None:
            server.drop_database(name)


@pytest.fixture(scope="module", params=["sync", "async"])
def big(
    request: pytest.FixtureRequest, big_url: tuple[str, Big]
) -> Iterator[tuple[StoreFront, Big]]:
    url, loaded = big_url
    with open_front(request.param, url) as store:
        yield store, loaded


# ================================================================ tests


@pytest.mark.parametrize("name", list(READS))
def test_every_read_of_a_big_field_is_bounded(big: tuple[StoreFront, Big], name: str) -> None:
    store, loaded = big
    read, returned = READS[name](store, loaded)
    seen = check_bounded(store, read, returned)
    result = seen.result
    if name.startswith(("offset", "match", "cursor")):
        assert result.text == loaded.text[result.start_chars : result.end_chars]
        assert result.total_chars == len(loaded.text)
    if name == "match-end":
        assert result.match_start_chars == len(loaded.text) - len(TAIL)
        assert result.text.endswith(TAIL)
    if name == "match-start":
        assert result.match_start_chars == 0
    if name == "blob-range":
        assert result.data == loaded.blob[BLOB_BYTES // 2 + 3 :][:65536]
    if name == "record":
        assert result.to_dict()["content_ladder"][FIELD]["size_chars"] == len(loaded.text)


def test_the_peak_measures_the_read_on_every_front(big: tuple[StoreFront, Big]) -> None:
    """The 256 KiB bound means something on the async fronts too: the event loop's and the
    driver's own allocations stay far below it, while a read that holds a whole megabyte of
    the field goes far above it. So the memory proof is asserted on all four fronts."""
    store, loaded = big
    small = measure(
        store,
        lambda: store.read_field_window(owner(), RECORD, FIELD, offset_chars=1, limit_chars=1),
        window_text,
    )
    assert small.peak < READ_PEAK_BYTES // 2, f"idle read peak {small.peak / 1024:.0f} KiB"
    megabyte = loaded.text[: 1 << 20]
    held = measure(store, megabyte.encode, len)
    assert held.peak > READ_PEAK_BYTES, "tracemalloc must see a held megabyte"
