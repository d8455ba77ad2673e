"""Tests of `pdpp_store.evidence` without a database: the schemas are valid draft 2020-12
documents, closed where the shape is closed, and the card checker of the behaviour suite bites."""

from __future__ import annotations

from typing import Any

import pytest
from _cards import check_card, check_error
from jsonschema import Draft202012Validator

from pdpp_store import BadRequest, FieldKind, RecordRef, Unprocessable
from pdpp_store._core.identity import FieldWindowRef, parse_field_window_uri, parse_record_ref
from pdpp_store.evidence import (
    CARDS,
    BlobInfo,
    BlobRange,
    Continuation,
    FieldInfo,
    FieldPreview,
    FieldWindow,
    RecordView,
    UpsertResult,
    json_schemas,
)

DIGEST = "sha256:" + "ab" * 32
SHA = "cd" * 32
TEXT = FieldInfo("body", FieldKind.TEXT, "string", 5000, 5000, DIGEST)
BINARY = FieldInfo(
    "raw",
    FieldKind.BINARY,
    "string",
    4,
    4,
    DIGEST,
    "application/octet-stream",
    f"blob_sha256_{SHA}",
)
REF = RecordRef("cin_a", "emails", "e:1")


def test_json_schemas_names_every_card_and_the_error_envelope() -> None:
    schemas = json_schemas()
    assert set(schemas) == {card.__name__ for card in CARDS} | {"Error"}
    for name, schema in schemas.items():
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["title"] == name
    schemas["FieldInfo"]["title"] = "changed"  # copies: the published schema is untouched
    assert FieldInfo.JSON_SCHEMA["title"] == "FieldInfo"


@pytest.mark.parametrize("card", CARDS, ids=lambda card: card.__name__)
def test_cards_are_closed(card: Any) -> None:
    assert card.JSON_SCHEMA["additionalProperties"] is False


def _window(**changes: Any) -> FieldWindow:
    fields: dict[str, Any] = {
        "connection_id": "cin_a",
        "stream": "emails",
        "record_id": "e:1",
        "field": TEXT,
        "text": "x" * 10,
        "start_chars": 10,
        "limit_chars": 10,
        "next_cursor": "n",
        "previous_cursor": "p",
    }
    return FieldWindow(**(fields | changes))


def _cards() -> list[Any]:
    blob = BlobInfo(f"blob_sha256_{SHA}", SHA, "application/pdf", 10)
    previews = (
        FieldPreview(REF, TEXT, "truncated", "x" * 1024, "x" * 1024),
        FieldPreview(REF, BINARY, "binary-only"),
        FieldPreview(REF, FieldInfo("n", FieldKind.JSON, "integer", 1, 1, DIGEST), "complete", 1),
    )
    return [
        _window(),
        TEXT,
        BINARY,
        *previews,
        RecordView(REF, 3, previews),
        RecordView(REF, None, ()),
        blob,
        BlobRange(blob, 2, b"abc"),
        UpsertResult(1, 2, 3),
        Continuation("read_record", {"record": REF.id}),
    ]


def test_every_card_renders_valid_against_its_schema() -> None:
    for card in _cards():
        check_card(card)
    details = {"field": BINARY.to_dict()}
    check_error(Unprocessable("field_not_text", "binary", param="field", details=details))


def test_the_checker_bites_on_a_card_that_drifts_from_its_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window = _window()
    drifted = {**window.to_dict(), "unexpected": 1}
    monkeypatch.setattr(FieldWindow, "to_dict", lambda self: drifted)
    with pytest.raises(AssertionError, match=r"FieldWindow\.to_dict"):
        check_card(window)
    monkeypatch.setattr(FieldInfo, "to_dict", lambda self: {"path": "body"})
    with pytest.raises(AssertionError, match=r"FieldInfo\.to_dict"):
        check_card(TEXT)
    bad_details = BadRequest("invalid_request", "x", details={"field": {"path": 1}})
    with pytest.raises(AssertionError, match="Error"):
        check_error(bad_details)


def test_a_truncated_preview_continues_with_a_window_read_named_after_the_library() -> None:
    preview = FieldPreview(REF, TEXT, "truncated", "x" * 1024, "x" * 1024)
    entry = preview.to_dict()
    read = entry["read"]
    assert read["operation"] == "read_field_window"
    assert read["arguments"] == {
        "record": "cin_a/emails:e:1",
        "field": "body",
        "offset_chars": 1024,
        "limit_chars": 4096,
    }
    assert parse_field_window_uri(read["resource_uri"]) == FieldWindowRef(REF, "body", 1024, 4096)
    assert "tool" not in str(entry)
    assert "read" not in FieldPreview(REF, BINARY, "binary-only").to_dict()


def test_a_record_whose_id_would_not_parse_back_is_named_by_its_uri() -> None:
    awkward = RecordRef("cin_a", "a:b", "c")  # a stream holding ':' (identity rule 3)
    continuation = Continuation.read_window(FieldWindowRef(awkward, "body", cursor="abc"))
    record = continuation.arguments["record"]
    assert record == awkward.uri
    assert parse_record_ref(record) == awkward
    assert REF.argument == REF.id
    wide = RecordView(awkward, None, (), next_after_field="f063")  # a wide record's next page
    assert wide.next is not None
    assert parse_record_ref(wide.next.arguments["record"]) == awkward


def test_window_continuations_follow_the_cursors() -> None:
    window = _window()
    assert window.next is not None
    assert window.previous is not None
    assert window.next.arguments == {"record": REF.id, "field": "body", "cursor": "n"}
    assert window.previous.arguments["cursor"] == "p"
    assert parse_field_window_uri(window.next.resource_uri).cursor == "n"
    last = _window(text="x" * 10, start_chars=4990, next_cursor=None)
    assert last.next is None
    assert last.to_dict()["next"] is None
    assert last.total_chars == TEXT.size_chars


@pytest.mark.parametrize(
    "build",
    [
        lambda: FieldPreview(REF, TEXT, "truncated"),
        lambda: FieldPreview(REF, TEXT, "binary-only"),
        lambda: BlobInfo("blob_sha256_" + "0" * 64, SHA, "text/plain", 1),
        lambda: BlobRange(BlobInfo(f"blob_sha256_{SHA}", SHA, "text/plain", 2), 1, b"abc"),
        lambda: Continuation(""),
    ],
)
def test_cards_refuse_inconsistent_values(build: Any) -> None:
    with pytest.raises(ValueError, match=r"."):
        build()


def test_revision_hashes_each_field_as_its_json() -> None:
    """The revision is spelled without `json.dumps` (it is computed on every projection); it is
    the digest of `json.dumps([path, kind, digest])` per field, in path order."""
    import hashlib
    import json

    paths = ["b", 'a"q', "é😀", "\x01\n\\", "z", "\u2028"]
    kinds = [FieldKind.TEXT, FieldKind.JSON]
    previews = tuple(
        FieldPreview(REF, FieldInfo(path, kinds[n % 2], "string", 1, 1, DIGEST), "complete", "x")
        for n, path in enumerate(paths)
    )
    hasher = hashlib.sha256()
    for item in sorted(previews, key=lambda item: item.info.path):
        info = item.info
        hasher.update(json.dumps([info.path, info.kind.value, info.digest]).encode())
    assert RecordView(REF, 1, previews).revision == "sha256:" + hasher.hexdigest()
