"""Blobs (docs/contract.md §1 "Data model", §5 "Projection, previews and binary data"), on every
front: content-addressed storage, and metadata and byte ranges readable only through a record the
grant can see whose granted field references the blob; everything else is `blob_not_found`,
indistinguishable from a blob that does not exist.

The oracle of every range is the Python slice of the bytes that were stored.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from _data import MAILBOX, OTHER_MAILBOX, attachment, body, grant, setup_mailbox
from _fronts import StoreFront

from pdpp_store import BadRequest, BlobInfo, Grant, NotFound, StoreError

ATTACHMENTS = "attachments"
CHUNK = 64 * 1024
DATA = random.Random(2026).randbytes(200_000)
"""About 200 KB of random bytes: three full 64 KiB chunks and a partial fourth."""


def _error(call: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call()
    return caught.value


def _attachments(**terms: Any) -> Grant:
    return grant({"name": ATTACHMENTS, "instance_ids": [MAILBOX], **terms})


def _blob_reads(store: StoreFront, g: Grant, blob_id: str) -> list[Callable[[], object]]:
    return [
        partial(store.blob_info, g, blob_id),
        partial(store.read_blob_range, g, blob_id, 0, 16),
    ]


def _refused(store: StoreFront, g: Grant, blob_id: str) -> None:
    """Both blob reads answer exactly as for a blob that was never stored."""
    never = "blob_sha256_" + "0" * 64
    for read, read_never in zip(
        _blob_reads(store, g, blob_id), _blob_reads(store, g, never), strict=True
    ):
        error = _error(read)
        assert isinstance(error, NotFound)
        assert (error.code, error.http_status, error.param) == ("blob_not_found", 404, "blob_id")
        envelope = error.to_dict()
        envelope["error"]["message"] = envelope["error"]["message"].replace(blob_id, never)
        assert envelope == _error(read_never).to_dict()


def test_put_blob_is_content_addressed(store: StoreFront) -> None:
    first = store.put_blob(DATA, "application/pdf")
    sha = hashlib.sha256(DATA).hexdigest()
    assert first == BlobInfo(f"blob_sha256_{sha}", sha, "application/pdf", len(DATA))
    assert first.to_dict() == {
        "object": "blob",
        "blob_id": f"blob_sha256_{sha}",
        "mime_type": "application/pdf",
        "size_bytes": len(DATA),
        "sha256": sha,
    }
    assert store.put_blob(bytes(DATA), "application/pdf") == first
    # The same bytes under another type are the same blob: its first metadata stands.
    assert store.put_blob(DATA, "application/octet-stream") == first
    other = store.put_blob(DATA[:-1], "application/pdf")
    assert other.blob_id != first.blob_id
    assert other.size_bytes == len(DATA) - 1
    empty = store.put_blob(b"", "text/plain")
    assert empty.sha256 == hashlib.sha256(b"").hexdigest()
    assert empty.size_bytes == 0

    not_bytes: Any = "text, not bytes"
    for bad, param in (
        (partial(store.put_blob, not_bytes, "text/plain"), "data"),
        (partial(store.put_blob, b"x", "plain"), "mime_type"),
    ):
        error = _error(bad)
        assert (error.code, error.http_status, error.param) == ("invalid_request", 400, param)


def test_blob_is_readable_only_through_a_visible_record_and_granted_field(
    store: StoreFront,
) -> None:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    shown = store.put_blob(b"attached to a1", "application/pdf")
    in_deleted = store.put_blob(b"attached to a deleted record", "application/pdf")
    late = store.put_blob(b"attached to a record outside the time window", "image/png")
    elsewhere = store.put_blob(b"attached in another connection", "application/pdf")
    named_in_text = store.put_blob(b"its id is only mentioned in text", "text/plain")
    never_referenced = store.put_blob(b"never referenced", "text/plain")
    store.upsert_records(
        MAILBOX,
        ATTACHMENTS,
        [
            attachment("a1", shown.as_ref()),
            attachment("a2", in_deleted.as_ref()),
            attachment("a3", late.as_ref(), received_at="2026-05-01T00:00:00Z"),
            {**attachment("a4", None), "filename": named_in_text.blob_id},
        ],
    )
    store.upsert_records(OTHER_MAILBOX, ATTACHMENTS, [attachment("a1", elsewhere.as_ref())])
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", named_in_text.blob_id)])
    store.delete_record(MAILBOX, ATTACHMENTS, "a2")

    everything = _attachments()
    assert store.blob_info(everything, shown.blob_id) == shown
    assert store.read_blob_range(everything, shown.blob_id, 0, 100).data == b"attached to a1"
    for hidden in (in_deleted, elsewhere, named_in_text, never_referenced):
        _refused(store, everything, hidden.blob_id)
    assert store.blob_info(everything, late.blob_id) == late  # no time constraint here

    # Field granted: yes with `blob_ref` among the fields, no without it.
    assert store.blob_info(_attachments(fields=["id", "blob_ref"]), shown.blob_id) == shown
    _refused(store, _attachments(fields=["id", "filename", "message_received_at"]), shown.blob_id)
    _refused(store, _attachments(fields=[]), shown.blob_id)
    # Record visible: resources, time, connection, stream.
    assert store.blob_info(_attachments(resources=["a1"]), shown.blob_id) == shown
    _refused(store, _attachments(resources=["a3", "a4"]), shown.blob_id)
    in_march = {"field": "message_received_at", "until": "2026-04-01T00:00:00Z"}
    assert store.blob_info(_attachments(time_constraint=in_march), shown.blob_id) == shown
    _refused(store, _attachments(time_constraint=in_march), late.blob_id)
    _refused(store, _attachments(instance_ids=[OTHER_MAILBOX]), shown.blob_id)
    assert store.blob_info(_attachments(instance_ids=[OTHER_MAILBOX]), elsewhere.blob_id)
    _refused(store, grant({"name": "message_bodies"}), shown.blob_id)
    _refused(store, grant({"name": "message_bodies"}), named_in_text.blob_id)
    # Any covering stream grant of a grant with several will do.
    several = grant({"name": "message_bodies"}, {"name": ATTACHMENTS, "resources": ["a1"]})
    assert store.blob_info(several, shown.blob_id) == shown

    # Once the record stops pointing at the blob, the blob is out of reach.
    store.upsert_records(MAILBOX, ATTACHMENTS, [attachment("a1", None)])
    _refused(store, everything, shown.blob_id)


def test_garbage_blob_ids_are_blob_not_found(store: StoreFront) -> None:
    setup_mailbox(store)
    real = store.put_blob(DATA, "application/pdf")
    store.upsert_records(MAILBOX, ATTACHMENTS, [attachment("a1", real.as_ref())])
    g = _attachments()
    for blob_id in (
        "",
        "nonsense",
        "blob_sha256_",
        real.sha256,
        real.blob_id.upper(),
        real.blob_id + "0",
        real.blob_id[:-1],
        "blob_sha256_../" + real.sha256,
        "sha256:" + real.sha256,
    ):
        for read in (
            partial(store.blob_info, g, blob_id),
            partial(store.read_blob_range, g, blob_id),
        ):
            error = _error(read)
            assert (error.code, error.http_status, error.param) == (
                "blob_not_found",
                404,
                "blob_id",
            ), blob_id
    assert store.blob_info(g, real.blob_id) == real


def test_byte_ranges_are_slices_of_the_stored_bytes(store: StoreFront) -> None:
    setup_mailbox(store)
    blob = store.put_blob(DATA, "application/octet-stream")
    store.upsert_records(MAILBOX, ATTACHMENTS, [attachment("a1", blob.as_ref())])
    g = _attachments()
    size = len(DATA)
    ranges = [
        (0, 1),
        (0, 100),
        (CHUNK - 1, 2),  # across the first chunk boundary
        (CHUNK - 10, 10),  # ends exactly at the boundary
        (CHUNK, 10),  # starts exactly at it
        (CHUNK - 5, CHUNK + 10),  # across two boundaries
        (1, 3 * CHUNK),  # across three
        (0, size),  # everything
        (0, 1 << 20),  # more than everything
        (size - 10, 10),  # exactly to the end
        (size - 10, 100),  # past the end: cut at the end
        (size - 1, 1),
        (3 * CHUNK, size),  # the last, partial chunk
        (size, 10),  # at the end: empty
        (size + 12345, 10),  # past the end: empty, at the end
        (10**30, 1),  # far past the end
    ]
    for offset, length in ranges:
        found = store.read_blob_range(g, blob.blob_id, offset, length)
        start = min(offset, size)
        assert found.data == DATA[start : start + length], (offset, length)
        assert found.offset_bytes == start
        assert found.blob == blob
        assert found.has_more == (start + len(found.data) < size)
        assert found.to_dict() == {
            "object": "blob_range",
            "blob": blob.to_dict(),
            "offset_bytes": start,
            "length_bytes": len(found.data),
            "has_more": found.has_more,
        }
    default = store.read_blob_range(g, blob.blob_id)
    assert default.data == DATA[:CHUNK]

    # Paging by has_more rebuilds the bytes exactly.
    pieces, offset = [], 0
    while True:
        page = store.read_blob_range(g, blob.blob_id, offset, 50_000)
        pieces.append(page.data)
        offset += len(page.data)
        if not page.has_more:
            break
    assert b"".join(pieces) == DATA


def test_bad_ranges_are_typed_errors(store: StoreFront) -> None:
    setup_mailbox(store)
    blob = store.put_blob(DATA, "application/octet-stream")
    store.upsert_records(MAILBOX, ATTACHMENTS, [attachment("a1", blob.as_ref())])
    g = _attachments()
    cases: list[tuple[Any, Any, str]] = [
        (0, 0, "length_bytes"),
        (0, -1, "length_bytes"),
        (0, (1 << 20) + 1, "length_bytes"),
        (0, 10**30, "length_bytes"),
        (0, 1.5, "length_bytes"),
        (0, True, "length_bytes"),
        (0, "10", "length_bytes"),
        (-1, 10, "offset_bytes"),
        (-(10**30), 10, "offset_bytes"),
        (0.0, 10, "offset_bytes"),
        (False, 10, "offset_bytes"),
        (None, 10, "offset_bytes"),
    ]
    for offset, length, param in cases:
        for blob_id in (blob.blob_id, "blob_sha256_" + "0" * 64):
            error = _error(partial(store.read_blob_range, g, blob_id, offset, length))
            assert isinstance(error, BadRequest), (offset, length)
            assert (error.code, error.http_status, error.param) == (
                "invalid_request",
                400,
                param,
            ), (offset, length)
            assert param in error.message
