"""Every read is one statement, counted by the boundary audit, on both databases and both fronts
(issue 14: the read path runs below SQLAlchemy, so this is what keeps it lean), and the read
connections a store keeps never leak across errors or cancellations.

Counted once the store's catalogue cache knows the stream (the first read of a stream asks the
catalogue once per `DECLARED_TTL_S`). Where a read takes more than one statement, it is by
design, and asserted exactly:
- a match window for the n-th occurrence: one statement per occurrence (each hop is bound to the
  digest the first one saw);
- blob metadata: two (the grant's reach on record tables, then the blob on blob tables, which
  are distributed differently: docs/scaling.md); a blob range: three (that, then the bytes);
- a search page (several by design, issue 13's: `_ops.search`): the catalogue and (unless cached)
  the manifests it names, `SEARCH_SCAN_STATEMENTS` for the first phase's candidates (the next keys, then the
  terms checked on them), and `SEARCH_EVIDENCE_STATEMENTS` for the evidence of the whole page:
  as many for two hits as for one, never one per record searched or per hit shown (short fields;
  a field longer than the page-wide scan may take its own match-window statement).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress

import pytest
from _data import MAILBOX, attachment, body, grant, manifest, owner, ref_id, setup_mailbox
from _fronts import StoreFront
from audit import BoundaryAudit
from sqlalchemy.pool import Pool, QueuePool

from pdpp_store import AsyncStore, NotFound, Store, StoreError
from pdpp_store._core.identity import FieldWindowRef, RecordRef
from pdpp_store._runtime import READER_SLOTS

BODY = ("an invoice for the quarter, " * 200) + "closing words"
REF = ref_id("e1")
SEARCH_SCAN_STATEMENTS = 2
SEARCH_EVIDENCE_STATEMENTS = 2
SEARCH_STATEMENTS = 2 + SEARCH_SCAN_STATEMENTS + SEARCH_EVIDENCE_STATEMENTS
BOTH = grant(
    {"name": "message_bodies", "instance_ids": [MAILBOX]},
    {"name": "attachments", "instance_ids": [MAILBOX]},
)


def _loaded(store: StoreFront) -> str:
    setup_mailbox(store)
    blob = store.put_blob(b"%PDF-1.7 " * 100, "application/pdf")
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])
    store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    store.read_field_window(BOTH, REF, "body_text", limit_chars=10)  # the catalogue, cached
    store.read_record(BOTH, ref_id("a1", stream="attachments"))
    return blob.blob_id


def _statements(store: StoreFront, read: Callable[[], object]) -> list[str]:
    with BoundaryAudit(store.engine) as audit:
        read()
    return audit.statements


def test_every_read_is_one_statement(store: StoreFront) -> None:
    blob_id = _loaded(store)
    grant = BOTH
    first = store.read_field_window(grant, REF, "body_text", limit_chars=100)
    assert first.next_cursor is not None
    record = RecordRef(MAILBOX, "message_bodies", "e1")
    one: dict[str, Callable[[], object]] = {
        "offset": lambda: store.read_field_window(
            grant, REF, "body_text", offset_chars=500, limit_chars=100
        ),
        "cursor": lambda: store.read_field_window(
            grant, REF, "body_text", cursor=first.next_cursor
        ),
        "q": lambda: store.read_field_window(grant, REF, "body_text", q="CLOSING", before_chars=5),
        "record": lambda: store.read_record(grant, REF),
        "record, chosen fields": lambda: store.read_record(grant, REF, fields=["body_text", "id"]),
        "describe_field": lambda: store.describe_field(grant, REF, "body_text"),
        "resource: record": lambda: store.read_resource(grant, record.uri),
        "resource: window": lambda: store.read_resource(
            grant, FieldWindowRef(record, "body_text", 10, 20).uri
        ),
    }
    for name, read in one.items():
        assert len(_statements(store, read)) == 1, name
    hops = _statements(
        store, lambda: store.read_field_window(grant, REF, "body_text", q="invoice", occurrence=3)
    )
    assert len(hops) == 3
    assert len(_statements(store, lambda: store.blob_info(grant, blob_id))) == 2
    assert len(_statements(store, lambda: store.read_blob_range(grant, blob_id, 0, 10))) == 3
    pages = []
    searched = _statements(store, lambda: pages.append(store.search(grant, "invoice")))
    assert len(pages[0].hits) == 1
    assert len(searched) <= SEARCH_STATEMENTS
    store.upsert_records(MAILBOX, "message_bodies", [body("e2", "another invoice")])
    searched = _statements(store, lambda: pages.append(store.search(grant, "invoice")))
    assert len(pages[1].hits) == 2
    assert len(searched) <= SEARCH_STATEMENTS


def test_a_refused_read_sends_at_most_its_one_statement(store: StoreFront) -> None:
    _loaded(store)
    grant = owner()
    missing = ref_id("nope")
    with pytest.raises(NotFound):
        store.read_field_window(grant, missing, "body_text", limit_chars=10)
    assert len(_statements(store, lambda: _refused(store, missing))) == 1


def _refused(store: StoreFront, ref: str) -> None:
    with pytest.raises(NotFound):
        store.read_field_window(owner(), ref, "body_text", limit_chars=10)


# ---------------------------------------------------------------- kept connections


def _checked_out(pool: Pool) -> int:
    assert isinstance(pool, QueuePool)
    return pool.checkedout()


def test_sync_reads_keep_no_connection_past_their_bound(db_url: str) -> None:
    with Store.open(db_url) as store:
        _loaded(store)
        for number in range(50):
            _refused(store, ref_id(f"missing{number}"))
            store.read_field_window(owner(), REF, "body_text", limit_chars=10)
        with pytest.raises(StoreError):
            store.read_field_window(owner(), REF, "body_text", cursor="not-a-cursor")
        kept = store._reader.kept()  # the runtime's own count
        assert _checked_out(store.engine.pool) == kept <= 2


async def _cancel_reads(url: str) -> tuple[int, int, str]:
    store = await AsyncStore.open(url)
    try:
        gmail = manifest("gmail")
        await store.register_manifest(gmail)
        await store.add_connection(MAILBOX, gmail["connector_id"])
        await store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])

        async def read() -> object:
            return await store.read_field_window(owner(), REF, "body_text", q="closing")

        for round_number in range(40):
            tasks = [asyncio.ensure_future(read()) for _ in range(READER_SLOTS + 6)]
            await asyncio.sleep(0.0005 * (round_number % 7))
            for task in tasks[::2]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for _ in range(3):  # missing records: a domain error keeps the connection
                with suppress(NotFound):
                    await store.read_field_window(owner(), ref_id("gone"), "body_text")
        text = (await read()).text  # type: ignore[attr-defined]
        kept = store._readers.kept()  # the runtime's own count
        return _checked_out(store.engine.pool), kept, text
    finally:
        await store.close()


def test_cancelled_and_failed_async_reads_leak_no_connection(db_url: str) -> None:
    checked_out, kept, text = asyncio.run(_cancel_reads(db_url))
    assert "closing" in text
    assert checked_out == kept <= READER_SLOTS
