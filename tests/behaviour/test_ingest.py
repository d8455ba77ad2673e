"""Ingestion (docs/contract.md §1 "Data model", §7 "Errors"): manifests, connections, upserts,
deletes, blobs, and bad input that leaves the store unchanged. Every test runs on every backend and
front."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from _data import MAILBOX, body, manifest, owner, setup_mailbox
from _fronts import StoreFront
from sqlalchemy import create_engine, text

from pdpp_store import Grant, RecordRef, StoreError
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._runtime import sync_url


def _count_rows(store: StoreFront) -> dict[str, int]:
    """Row counts of every table, read with a separate engine: "the store is unchanged"."""
    url = store.engine.url.render_as_string(hide_password=False)
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            return {
                table: conn.execute(text(f"select count(*) from {table}")).scalar_one()
                for table in ("records", "fields", "field_chunks", "blobs", "blob_chunks")
            }
    finally:
        engine.dispose()


def _error(call: Any, *args: Any, **kwargs: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    return caught.value


@pytest.mark.parametrize("name", ["gmail", "slack", "chatgpt"])
def test_real_manifests_are_accepted_as_they_are(store: StoreFront, name: str) -> None:
    document = manifest(name)
    store.register_manifest(document)
    store.register_manifest(document)  # re-registering replaces, never duplicates
    store.add_connection("cin_x", document["connector_id"])
    first_stream = document["streams"][0]
    key = first_stream["primary_key"][0]
    result = store.upsert_records("cin_x", first_stream["name"], [{key: "r1"}])
    assert result.inserted == 1


@pytest.mark.parametrize(
    ("bad", "param"),
    [
        ([], "manifest"),
        ({"streams": [{"name": "s", "primary_key": ["id"]}]}, "connector_id"),
        ({"connector_id": "c", "streams": []}, "streams"),
        ({"connector_id": "c", "streams": [{"name": "s"}]}, "streams[0].primary_key"),
        (
            {"connector_id": "c", "streams": [{"name": "a/b", "primary_key": ["id"]}]},
            "streams[0].name",
        ),
        (
            {"connector_id": "c", "streams": [{"name": "s", "primary_key": ["id"]}] * 2},
            "streams",
        ),
    ],
)
def test_a_bad_manifest_is_refused_and_changes_nothing(
    store: StoreFront, bad: Any, param: str
) -> None:
    error = _error(store.register_manifest, bad)
    assert (error.code, error.http_status, error.param) == ("invalid_manifest", 400, param)
    error = _error(store.add_connection, "cin_y", "c")
    assert error.param == "connector_id"


def test_connections_are_safe_names_bound_to_one_connector(store: StoreFront) -> None:
    connector = setup_mailbox(store)
    store.add_connection(MAILBOX, connector)  # again: no-op
    assert _error(store.add_connection, "a/b", connector).param == "connection_id"
    assert _error(store.add_connection, "..", connector).param == "connection_id"
    slack = manifest("slack")
    store.register_manifest(slack)
    assert _error(store.add_connection, MAILBOX, slack["connector_id"]).param == "connection_id"


def test_upsert_versions_and_identical_records_write_nothing(store: StoreFront) -> None:
    setup_mailbox(store)
    first = store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello"), body("e2", "x")])
    assert first.to_dict() == {"inserted": 2, "updated": 0, "unchanged": 0}
    before = _count_rows(store)
    again = store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
    assert again.to_dict() == {"inserted": 0, "updated": 0, "unchanged": 1}
    assert _count_rows(store) == before
    record = RecordRef(MAILBOX, "message_bodies", "e1")
    assert store.read_record(owner(), record).version == 1
    changed = store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello again")])
    assert changed.updated == 1
    assert store.read_record(owner(), record).version == 2
    assert store.read_record(owner(), record).to_dict()["data"]["body_text"] == "hello again"


def test_a_removed_field_is_gone_after_update(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
    slim = {"id": "e1", "message_id": "m-e1"}
    store.upsert_records(MAILBOX, "message_bodies", [slim])
    data = store.read_record(owner(), "cin_mail/message_bodies:e1").to_dict()["data"]
    assert data == slim


def test_compound_primary_keys_are_minified_json_arrays(store: StoreFront) -> None:
    store.register_manifest(
        {
            "connector_id": "compound",
            "streams": [{"name": "events", "primary_key": ["day", "n"], "schema": {}}],
        }
    )
    store.add_connection("cin_c", "compound")
    store.upsert_records("cin_c", "events", [{"day": "2026-01-02", "n": 7, "what": "x"}])
    record_id = json.dumps(["2026-01-02", 7], separators=(",", ":"))
    view = store.read_record(
        Grant.owner("cin_c", "events"), RecordRef("cin_c", "events", record_id)
    )
    assert view.ref.record_id == '["2026-01-02",7]'


def test_soft_delete_hides_and_reingest_restores(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
    store.delete_record(MAILBOX, "message_bodies", "e1")
    assert _error(store.read_record, owner(), "cin_mail/message_bodies:e1").code == "not_found"
    assert _error(store.delete_record, MAILBOX, "message_bodies", "e1").code == "not_found"
    assert _count_rows(store)["fields"] > 0  # soft: the data is still there
    restored = store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
    assert restored.updated == 1
    assert store.read_record(owner(), "cin_mail/message_bodies:e1").version == 3


def test_stored_sizes_digests_and_chunks_match_python(store: StoreFront) -> None:
    setup_mailbox(store)
    value = ("Zoë 😀 名前 " * 500)[: CHUNK_CHARS * 3 + 17]
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", value)])
    info = store.describe_field(owner(), "cin_mail/message_bodies:e1", "body_text")
    assert info.size_chars == len(value)
    assert info.size_bytes == len(value.encode())
    assert info.digest == "sha256:" + hashlib.sha256(value.encode()).hexdigest()
    url = store.engine.url.render_as_string(hide_password=False)
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            chunks = conn.execute(
                text(
                    "select chunk_no, text from field_chunks where path = 'body_text' "
                    "order by chunk_no"
                )
            ).all()
    finally:
        engine.dispose()
    assert [c[0] for c in chunks] == [0, 1, 2, 3]
    assert "".join(c[1] for c in chunks) == value
    assert all(len(c[1]) == CHUNK_CHARS for c in chunks[:-1])


def test_put_blob_is_content_addressed(store: StoreFront) -> None:
    data = b"%PDF-1.7\n" + bytes(range(256)) * 700
    blob = store.put_blob(data, "application/pdf")
    assert blob.blob_id == "blob_sha256_" + hashlib.sha256(data).hexdigest()
    assert (blob.size_bytes, blob.mime_type, blob.sha256) == (
        len(data),
        "application/pdf",
        hashlib.sha256(data).hexdigest(),
    )
    assert store.put_blob(data, "application/pdf") == blob
    assert _error(store.put_blob, "not bytes", "text/plain").param == "data"
    assert _error(store.put_blob, b"x", "nonsense").param == "mime_type"


def test_kinds_come_from_manifest_or_content_never_the_name(store: StoreFront) -> None:
    store.register_manifest(
        {
            "connector_id": "kinds",
            "streams": [
                {
                    "name": "files",
                    "primary_key": ["id"],
                    "schema": {
                        "properties": {
                            "payload": {
                                "type": "string",
                                "contentEncoding": "base64",
                                "contentMediaType": "image/png",
                            },
                        }
                    },
                }
            ],
        }
    )
    store.add_connection("cin_k", "kinds")
    looks_b64 = "QUJD" * 40 + "+/9a"
    store.upsert_records(
        "cin_k",
        "files",
        [
            {
                "id": "f1",
                "payload": "aGVsbG8=",  # short, but declared base64
                "base64": "a field merely named base64 is text",
                "blob": looks_b64 + "0123",  # unmistakable base64 by content
                "nul": "a\x00b",
            }
        ],
    )
    grant = Grant.owner("cin_k", "files")
    ref = "cin_k/files:f1"
    kinds = {
        name: store.describe_field(grant, ref, name).kind.value
        for name in ("payload", "base64", "blob", "nul")
    }
    assert kinds == {"payload": "base64", "base64": "text", "blob": "base64", "nul": "binary"}
    assert store.describe_field(grant, ref, "payload").mime_type == "image/png"
    assert store.describe_field(grant, ref, "payload").size_bytes == 5


@pytest.mark.parametrize(
    ("record", "code", "param"),
    [
        ("not an object", "invalid_record", None),
        ([1, 2], "invalid_record", None),
        ({"message_id": "no id"}, "invalid_record", "id"),
        ({"id": None}, "invalid_record", "id"),
        ({"id": ["a"]}, "invalid_record", "id"),
        ({"id": "a/b"}, "invalid_record", "id"),
        ({"id": "e9", "body_text": "lone \ud800 surrogate"}, "invalid_record", "body_text"),
        ({"id": "e9", "nested": {"k": "\udfff"}}, "invalid_record", "nested"),
        ({"id": "e9", "x": float("nan")}, "invalid_record", "x"),
        ({"id": "e9", "x": object()}, "invalid_record", "x"),
        ({"id": "e9", "": "empty name"}, "invalid_field_path", "field"),
        ({"id": "e9", "a\x00b": "nul name"}, "invalid_field_path", "field"),
    ],
)
def test_bad_records_fail_typed_and_leave_the_batch_unwritten(
    store: StoreFront, record: Any, code: str, param: str | None
) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("keep", "kept")])
    before = _count_rows(store)
    error = _error(store.upsert_records, MAILBOX, "message_bodies", [body("new1", "fine"), record])
    assert (error.code, error.http_status, error.param) == (code, 400, param)
    assert "#1" in error.message  # names the record (its position) ...
    if param:
        assert repr(param) in error.message or param == "field"  # ... and the field
    assert _count_rows(store) == before


def test_nul_strings_are_kept_losslessly(store: StoreFront) -> None:
    setup_mailbox(store)
    value = "before\x00after é"
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", value)])
    info = store.describe_field(owner(), "cin_mail/message_bodies:e1", "body_text")
    assert (info.kind.value, info.text_like, info.size_chars) == ("binary", False, len(value))
    assert info.digest == "sha256:" + hashlib.sha256(value.encode()).hexdigest()
    error = _error(store.read_field_window, owner(), "cin_mail/message_bodies:e1", "body_text")
    assert error.code == "field_not_text"


@pytest.mark.parametrize(
    ("connection_id", "stream", "code"),
    [
        ("cin_nope", "message_bodies", "connection_not_found"),
        (MAILBOX, "nope", "stream_not_declared"),
    ],
)
def test_unknown_connection_or_stream_is_refused(
    store: StoreFront, connection_id: str, stream: str, code: str
) -> None:
    setup_mailbox(store)
    error = _error(store.upsert_records, connection_id, stream, [body("e1", "x")])
    assert (error.code, error.http_status) == (code, 404)
    assert _count_rows(store)["records"] == 0


def test_records_must_be_a_list(store: StoreFront) -> None:
    setup_mailbox(store)
    assert _error(store.upsert_records, MAILBOX, "message_bodies", body("e1", "x")).param == (
        "records"
    )


def test_batches_commit_in_order_and_say_what_was_committed(db_url: str) -> None:
    from pdpp_store import Store

    with Store.open(db_url, batch_size=2) as store:
        setup_mailbox(store)
        records: list[Any] = [body(f"e{i}", "x") for i in range(5)] + ["bad"]
        error = _error(store.upsert_records, MAILBOX, "message_bodies", iter(records))
        assert error.details["committed"] == {"inserted": 4, "updated": 0, "unchanged": 0}
        assert _count_rows(store)["records"] == 4


def test_binary_only_strings_are_exported_as_blobs(store: StoreFront) -> None:
    store.register_manifest(
        {
            "connector_id": "bin",
            "streams": [
                {
                    "name": "files",
                    "primary_key": ["id"],
                    "schema": {
                        "properties": {
                            "png": {"contentEncoding": "base64", "contentMediaType": "image/png"},
                            "broken": {"contentEncoding": "base64"},
                        }
                    },
                }
            ],
        }
    )
    store.add_connection("cin_b", "bin")
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 300
    nul = "a\x00b é"
    store.upsert_records(
        "cin_b",
        "files",
        [{"id": "f1", "png": base64.b64encode(png).decode(), "nul": nul, "broken": "not b64!"}],
    )
    grant = Grant.owner("cin_b", "files")
    for name, data in (("png", png), ("nul", nul.encode())):
        info = store.describe_field(grant, "cin_b/files:f1", name)
        assert info.blob_id == "blob_sha256_" + hashlib.sha256(data).hexdigest()
        assert info.to_dict()["export_uri"] == f"pdpp://blob/{info.blob_id}"
        assert info.size_bytes == len(data)
        assert store.read_blob_range(grant, info.blob_id, 0, len(data)).data == data
    assert store.describe_field(grant, "cin_b/files:f1", "broken").blob_id is None
    narrow = Grant.from_dict(
        {"grant_id": "g", "streams": [{"name": "files", "fields": ["id", "nul"]}]}
    )
    png_id = store.describe_field(grant, "cin_b/files:f1", "png").blob_id
    assert png_id is not None
    assert _error(store.blob_info, narrow, png_id).code == "blob_not_found"
