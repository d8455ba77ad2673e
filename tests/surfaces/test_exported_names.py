"""The public surface, pinned: what `pdpp_store` and `pdpp_store.evidence` export (httpx's
`test_exported_members`). A name added or removed is a decision, made here on purpose."""

from __future__ import annotations

import pdpp_store
import pdpp_store.evidence

PUBLIC = [
    "CATALOGUE",
    "SELECTOR_ARGS",
    "AggregateGroup",
    "AggregateResult",
    "AsyncStore",
    "AuditEntry",
    "BadRequest",
    "BlobInfo",
    "BlobRange",
    "Conflict",
    "Continuation",
    "CursorCodec",
    "CursorKey",
    "FieldInfo",
    "FieldKind",
    "FieldPreview",
    "FieldSchema",
    "FieldWindow",
    "FieldWindowRef",
    "Forbidden",
    "Grant",
    "GrantSchema",
    "MatchExcerpt",
    "NotFound",
    "OneAuditEntry",
    "PageOrder",
    "RecordPage",
    "RecordRef",
    "RecordRow",
    "RecordTombstone",
    "RecordView",
    "SearchHit",
    "SearchPage",
    "SelectorArg",
    "SelectorArgs",
    "Store",
    "StoreError",
    "StoredGrant",
    "StreamGrant",
    "StreamSchema",
    "TimeConstraint",
    "Unavailable",
    "Unprocessable",
    "UnscopedRecordRef",
    "UpsertResult",
    "audit_context",
    "fold",
    "load_tokens",
    "note_client",
    "parse_field_window_uri",
    "parse_record_ref",
    "read_tokens_json",
    "tokens_from_dict",
]

EVIDENCE = [
    "CARDS",
    "ERROR_SCHEMA",
    "AggregateGroup",
    "AggregateResult",
    "AuditEntry",
    "BlobInfo",
    "BlobRange",
    "CardSlot",
    "Continuation",
    "FieldInfo",
    "FieldPreview",
    "FieldSchema",
    "FieldWindow",
    "GrantSchema",
    "MatchExcerpt",
    "PageOrder",
    "RecordCard",
    "RecordPage",
    "RecordRow",
    "RecordTombstone",
    "RecordView",
    "SearchHit",
    "SearchPage",
    "StoredGrant",
    "StreamOrder",
    "StreamSchema",
    "UpsertResult",
    "json_schemas",
]


def test_pdpp_store_exports_exactly_the_public_names() -> None:
    assert pdpp_store.__all__ == PUBLIC
    for name in PUBLIC:
        value = getattr(pdpp_store, name)
        assert isinstance(value, dict) or value.__module__.startswith("pdpp_store"), name


def test_evidence_exports_exactly_its_cards() -> None:
    assert pdpp_store.evidence.__all__ == EVIDENCE
    for name in EVIDENCE:
        assert hasattr(pdpp_store.evidence, name)


def test_cards_are_the_same_objects_from_both_places() -> None:
    for name in set(PUBLIC) & set(EVIDENCE):
        assert getattr(pdpp_store, name) is getattr(pdpp_store.evidence, name)


def test_public_objects_say_they_are_public() -> None:
    """Every exported class and function lives in a module a user may import: the package, the
    evidence package, or a private module re-exported here (never a surface)."""
    for name in set(PUBLIC) - {"CATALOGUE", "SELECTOR_ARGS"}:
        module = getattr(pdpp_store, name).__module__
        surfaces = ("pdpp_store.cli", "pdpp_store.rest", "pdpp_store.mcp", "pdpp_store.serve")
        assert not module.startswith((*surfaces, "pdpp_store.http"))
