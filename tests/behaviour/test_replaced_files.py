"""A SQLite store whose files are replaced under it answers every read alike: `storage_unavailable`
(docs/decisions.md, "A replaced SQLite file"), on both fronts. Before, a read on a connection
kept between reads answered from its page cache (a search, a blob) while one on a fresh
connection met the damage. And a store's own writes (a checkpoint writes the file) never make a
read fail.

SQLite only: the files are what is replaced. Postgres' counterpart, a database that drops its
connections, is `test_read_statements`' (and the surfaces' generated-client test drops one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from _data import MAILBOX, attachment, body, grant, ref_id, setup_mailbox
from _fronts import FRONTS, Front, StoreFront, open_front

from pdpp_store import Store, StoreError

BOTH = grant(
    {"name": "message_bodies", "instance_ids": [MAILBOX]},
    {"name": "attachments", "instance_ids": [MAILBOX]},
)
REF = ref_id("e1")
BODY = "an invoice for the quarter, " * 400


def _seeded(path: Path) -> str:
    """A store at `path` with a body and an attachment, closed (its WAL checkpointed into the
    file, as a store a server opens): the blob's id."""
    with Store.open(f"sqlite:///{path}") as store:
        setup_mailbox(store)
        blob = store.put_blob(b"%PDF-1.7 " * 2000, "application/pdf")
        store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])
        store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    return blob.blob_id


def _reads(store: StoreFront, blob_id: str) -> dict[str, Callable[[], object]]:
    """Every read operation of the store (`list_grants`, an owner's call, runs on the write
    path, which this does not cover)."""
    uri = store.read_record(BOTH, REF).ref.uri
    return {
        "read_field_window": lambda: store.read_field_window(BOTH, REF, "body_text"),
        "read_record": lambda: store.read_record(BOTH, REF),
        "describe_field": lambda: store.describe_field(BOTH, REF, "body_text"),
        "read_resource": lambda: store.read_resource(BOTH, uri),
        "search": lambda: store.search(BOTH, "invoice"),
        "query_records": lambda: store.query_records(BOTH, "message_bodies"),
        "aggregate": lambda: store.aggregate(BOTH, "message_bodies"),
        "describe_grant": lambda: store.describe_grant(BOTH),
        "blob_info": lambda: store.blob_info(BOTH, blob_id),
        "read_blob_range": lambda: store.read_blob_range(BOTH, blob_id, 0, 4096),
    }


def _outcome(read: Callable[[], object]) -> str:
    try:
        read()
    except StoreError as error:
        return error.code
    return "ok"


def _overwritten(path: Path) -> None:
    """The files written over in place (the same inodes): no longer a database."""
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            with part.open("r+b") as handle:
                handle.write(b"\xff" * min(part.stat().st_size, 1 << 16))


def _renamed_over(path: Path) -> None:
    """Another (valid, empty) store's file moved over the path, as a careless restore would."""
    other = path.with_name("other.db")
    Store.open(f"sqlite:///{other}").close()
    os.replace(other, path)


def _removed(path: Path) -> None:
    path.unlink()


REPLACEMENTS = {"overwritten": _overwritten, "renamed_over": _renamed_over, "removed": _removed}


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("replace", list(REPLACEMENTS))
def test_every_read_of_a_store_whose_files_were_replaced_is_unavailable(
    tmp_path: Path, front: Front, replace: str
) -> None:
    path = tmp_path / "store.db"
    blob_id = _seeded(path)
    store = open_front(front, f"sqlite:///{path}")
    try:
        reads = _reads(store, blob_id)
        for _ in range(2):  # every read's connection kept, its page cache warm
            assert {name: _outcome(read) for name, read in reads.items()} == dict.fromkeys(
                reads, "ok"
            )
        REPLACEMENTS[replace](path)
        for _ in range(3):  # no read answers, however often asked, in whatever order
            for order in (reads, dict(reversed(reads.items()))):
                outcomes = {name: _outcome(read) for name, read in order.items()}
                assert outcomes == dict.fromkeys(reads, "storage_unavailable"), (replace, outcomes)
    finally:
        store.close()


@pytest.mark.parametrize("front", FRONTS)
def test_reads_on_kept_connections_after_the_file_alone_is_overwritten_are_unavailable(
    tmp_path: Path, front: Front
) -> None:
    """The file written over in place, its WAL and index left as they were (nothing tells a
    connection's page cache it is stale): the reads that used to answer from their kept
    connection, asked first."""
    path = tmp_path / "store.db"
    blob_id = _seeded(path)
    store = open_front(front, f"sqlite:///{path}")
    try:
        reads = _reads(store, blob_id)
        for name in ("search", "read_blob_range", "search", "read_blob_range"):
            assert _outcome(reads[name]) == "ok"
        with path.open("r+b") as handle:
            handle.write(b"\xff" * (1 << 16))
        assert _outcome(reads["search"]) == "storage_unavailable"
        assert _outcome(reads["read_blob_range"]) == "storage_unavailable"
    finally:
        store.close()


@pytest.mark.parametrize("front", FRONTS)
def test_the_stores_own_checkpoints_never_fail_a_read(tmp_path: Path, front: Front) -> None:
    """Writes that checkpoint the WAL into the file (it is written, its size grows) let go of
    the kept connections; every read still answers, and sees the new records."""
    path = tmp_path / "store.db"
    blob_id = _seeded(path)
    store = open_front(front, f"sqlite:///{path}")
    try:
        reads = _reads(store, blob_id)
        size = path.stat().st_size
        for round_ in range(6):
            for name, read in reads.items():
                assert _outcome(read) == "ok", (round_, name)
            many = [body(f"n{round_}-{i}", "filler " * 600) for i in range(300)]
            store.upsert_records(MAILBOX, "message_bodies", many)
        assert path.stat().st_size > size  # a checkpoint wrote the file meanwhile
        assert store.read_record(BOTH, ref_id("n5-299")).ref.record_id == "n5-299"
    finally:
        store.close()
