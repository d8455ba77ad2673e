"""Every read path's cards match their published JSON Schemas, on every database and front.

The `store` fixture validates every card it returns and every error it raises (`_cards`); this
suite walks each read path on purpose and proves, by the counts of `_cards.CHECKED`, that each
kind of card was produced and validated: the field window of every selector, the record
projection with complete, truncated (text and JSON) and binary-only previews, the field info,
the blob info and range, the upsert summary, a search page, a grant's schema, and the errors
whose details hold cards.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from _cards import CHECKED
from _data import MAILBOX, attachment, body, mixed_text, owner, ref_id, setup_mailbox
from _fronts import StoreFront

from pdpp_store import FieldWindow, RecordView, StoreError
from pdpp_store.evidence import CARDS

BODIES = "message_bodies"


def _checked_during(call: Any) -> Counter[str]:
    before = Counter(CHECKED)
    call()
    after = Counter(CHECKED)
    after.subtract(before)
    return +after


def test_every_read_path_yields_cards_valid_against_their_schemas(store: StoreFront) -> None:
    g = owner()
    seen: Counter[str] = Counter()
    seen += _checked_during(lambda: setup_mailbox(store))
    blob = store.put_blob(b"%PDF-1.7 evidence", "application/pdf")
    text = mixed_text(6000)
    record = {
        **body("e1", text),
        "body_html": "a\x00b",  # NUL: binary-only
        "content_languages": [f"lang-{i}" for i in range(400)],  # JSON above the preview bound
        "subject": "short",
    }
    seen += _checked_during(lambda: store.upsert_records(MAILBOX, BODIES, [record]))
    store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])

    windows: list[FieldWindow] = []
    for selector in (
        {},
        {"offset_chars": 5000, "limit_chars": 700},
        {"offset_chars": 10**9},
        {"q": text[3000:3010], "before_chars": 5, "after_chars": 5},
        {"q": text[100:110], "limit_chars": 20_000},  # clamped, with a warning
    ):
        windows.append(store.read_field_window(g, ref_id("e1"), "body_text", **selector))
    cursor = windows[0].next_cursor
    assert cursor is not None
    windows.append(store.read_field_window(g, ref_id("e1"), "body_text", cursor=cursor))
    assert windows[-1].previous is not None
    windows.append(store.read_field_window(g, ref_id("e1"), "content_languages"))
    assert windows[4].warnings

    view = store.read_record(g, ref_id("e1"))
    statuses = {item.info.path: item.status for item in view.fields}
    assert statuses["subject"] == "complete"
    assert statuses["body_text"] == statuses["content_languages"] == "truncated"
    assert statuses["body_html"] == "binary-only"
    resource = store.read_resource(g, view.ref.uri)
    assert isinstance(resource, RecordView)
    following = view.to_dict()["content_ladder"]["body_text"]["read"]
    assert isinstance(store.read_resource(g, following["resource_uri"]), FieldWindow)

    store.describe_field(g, ref_id("e1"), "body_html")
    page = store.search(g, text[3000:3010])
    assert [hit.id for hit in page.hits] == [ref_id("e1")]
    store.describe_grant(g)
    attachments = owner("attachments")
    store.blob_info(attachments, blob.blob_id)
    store.read_blob_range(attachments, blob.blob_id, 3, 5)

    with pytest.raises(StoreError) as binary:
        store.read_field_window(g, ref_id("e1"), "body_html")
    assert binary.value.code == "field_not_text"
    assert binary.value.details["field"]["binary_kind"] == "binary"
    store.upsert_records(MAILBOX, BODIES, [{**record, "body_text": "changed"}])
    with pytest.raises(StoreError) as stale:
        store.read_field_window(g, ref_id("e1"), "body_text", cursor=cursor)
    assert stale.value.code == "stale_cursor"
    with pytest.raises(StoreError) as failed:
        store.upsert_records(MAILBOX, BODIES, [body("e9", "fine"), {"no": "key"}])
    assert failed.value.details["committed"] == {"inserted": 0, "updated": 0, "unchanged": 0}

    for name in (
        "FieldWindow",
        "RecordView",
        "FieldInfo",
        "BlobInfo",
        "BlobRange",
        "SearchPage",
        "GrantSchema",
        "Error",
    ):
        assert CHECKED[name] > 0, name
    assert seen["UpsertResult"] == 1
    # Every card class is reachable from an operation's result (FieldPreview and Continuation
    # inside RecordView and FieldWindow, validated as parts of their schemas).
    rendered = json.dumps([w.to_dict() for w in windows] + [view.to_dict()])
    assert '"operation": "read_field_window"' in rendered
    assert {card.__name__ for card in CARDS} >= {"FieldPreview", "Continuation"}
