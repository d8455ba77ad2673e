"""`read_record` is bounded whatever the record's width (on every front): at most
`RECORD_MAX_FIELDS` fields a page, in path order, continued by `next` (`after_field`); at most
`RECORD_BUDGET_CHARS` code points of values a page, fields past the budget `unavailable` with the
window read of their start. Paging by the continuations shows every granted field exactly once.

Oracles are the records as written, never the store's answers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _data import body, grant, owner, ref_id, setup_mailbox
from _fronts import StoreFront
from audit import BoundaryAudit

from pdpp_store import FieldWindow, Grant, StoreError
from pdpp_store._ops.reads import (
    PREVIEW_CHARS,
    RECORD_BUDGET_CHARS,
    RECORD_MAX_FIELDS,
    RECORD_PAGE_CHARS,
)

BODIES = "message_bodies"


def wide(record_id: str, keys: int, chars: int) -> dict[str, Any]:
    record = body(record_id, "x")
    record.update({f"k{n:05d}": f"{n:05d}" + "v" * (chars - 5) for n in range(keys)})
    return record


def pages(store: StoreFront, g: Grant, record_id: str) -> list[dict[str, Any]]:
    """Every page of the projection, following `next` as a client would (its arguments only)."""
    found = [store.read_record(g, ref_id(record_id)).to_dict()]
    while found[-1]["next"] is not None:
        step = found[-1]["next"]
        assert step["operation"] == "read_record"
        assert set(step["arguments"]) == {"record", "after_field"}
        found.append(store.read_record(g, **step["arguments"]).to_dict())
        assert len(found) < 1000, "paging does not end"
    return found


def shown(page: dict[str, Any]) -> set[str]:
    return set(page["data"]) | set(page["content_ladder"])


def value_chars(page: dict[str, Any]) -> int:
    """Code points of values the page shows: whole values and previews."""
    whole = sum(
        len(value if isinstance(value, str) else json.dumps(value))
        for path, value in page["data"].items()
        if path not in page["content_ladder"]
    )
    previews: int = sum(entry.get("preview_chars", 0) for entry in page["content_ladder"].values())
    return whole + previews


def test_a_wide_record_is_paged_and_every_field_shown_once(store: StoreFront) -> None:
    setup_mailbox(store)
    record = wide("w1", keys=3 * RECORD_MAX_FIELDS + 7, chars=20)
    store.upsert_records("cin_mail", BODIES, [record])
    found = pages(store, owner(), "w1")
    assert len(found) == 4
    seen: list[str] = []
    for page in found:
        assert len(shown(page)) <= RECORD_MAX_FIELDS
        assert page["has_more_fields"] == (page["next"] is not None)
        seen += sorted(shown(page))
    assert seen == sorted(record)  # every field once, in path order across pages
    assert {path: v for page in found for path, v in page["data"].items()} == record


def test_values_past_the_budget_are_unavailable_with_their_read(store: StoreFront) -> None:
    setup_mailbox(store)
    keys = RECORD_BUDGET_CHARS // PREVIEW_CHARS + 10
    record = wide("w2", keys=keys, chars=PREVIEW_CHARS)  # each field exactly a whole preview
    store.upsert_records("cin_mail", BODIES, [record])
    g = grant({"name": BODIES, "fields": sorted(k for k in record if k.startswith("k"))})
    page = store.read_record(g, ref_id("w2")).to_dict()
    assert page["next"] is None
    assert value_chars(page) <= RECORD_BUDGET_CHARS
    unavailable = {
        p: e for p, e in page["content_ladder"].items() if e["preview_status"] == "unavailable"
    }
    assert len(page["data"]) == RECORD_BUDGET_CHARS // PREVIEW_CHARS
    assert len(unavailable) == keys - len(page["data"])
    for path, entry in unavailable.items():
        assert path not in page["data"]
        read = entry["read"]
        assert read["operation"] == "read_field_window"
        window: FieldWindow = store.read_field_window(g, **read["arguments"])
        assert window.text == record[path][: window.limit_chars]
        assert window.start_chars == 0


def test_a_record_of_ten_thousand_keys_answers_one_page(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records("cin_mail", BODIES, [wide("w3", keys=10_000, chars=8)])
    with BoundaryAudit(store.engine) as audit:
        page = store.read_record(owner(), ref_id("w3")).to_dict()
    assert len(shown(page)) == RECORD_MAX_FIELDS
    assert page["has_more_fields"]
    assert len(audit.rows) <= RECORD_MAX_FIELDS + 1 + 2  # the page, one look-ahead, the catalogue
    assert len(json.dumps(page)) < 64 * 1024


def test_after_field_is_a_field_path(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records("cin_mail", BODIES, [body("e1", "hello")])
    for bad in ("", "a\x00b", 7):
        with pytest.raises(StoreError) as caught:
            store.read_record(owner(), ref_id("e1"), after_field=bad)  # type: ignore[arg-type]
        assert (caught.value.code, caught.value.param) == ("invalid_field_path", "after_field")


def test_after_the_last_field_the_page_is_empty_not_missing(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records("cin_mail", BODIES, [body("e1", "hello")])
    page = store.read_record(owner(), ref_id("e1"), after_field="\U0010ffff").to_dict()
    assert (page["data"], page["content_ladder"], page["next"]) == ({}, {}, None)
    with pytest.raises(StoreError) as caught:
        store.read_record(owner(), ref_id("missing"), after_field="a")
    assert caught.value.code == "not_found"


def test_long_paths_end_a_page_early_and_every_field_is_reached(store: StoreFront) -> None:
    setup_mailbox(store)
    record = body("w4", "x")
    record.update({f"{n:03d}" + "p" * 900: "v" for n in range(RECORD_MAX_FIELDS)})
    store.upsert_records("cin_mail", BODIES, [record])
    found = pages(store, owner(), "w4")
    assert len(found) > 1
    for page in found:
        assert len(json.dumps(page, ensure_ascii=False)) < 2 * RECORD_PAGE_CHARS
    assert sorted(path for page in found for path in shown(page)) == sorted(record)


def test_fields_narrow_the_projection_under_the_grant(store: StoreFront) -> None:
    setup_mailbox(store)
    record = wide("w5", keys=3 * RECORD_MAX_FIELDS, chars=10)
    store.upsert_records("cin_mail", BODIES, [record])
    chosen = [f"k{n:05d}" for n in range(0, 3 * RECORD_MAX_FIELDS, 2)]  # more than one page
    found = [store.read_record(owner(), ref_id("w5"), fields=chosen).to_dict()]
    while found[-1]["next"] is not None:
        assert found[-1]["next"]["arguments"]["fields"] == sorted(chosen)
        found.append(store.read_record(owner(), **found[-1]["next"]["arguments"]).to_dict())
    assert sorted(path for page in found for path in shown(page)) == sorted(chosen)
    narrow = grant({"name": BODIES, "fields": ["id", "body_text"]})
    only_id = store.read_record(narrow, ref_id("w5"), fields=["id"]).to_dict()
    assert only_id["data"] == {"id": "w5"}
    for bad, code in (
        (["k00001"], "field_not_granted"),
        ("id", "invalid_request"),
        ([], "invalid_request"),
        ([""], "invalid_field_path"),
    ):
        with pytest.raises(StoreError) as caught:
            store.read_record(narrow, ref_id("w5"), fields=bad)
        assert (caught.value.code, caught.value.param) == (code, "fields")
