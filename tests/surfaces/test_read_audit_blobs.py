"""A blob read's audit entry (docs/contract.md §14; `_ops.audit` rules 6 and 7): it names the
records through which the grant reached the blob, and a REST download is one entry per request
(the range asked, the bytes served), also when it is ranged, answered without a body, or cut
short by the server or by the client, in which case its outcome says so.
"""

from __future__ import annotations

import hashlib

from _data import MAILBOX, attachment
from _rest import DATA, OWNER, TOKEN_GRANTS, served

from pdpp_store import AuditEntry, Grant, OneAuditEntry
from pdpp_store.rest._routes import BLOB_CHUNK_BYTES, DownloadAborted, blob_body

A1 = f"{MAILBOX}/attachments:a1"
A3 = f"{MAILBOX}/attachments:a3"
BLOB_ID = "blob_sha256_" + hashlib.sha256(DATA).hexdigest()


def _owner() -> Grant:
    return Grant.from_dict(TOKEN_GRANTS[OWNER])


def _blob_entries(entries: list[AuditEntry]) -> list[AuditEntry]:
    return [e for e in entries if e.operation in ("blob_info", "read_blob_range")]


async def test_a_blob_read_names_the_records_that_made_it_readable(db_url: str) -> None:
    async with served(db_url) as site:
        grant = _owner()
        await site.store.blob_info(grant, BLOB_ID)
        # a second record referencing the same blob: both are named, in key order
        await site.store.upsert_records(
            MAILBOX, "attachments", [attachment("a3", site.blob.as_ref())]
        )
        await site.store.read_blob_range(grant, BLOB_ID, 10, 20)
        # a grant that reaches it through a3 only names a3
        only_a3 = Grant.from_dict(
            {
                "grant_id": "g-a3",
                "streams": [
                    {"name": "attachments", "instance_ids": [MAILBOX], "resources": ["a3"]}
                ],
            }
        )
        await site.store.blob_info(only_a3, BLOB_ID)
        entries = _blob_entries(await site.store.list_audit(limit=100))
    assert [(e.operation, e.record_ids, e.record_count) for e in entries] == [
        ("blob_info", (A1,), 1),
        ("read_blob_range", (A1, A3), 2),
        ("blob_info", (A3,), 1),
    ]
    for entry in entries:
        assert (entry.surface, entry.outcome, entry.fields) == ("library", "ok", ("blob_ref",))
        assert (entry.stream, entry.connection_id) == ("attachments", MAILBOX)
        assert entry.terms["blob_id"] == BLOB_ID
    assert (entries[1].terms["offset_bytes"], entries[1].terms["length_bytes"]) == (10, 20)


async def test_a_refused_blob_read_names_no_record(db_url: str) -> None:
    async with served(db_url) as site:
        mail_only = Grant.from_dict({"grant_id": "g-mail", "streams": [{"name": "message_bodies"}]})
        try:
            await site.store.blob_info(mail_only, BLOB_ID)
        except Exception as error:
            code = getattr(error, "code", None)
        else:
            raise AssertionError("a grant without attachments reached the blob")
        entries = _blob_entries(await site.store.list_audit(limit=100))
    assert [(e.operation, e.outcome, e.record_ids, e.record_count) for e in entries] == [
        ("blob_info", code, (), 0)
    ]


async def test_a_rest_download_is_one_entry_with_the_bytes_served(db_url: str) -> None:
    """Whole (200), ranged (206), headers only (HEAD, 304) and refused (416): one entry each,
    though the whole blob takes four 64 KiB reads."""
    assert len(DATA) > 3 * BLOB_CHUNK_BYTES
    async with served(db_url) as site:
        path = f"/v1/blobs/{BLOB_ID}"
        whole = await site.get(OWNER, path)
        ranged = await site.get(OWNER, path, headers={"Range": "bytes=100-70099"})
        head = await site.client.head(path, headers={"Authorization": f"Bearer {OWNER}"})
        cached = await site.get(OWNER, path, headers={"If-None-Match": whole.headers["ETag"]})
        past = await site.get(OWNER, path, headers={"Range": f"bytes={len(DATA)}-"})
        statuses = [r.status_code for r in (whole, ranged, head, cached, past)]
        entries = _blob_entries(await site.store.list_audit(limit=100))
    assert statuses == [200, 206, 200, 304, 416]
    assert whole.content == DATA
    assert ranged.content == DATA[100:70100]
    answers = [whole, ranged, head, cached, past]
    assert [e.request_id for e in entries] == [r.headers["x-request-id"] for r in answers]
    assert all(
        (e.surface, e.grant_id, e.record_ids, e.fields) == ("rest", "g-owner", (A1,), ("blob_ref",))
        for e in entries
    )
    got = [
        (
            e.operation,
            e.outcome,
            e.terms.get("range"),
            e.terms.get("offset_bytes"),
            e.terms.get("length_bytes"),
            e.terms.get("served_bytes"),
        )
        for e in entries
    ]
    assert got == [
        ("read_blob_range", "ok", None, 0, len(DATA), len(DATA)),
        ("read_blob_range", "ok", "bytes=100-70099", 100, 70000, 70000),
        ("blob_info", "ok", None, 0, len(DATA), 0),
        ("blob_info", "ok", None, None, None, None),
        ("blob_info", "range_not_satisfiable", f"bytes={len(DATA)}-", None, None, None),
    ]
    assert all("aborted" not in e.terms for e in entries)


async def test_a_download_cut_by_the_server_records_what_was_served(db_url: str) -> None:
    """The record that made the blob readable stops referencing it mid-download: the next step
    is refused, the body ends, and the one entry says `aborted` with the bytes sent before."""
    async with served(db_url) as site:
        grant = _owner()
        audit = OneAuditEntry()
        with audit.counting():
            info = await site.store.blob_info(grant, BLOB_ID)
        body = blob_body(site.store, grant, info, 0, info.size_bytes - 1, audit=audit)
        first = await anext(body)
        await site.store.upsert_records(MAILBOX, "attachments", [attachment("a1", None)])
        try:
            await anext(body)
        except DownloadAborted:
            pass
        else:
            raise AssertionError("the download went on without the grant's reach")
        entries = _blob_entries(await site.store.list_audit(limit=100))
    assert len(first) == BLOB_CHUNK_BYTES
    assert len(entries) == 1
    entry = entries[0]
    assert (entry.operation, entry.outcome, entry.record_ids) == (
        "read_blob_range",
        "aborted",
        (A1,),
    )
    assert entry.terms["served_bytes"] == BLOB_CHUNK_BYTES
    assert entry.terms["length_bytes"] == len(DATA)
    assert entry.terms["aborted"] == "blob_not_found"


async def test_a_download_the_client_leaves_records_what_was_served(db_url: str) -> None:
    async with served(db_url) as site:
        grant = _owner()
        audit = OneAuditEntry()
        with audit.counting():
            info = await site.store.blob_info(grant, BLOB_ID)
        body = blob_body(site.store, grant, info, 1000, info.size_bytes - 1, audit=audit)
        await anext(body)
        await anext(body)
        await body.aclose()  # what a server does with the body of a response whose client left
        entries = _blob_entries(await site.store.list_audit(limit=100))
    assert [(e.operation, e.outcome) for e in entries] == [("read_blob_range", "aborted")]
    terms = entries[0].terms
    assert terms["aborted"] == "client_gone"
    assert (terms["offset_bytes"], terms["length_bytes"]) == (1000, len(DATA) - 1000)
    # the second step was handed over, but the body was closed before its send was done:
    # only the first counts as served
    assert terms["served_bytes"] == BLOB_CHUNK_BYTES
