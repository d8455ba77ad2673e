"""`read_record` projection (docs/contract.md §5, "Projection, previews and binary data"), on every
front: granted fields only, short values whole, long text as a 1024-code-point preview with ladder
metadata that continues exactly, large JSON summarized, binary fields metadata-only;
`describe_field`; record versions.

Oracles are computed here, never taken from the store: Python slices for previews and windows,
`hashlib.sha256` for digests, `json.dumps` for the canonical JSON text of non-string values.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from typing import Any

import pytest
from _data import (
    MAILBOX,
    attachment,
    body,
    grant,
    mixed_text,
    owner,
    ref_id,
    setup_mailbox,
)
from _fronts import StoreFront

from pdpp_store import FieldInfo, FieldKind, FieldWindow, Grant, StoreError, Unprocessable

BODIES = "message_bodies"
PREVIEW = 1024
SECRET = "TOPSECRET-42c9"


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical(value: object) -> str:
    """The canonical JSON text the store keeps for a non-string value (sorted keys, minified)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def view_of(
    store: StoreFront, g: Grant, record_id: str, stream: str = BODIES, connection_id: str = MAILBOX
) -> dict[str, Any]:
    found: dict[str, Any] = store.read_record(g, ref_id(record_id, connection_id, stream)).to_dict()
    return found


def error_of(call: Any, *args: Any, **kwargs: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    return caught.value


def continue_from(store: StoreFront, g: Grant, entry: dict[str, Any]) -> FieldWindow:
    """Follow a ladder entry's `read` continuation: the library operation it names, with its
    arguments as they are (the record is a self-contained id, the field its path)."""
    read = entry["read"]
    assert read["operation"] == "read_field_window"
    assert set(read["arguments"]) == {"record", "field", "offset_chars", "limit_chars"}
    window: FieldWindow = store.read_field_window(g, **read["arguments"])
    return window


def read_rest(store: StoreFront, g: Grant, entry: dict[str, Any]) -> str:
    """Everything after the preview, page by page, by the ladder's arguments then cursors."""
    window = continue_from(store, g, entry)
    text = [window.text]
    while window.next_cursor is not None:
        window = store.read_field_window(
            g, ref_id(window.record_id), window.field.path, cursor=window.next_cursor
        )
        text.append(window.text)
    return "".join(text)


FILES_MANIFEST: dict[str, Any] = {
    "connector_id": "https://example.test/connectors/files",
    "streams": [
        {
            "name": "files",
            "primary_key": ["id"],
            "schema": {
                "properties": {
                    "content": {
                        "type": "string",
                        "contentEncoding": "base64",
                        "contentMediaType": "image/png",
                    }
                }
            },
        }
    ],
}


def test_only_granted_fields_appear(store: StoreFront) -> None:
    setup_mailbox(store)
    record = body("e1", mixed_text(3000))
    record.update(
        {
            "body_html": f"<p>{SECRET}</p>" * 200,
            "content_languages": [f"{SECRET}-{i}" for i in range(300)],
            "charset": SECRET,
            "Unicode 名": "ordinary key",
            "id.with.dot": [1, 2],
            'say"when': {"k": True},
        }
    )
    store.upsert_records(MAILBOX, BODIES, [record])
    granted = ["id", "body_text", "Unicode 名", "id.with.dot", 'say"when', "not_in_record"]
    g = grant({"name": BODIES, "instance_ids": [MAILBOX], "fields": granted})
    view = view_of(store, g, "e1")
    assert set(view["data"]) == {"id", "body_text", "Unicode 名", "id.with.dot", 'say"when'}
    assert set(view["content_ladder"]) == {"body_text"}
    assert view["data"]["Unicode 名"] == "ordinary key"
    assert view["data"]["id.with.dot"] == [1, 2]
    assert view["data"]['say"when'] == {"k": True}
    assert SECRET not in json.dumps(view, ensure_ascii=False)
    assert {k: view[k] for k in ("object", "id", "connection_id", "stream", "record_id")} == {
        "object": "record",
        "id": ref_id("e1"),
        "connection_id": MAILBOX,
        "stream": BODIES,
        "record_id": "e1",
    }
    assert store.read_resource(g, view["uri"]).to_dict() == view

    everything = view_of(store, owner(), "e1")
    assert set(everything["data"]) | set(everything["content_ladder"]) == set(record)


def test_short_values_are_complete_in_data(store: StoreFront) -> None:
    setup_mailbox(store)
    exactly = "😀é名" * (PREVIEW // 3) + "x"  # 1024 code points, more UTF-8 bytes and UTF-16 units
    assert len(exactly) == PREVIEW
    small_json: dict[str, Any] = {
        "content_languages": ["en", "fr"],
        "labels": {"b": [1, 2.5], "a": None, "c": "zoë"},
        "body_text_bytes": 1234,
        "ratio": 0.25,
        "flag": False,
        "body_html": None,
        "empty_text": "",
        "empty_list": [],
    }
    store.upsert_records(MAILBOX, BODIES, [{**body("e1", exactly), **small_json}])
    view = view_of(store, owner(), "e1")
    assert view["content_ladder"] == {}
    assert view["data"] == {**body("e1", exactly), **small_json}

    one_more = exactly + "!"
    store.upsert_records(MAILBOX, BODIES, [body("e2", one_more)])
    longer = view_of(store, owner(), "e2")
    assert longer["data"]["body_text"] == exactly
    assert longer["content_ladder"]["body_text"]["preview_status"] == "truncated"
    assert longer["content_ladder"]["body_text"]["size_chars"] == PREVIEW + 1


def test_long_text_is_a_preview_that_continues_exactly(store: StoreFront) -> None:
    setup_mailbox(store)
    texts = {f"e{size}": mixed_text(size, seed=size) for size in (PREVIEW + 1, 3000, 20_000)}
    store.upsert_records(MAILBOX, BODIES, [body(rid, text) for rid, text in texts.items()])
    g = grant({"name": BODIES, "instance_ids": [MAILBOX], "fields": ["id", "body_text"]})
    for rid, text in texts.items():
        view = view_of(store, g, rid)
        preview = view["data"]["body_text"]
        assert preview == text[:PREVIEW]
        assert len(preview) == PREVIEW
        entry = view["content_ladder"]["body_text"]
        assert {
            key: entry[key] for key in ("path", "type", "text_like", "size_chars", "preview_status")
        } == {
            "path": "body_text",
            "type": "string",
            "text_like": True,
            "size_chars": len(text),
            "preview_status": "truncated",
        }
        assert entry["digest"] == sha(text)
        assert text not in json.dumps(view, ensure_ascii=False)

        window = continue_from(store, g, entry)
        assert window.record_id == rid
        assert window.start_chars == PREVIEW
        assert window.text == text[PREVIEW : PREVIEW + window.limit_chars]
        assert window.field.digest == sha(text)
        assert preview + read_rest(store, g, entry) == text

        by_uri = store.read_resource(g, entry["read"]["resource_uri"])
        assert isinstance(by_uri, FieldWindow)
        assert by_uri.to_dict() == window.to_dict()


def test_large_json_is_summarized_never_dumped(store: StoreFront) -> None:
    setup_mailbox(store)
    languages = [f"lang-{i:04d}-ü" for i in range(400)]
    headers = {f"X-Header-{i:03d}": f"value {i} 😀" for i in range(200)}
    store.upsert_records(
        MAILBOX,
        BODIES,
        [{**body("e1", "short"), "content_languages": languages, "headers": headers}],
    )
    view = view_of(store, owner(), "e1")
    dumped = json.dumps(view, ensure_ascii=False)
    for path, value, json_type in (
        ("content_languages", languages, "array"),
        ("headers", headers, "object"),
    ):
        stored = canonical(value)
        assert len(stored) > PREVIEW
        assert path not in view["data"]
        entry = view["content_ladder"][path]
        assert entry["type"] == json_type
        assert entry["text_like"] is True
        assert entry["preview_status"] == "truncated"
        assert entry["item_count"] == len(value)
        assert entry["size_chars"] == len(stored)
        assert entry["digest"] == sha(stored)
        assert entry["preview"] == stored[:PREVIEW]
        assert stored not in dumped
        assert entry["preview"] + read_rest(store, owner(), entry) == stored
    assert languages[-1] not in dumped
    assert "X-Header-199" not in dumped


def test_binary_fields_are_metadata_only(store: StoreFront) -> None:
    setup_mailbox(store)
    blob = store.put_blob(random.Random(5).randbytes(5000), "application/pdf")
    store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    raw = random.Random(6).randbytes(600)
    encoded = base64.b64encode(raw).decode("ascii")
    nul = f"{SECRET}\x00tail"
    prose = "This is an ordinary sentence about base64, stored under a misleading name. " * 3
    hex_digest = hashlib.sha256(b"x").hexdigest()
    store.upsert_records(
        MAILBOX,
        BODIES,
        [
            {
                **body("e1", "short text"),
                "body_html": nul,
                "raw_part": encoded,  # base64 by content, not by name
                "attachment_base64": prose,  # the name says base64; the content is text
                "content_sha256": hex_digest,
            }
        ],
    )

    record = view_of(store, owner("attachments"), "a1", stream="attachments")
    assert "blob_ref" not in record["data"]
    ref_entry = record["content_ladder"]["blob_ref"]
    assert ref_entry["preview_status"] == "binary-only"
    assert ref_entry["text_like"] is False
    assert ref_entry["blob_id"] == blob.blob_id
    assert ref_entry["mime_type"] == "application/pdf"
    assert ref_entry["size_bytes"] == 5000
    assert ref_entry["digest"].startswith("sha256:")
    assert ref_entry["export_uri"]
    assert "read" not in ref_entry

    view = view_of(store, owner(), "e1")
    dumped = json.dumps(view, ensure_ascii=False)
    assert view["data"]["attachment_base64"] == prose
    assert view["data"]["content_sha256"] == hex_digest
    for path, size_bytes, digest in (
        ("body_html", len(nul.encode()), sha(nul)),
        ("raw_part", len(raw), sha(encoded)),
    ):
        assert path not in view["data"]
        entry = view["content_ladder"][path]
        assert entry["preview_status"] == "binary-only", path
        assert entry["text_like"] is False
        assert entry["mime_type"]
        assert entry["size_bytes"] == size_bytes, path
        assert entry["digest"] == digest, path
        assert "read" not in entry
        assert "preview" not in entry
    assert SECRET not in dumped
    assert encoded[:64] not in dumped

    # Declared base64 (`contentEncoding`) is binary-only even when short, with the declared type.
    store.register_manifest(FILES_MANIFEST)
    store.add_connection("cin_files", FILES_MANIFEST["connector_id"])
    store.upsert_records("cin_files", "files", [{"id": "f1", "content": "aGk=", "note": "aGk="}])
    files = view_of(store, Grant.owner("cin_files", "files"), "f1", "files", "cin_files")
    del files["data"]["id"]
    assert files["data"] == {"note": "aGk="}  # undeclared and short: ordinary text
    declared = files["content_ladder"]["content"]
    assert (declared["preview_status"], declared["mime_type"], declared["size_bytes"]) == (
        "binary-only",
        "image/png",
        2,
    )
    assert declared["digest"] == sha("aGk=")

    for stream, rid, path in (
        (BODIES, "e1", "body_html"),
        (BODIES, "e1", "raw_part"),
        ("attachments", "a1", "blob_ref"),
    ):
        g = owner(stream)
        error = error_of(store.read_field_window, g, ref_id(rid, stream=stream), path)
        assert isinstance(error, Unprocessable)
        assert (error.code, error.http_status, error.param) == ("field_not_text", 422, "field")
        carried = error.to_dict()["error"]["field"]
        assert carried == store.describe_field(g, ref_id(rid, stream=stream), path).to_dict()
        assert SECRET not in json.dumps(error.to_dict(), ensure_ascii=False)


def test_describe_field(store: StoreFront) -> None:
    setup_mailbox(store)
    blob = store.put_blob(b"%PDF-1.7 tiny", "application/pdf")
    store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    text = mixed_text(5000)
    nul = "a\x00b😀"
    store.upsert_records(
        MAILBOX, BODIES, [{**body("e1", text), "body_html": nul, "content_languages": ["en"]}]
    )
    g = owner()
    assert store.describe_field(g, ref_id("e1"), "body_text") == FieldInfo(
        "body_text", FieldKind.TEXT, "string", 5000, len(text.encode()), sha(text)
    )
    languages = store.describe_field(g, ref_id("e1"), "content_languages")
    assert (languages.kind, languages.json_type, languages.text_like) == (
        FieldKind.JSON,
        "array",
        True,
    )
    assert (languages.size_chars, languages.digest) == (len('["en"]'), sha('["en"]'))

    binary = store.describe_field(g, ref_id("e1"), "body_html")
    assert (binary.kind, binary.text_like, binary.json_type) == (FieldKind.BINARY, False, "string")
    assert (binary.size_chars, binary.size_bytes, binary.digest) == (4, len(nul.encode()), sha(nul))
    assert binary.mime_type

    ref = store.describe_field(owner("attachments"), ref_id("a1", stream="attachments"), "blob_ref")
    assert (ref.kind, ref.text_like, ref.json_type) == (FieldKind.BLOB_REF, False, "object")
    assert (ref.blob_id, ref.mime_type, ref.size_bytes) == (
        blob.blob_id,
        "application/pdf",
        blob.size_bytes,
    )

    missing = error_of(store.describe_field, g, ref_id("e1"), "no_such_field")
    assert (missing.code, missing.http_status, missing.param) == ("field_not_found", 404, "field")


def test_version_bumps_on_change_only(store: StoreFront) -> None:
    setup_mailbox(store)
    record = {**body("e1", "first"), "labels": {"a": 1, "b": [1, 2]}}

    def version() -> int:
        found = store.read_record(owner(), ref_id("e1")).version
        assert found is not None  # an owner grant sees the record's version
        return found

    assert store.upsert_records(MAILBOX, BODIES, [record]).inserted == 1
    assert version() == 1
    digest = store.describe_field(owner(), ref_id("e1"), "body_text").digest

    again = store.upsert_records(MAILBOX, BODIES, [dict(record)])
    assert (again.inserted, again.updated, again.unchanged) == (0, 0, 1)
    reordered = {**record, "labels": {"b": [1, 2], "a": 1}}  # same JSON value, other key order
    assert store.upsert_records(MAILBOX, BODIES, [reordered]).unchanged == 1
    assert version() == 1
    assert store.describe_field(owner(), ref_id("e1"), "body_text").digest == digest

    changed = {**record, "body_text": "second"}
    assert store.upsert_records(MAILBOX, BODIES, [changed]).updated == 1
    assert version() == 2
    assert store.read_record(owner(), ref_id("e1")).to_dict()["data"]["body_text"] == "second"
    store.upsert_records(MAILBOX, BODIES, [changed])
    assert version() == 2

    fewer = {k: v for k, v in changed.items() if k != "labels"}
    store.upsert_records(MAILBOX, BODIES, [fewer])
    assert version() == 3
    assert "labels" not in store.read_record(owner(), ref_id("e1")).to_dict()["data"]

    store.delete_record(MAILBOX, BODIES, "e1")
    assert error_of(store.read_record, owner(), ref_id("e1")).code == "not_found"
    store.upsert_records(MAILBOX, BODIES, [fewer])
    assert version() > 3
