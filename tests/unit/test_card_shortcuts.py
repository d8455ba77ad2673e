"""The read path's shortcuts for cards (issue 14, session 5) give exactly what the long way
gives: previews built without their checks equal checked ones, a view's `to_dict()` is the same
JSON text as the card's rules spelled out one property at a time, a field's metadata decoded from
a cache equals a freshly built `FieldInfo`, and a window built through its slots is the
constructor's window, refusing what the constructor refuses."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdpp_store._core.errors import BadRequest
from pdpp_store._core.fields import FieldKind
from pdpp_store._core.identity import RecordRef
from pdpp_store._ops import reads
from pdpp_store._sql import reads as sql
from pdpp_store.evidence import FieldInfo, FieldPreview, RecordView
from pdpp_store.evidence.record import built_view
from pdpp_store.evidence.text import record_argument
from pdpp_store.evidence.window import FieldWindow, built_window
from pdpp_store.mcp._render import _window_record

REFS = [RecordRef("c", "s", "r"), RecordRef("conn_2", "a:b", "é 名")]
PATHS = ["body", "a", 'q"d', "é名", "\U0001f600", "x\ny", "a.b", "z"]
DIGESTS = ["sha256:" + "0" * 64, "sha256:" + "ab" * 32]


@st.composite
def preview_rows(draw: st.DrawFn) -> sql.PreviewRow:
    """A `record_preview` field as `preview_rows` gives it: text-like fields with their head
    (the first `PREVIEW_CHARS` code points), metadata-only fields without."""
    kind = draw(st.sampled_from(list(FieldKind)))
    size = draw(st.sampled_from([0, 1, 5, reads.PREVIEW_CHARS, reads.PREVIEW_CHARS + 1, 10_000]))
    path = draw(st.sampled_from(PATHS))
    blob = None if kind.text_like else draw(st.sampled_from([None, "blob_sha256_" + "1" * 64]))
    info = FieldInfo(
        path,
        kind,
        "string" if kind is not FieldKind.JSON else "array",
        size,
        size + 2,
        draw(st.sampled_from(DIGESTS)),
        None if kind.text_like else "application/octet-stream",
        blob,
    )
    head = None
    if kind is FieldKind.TEXT:
        head = "é" * min(size, reads.PREVIEW_CHARS)
    elif kind is FieldKind.JSON:  # a JSON text of `size` code points: a digit, or a string
        head = "7" if size <= 1 else ('"' + "a" * (size - 2) + '"')[: reads.PREVIEW_CHARS]
    count = draw(st.sampled_from([None, 0, 7]))
    return info, count, head


def _checked(item: FieldPreview) -> FieldPreview:
    return FieldPreview(
        item.record, item.info, item.status, item.value, item.preview, item.item_count
    )


@given(
    st.sampled_from(REFS),
    preview_rows(),
    st.sampled_from([0, 1, 100, reads.PREVIEW_CHARS, reads.RECORD_BUDGET_CHARS]),
)
def test_a_preview_built_unchecked_is_the_checked_one(
    ref: RecordRef, row: sql.PreviewRow, budget: int
) -> None:
    item = reads._preview(ref, row, budget)
    assert type(item) is FieldPreview
    assert _checked(item) == item  # the checks pass, and nothing differs
    assert repr(_checked(item)) == repr(item)


def _long_way(view: RecordView) -> dict[str, Any]:
    """A record card spelled out from the rules, one property at a time (the card before the
    shortcuts: each preview's `shown_in_data`, `read` and `to_dict` of its info)."""
    data: dict[str, Any] = {}
    ladder: dict[str, Any] = {}
    for item in view.fields:
        if item.shown_in_data:
            data[item.info.path] = item.value
        if item.status != "complete":
            entry = {**item.info.to_dict(), "preview_status": item.status}
            if item.preview is not None:
                entry["preview_chars"] = len(item.preview)
                if item.info.kind is FieldKind.JSON:
                    entry["preview"] = item.preview
            if item.status in ("truncated", "unavailable") and item.item_count is not None:
                entry["item_count"] = item.item_count
            if item.read is not None:
                entry["read"] = item.read.to_dict()
            ladder[item.info.path] = entry
    hasher = hashlib.sha256()
    for info in sorted((item.info for item in view.fields), key=lambda info: info.path):
        hasher.update(json.dumps([info.path, info.kind.value, info.digest]).encode())
    return {
        "object": "record",
        "id": view.ref.id,
        "uri": view.ref.uri,
        "connection_id": view.ref.connection_id,
        "stream": view.ref.stream,
        "record_id": view.ref.record_id,
        "revision": "sha256:" + hasher.hexdigest(),
        **({"version": view.version} if view.version is not None else {}),
        "data": data,
        "content_ladder": ladder,
        "after_field": view.after_field,
        **({"fields": list(view.only)} if view.only is not None else {}),
        "has_more_fields": view.next_after_field is not None,
        "next": None if view.next is None else view.next.to_dict(),
    }


@given(
    st.sampled_from(REFS),
    st.lists(preview_rows(), max_size=6),
    st.sampled_from([0, 100, reads.RECORD_BUDGET_CHARS]),
    st.sampled_from([None, 3]),
    st.sampled_from([None, "a"]),
    st.sampled_from([None, "z"]),
    st.sampled_from([None, ("a", "body")]),
)
def test_a_record_card_is_the_json_its_rules_spell(  # noqa: PLR0917 - hypothesis draws
    ref: RecordRef,
    rows: list[sql.PreviewRow],
    budget: int,
    version: int | None,
    after: str | None,
    next_after: str | None,
    only: tuple[str, ...] | None,
) -> None:
    """Fields in any order (a view built by hand need not be in path order), repeated paths,
    every status: the same keys, in the same order, with the same values."""
    fields = tuple(reads._preview(ref, row, budget) for row in rows)
    view = built_view(ref, version, fields, after, next_after, only)
    checked = RecordView(ref, version, fields, after, next_after, only)
    assert view == checked
    assert repr(view) == repr(checked)
    assert json.dumps(view.to_dict()) == json.dumps(_long_way(checked))
    assert view.revision == _long_way(checked)["revision"]


def _row(**changed: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "path": "body",
        "kind": "text",
        "json_type": "string",
        "size_chars": 10,
        "size_bytes": 12,
        "digest": DIGESTS[0],
        "mime_type": None,
        "blob_id": None,
    }
    return {**row, **changed}


def test_field_metadata_decoded_again_is_the_same_card() -> None:
    first = sql.field_info(_row())
    assert first == FieldInfo("body", FieldKind.TEXT, "string", 10, 12, DIGESTS[0])
    assert sql.field_info(_row()) is first  # decoded once
    assert sql.field_info(_row(path=None)) is None


def test_field_metadata_that_differs_in_any_value_is_another_card() -> None:
    base = sql.field_info(_row())
    assert base is not None
    changes: dict[str, Any] = {
        "path": "title",
        "kind": "json",
        "json_type": "array",
        "size_chars": 11,
        "size_bytes": 13,
        "digest": DIGESTS[1],
        "mime_type": "text/plain",
        "blob_id": "blob_sha256_" + "1" * 64,
    }
    for column, value in changes.items():
        other = sql.field_info(_row(**{column: value}))
        assert other is not None, column
        assert other != base, column
        expected: dict[str, Any] = {column: FieldKind(value) if column == "kind" else value}
        assert other == dataclasses.replace(base, **expected), column


def test_decoded_field_metadata_is_kept_within_its_bound() -> None:
    for size in range(sql._INFOS_KEPT + 10):
        assert sql.field_info(_row(size_chars=size)) is not None
        assert len(sql._INFOS) <= sql._INFOS_KEPT


_WINDOW_TEXT = "abcdefghij"


@given(
    st.integers(min_value=-1, max_value=12),  # start_chars
    st.integers(min_value=0, max_value=12),  # limit_chars
    st.integers(min_value=0, max_value=12),  # the text's length
    st.sampled_from([None, (1, 3), (3, 3), (2, 99), (None, 3)]),  # the match
    st.sampled_from([None, "n"]),
    st.sampled_from([None, "p", 7]),
    st.sampled_from([None, "m"]),
    st.booleans(),
)
def test_a_window_built_through_its_slots_is_the_constructor_s(  # noqa: PLR0917 - draws
    start: int,
    limit: int,
    length: int,
    match: tuple[int | None, int] | None,
    next_cursor: str | None,
    previous_cursor: Any,
    next_match: str | None,
    consistent: bool,
) -> None:
    """Any values, and (`consistent`) values that make a window: text and cursors as the rules
    derive them from the start and the limit."""
    info = FieldInfo("body", FieldKind.TEXT, "string", 10, 10, DIGESTS[0])
    if consistent and 0 <= start <= 10 and limit >= 1:
        length = min(limit, 10 - start)
        next_cursor = "n" if start + length < 10 else None
        previous_cursor = "p" if start > 0 else None
    args = (
        "c",
        "s",
        "r",
        info,
        _WINDOW_TEXT[:length],
        start,
        limit,
        None if match is None else match[0],
        None if match is None else match[1],
        next_cursor,
        previous_cursor,
        ({"code": "limit_clamped", "param": "limit_chars"},),
        next_match,
    )
    try:
        expected = FieldWindow(*args)
    except ValueError as refused:
        with pytest.raises(ValueError, match=f"^{re.escape(str(refused))}$"):
            built_window(*args)
        return
    window = built_window(*args)
    assert window == expected
    assert repr(window) == repr(expected)
    assert window.to_dict() == expected.to_dict()


def _window_long_way(window: FieldWindow) -> dict[str, Any]:
    """A window card spelled out from its properties and its `Continuation`s (the card before
    the shortcuts: each derived key a property, each continuation built from its references)."""
    after, before = window.next, window.previous
    return {
        "object": "field_window",
        "stream": window.stream,
        "record_id": window.record_id,
        "connection_id": window.connection_id,
        "field": window.field.to_dict(),
        "window": {
            "text": window.text,
            "total_chars": window.total_chars,
            "start_chars": window.start_chars,
            "end_chars": window.end_chars,
            "limit_chars": window.limit_chars,
            "complete": window.complete,
            "has_more": window.has_more,
            "match_start_chars": window.match_start_chars,
            "match_end_chars": window.match_end_chars,
            "next_offset_chars": window.next_offset_chars,
            "previous_offset_chars": window.previous_offset_chars,
            "next_cursor": window.next_cursor,
            "previous_cursor": window.previous_cursor,
            "next_match_cursor": window.next_match_cursor,
        },
        "next": None if after is None else after.to_dict(),
        "previous": None if before is None else before.to_dict(),
        "meta": {"warnings": [dict(warning) for warning in window.warnings]},
    }


CURSORS = ["n", "AbC-_09", 'q"\\\n', "é名\U0001f600"]
"""Cursors as the store mints them (base64url), and ones the URI's JSON must escape."""


@given(
    st.sampled_from([*REFS, RecordRef("c", "s", "r:x"), RecordRef("c", "s:r", "x")]),
    st.sampled_from(PATHS),
    st.integers(min_value=0, max_value=10),  # start_chars
    st.integers(min_value=1, max_value=12),  # limit_chars
    st.sampled_from(CURSORS),
    st.sampled_from(CURSORS),
    st.booleans(),  # a match window
)
def test_a_window_card_is_the_json_its_continuations_spell(  # noqa: PLR0917 - draws
    ref: RecordRef,
    path: str,
    start: int,
    limit: int,
    next_cursor: str,
    previous_cursor: str,
    matched: bool,
) -> None:
    """Every record (a stream holding ':' is named by its URI), field path and cursor, the
    first, middle and last windows: the same keys in the same order with the same values, as
    JSON text. The names each record field's continuations share are kept
    (`cursor_window_names`): drawn one after another, no record's answer is another's."""
    info = FieldInfo(path, FieldKind.TEXT, "string", 10, 10, DIGESTS[1])
    length = min(limit, 10 - start)
    window = FieldWindow(
        ref.connection_id,
        ref.stream,
        ref.record_id,
        info,
        _WINDOW_TEXT[start : start + length],
        start,
        limit,
        2 if matched else None,
        4 if matched else None,
        next_cursor if start + length < 10 else None,
        previous_cursor if start > 0 else None,
        ({"code": "limit_clamped", "param": "limit_chars"},) if matched else (),
        "m" if matched else None,
    )
    assert json.dumps(window.to_dict()) == json.dumps(_window_long_way(window))


def test_a_window_card_refuses_what_its_continuations_refuse() -> None:
    """A window built by hand with a name or cursor no reference takes: its card is refused
    with the error the continuation's reference raises, shared names kept or not."""
    info = FieldInfo("body", FieldKind.TEXT, "string", 10, 10, DIGESTS[0])
    listed = FieldInfo(["body"], FieldKind.TEXT, "string", 10, 10, DIGESTS[0])  # type: ignore[arg-type]
    cases: list[tuple[tuple[Any, ...], str, FieldInfo]] = [
        (("c", "s", "a/b"), "n", info),
        (("c", "s", "r"), "", info),
        (("c", "..", "r"), "n", info),
        ((["c"], "s", "r"), "n", info),  # names no cache can key: refused, not a TypeError
        (("c", {"s": 1}, "r"), "n", info),
        (("c", "s", "r"), "n", listed),
    ]
    for names, cursor, field in cases:
        connection_id, stream, record_id = names
        window = FieldWindow(
            connection_id, stream, record_id, field, "abc", 0, 3, next_cursor=cursor
        )
        for _ in range(2):
            with pytest.raises(BadRequest) as long_way:
                _window_long_way(window)
            with pytest.raises(BadRequest) as card:
                window.to_dict()
            assert card.value.to_dict() == long_way.value.to_dict()


def test_shared_window_names_answer_only_for_their_own_record_field() -> None:
    """`cursor_window_names` is kept per record field: two records whose names run together
    alike, and two fields of one record, each get their own argument and handle."""
    info = FieldInfo("body", FieldKind.TEXT, "string", 10, 10, DIGESTS[0])
    other = FieldInfo("body2", FieldKind.TEXT, "string", 10, 10, DIGESTS[0])
    windows = [
        FieldWindow("c", "s", "r:x", info, "abc", 0, 3, next_cursor="n"),
        FieldWindow("c", "s:r", "x", info, "abc", 0, 3, next_cursor="n"),
        FieldWindow("c", "s", "r:x", other, "abc", 0, 3, next_cursor="n"),
    ]
    cards = [window.to_dict()["next"] for window in windows * 2]  # the second round: kept
    assert cards == [_window_long_way(window)["next"] for window in windows * 2]
    assert len({json.dumps(card) for card in cards}) == 3
    assert cards[0]["arguments"]["record"] == "c/s:r:x"
    assert cards[1]["arguments"]["record"].startswith("pdpp://record/")


def test_kept_record_names_answer_only_for_their_own_record() -> None:
    """A card's record argument (`evidence.text.record_argument`) and an MCP window's record
    (`_window_record`) are kept per record: records whose names run together alike each get
    their own, kept or not; a name no reference takes is refused every time, as `RecordRef`
    refuses it, and a name that is not a string too (never a `TypeError` from the keeping)."""
    records = [("c", "s", "r:x"), ("c", "s:r", "x"), ("c", "s", "r")]
    for _ in range(2):
        for names in records:
            assert record_argument(*names) == RecordRef(*names).argument
            assert _window_record(*names) == RecordRef(*names)
    assert len({record_argument(*names) for names in records}) == 3
    refused_names: list[tuple[Any, ...]] = [("c", "s", "a/b"), ("c", "..", "r"), (["c"], "s", "r")]
    for bad in refused_names:
        for _ in range(2):
            with pytest.raises(BadRequest) as refused:
                RecordRef(*bad)
            with pytest.raises(BadRequest) as argument:
                record_argument(*bad)
            assert argument.value.to_dict() == refused.value.to_dict()
            with pytest.raises(BadRequest) as window_record:
                _window_record(*bad)
            assert window_record.value.to_dict() == refused.value.to_dict()


def test_remembered_revisions_are_bounded_and_keep_only_small_records() -> None:
    from pdpp_store.evidence import record

    def view(*paths: str) -> RecordView:
        fields = tuple(
            FieldPreview(
                REFS[0],
                FieldInfo(path, FieldKind.TEXT, "string", 1, 1, DIGESTS[0]),
                "complete",
                "x",
            )
            for path in paths
        )
        return RecordView(REFS[0], 1, fields)

    for n in range(record._REVISIONS_KEPT + 10):
        small = view(f"p{n}", "q")
        assert small.revision == view("q", f"p{n}").revision == _long_way(small)["revision"]
        assert len(record._REVISIONS) <= record._REVISIONS_KEPT
    wide = view(*(f"{'w' * 100}{n}" for n in range(60)))
    hashed = "".join(
        json.dumps([f.info.path, f.info.kind.value, f.info.digest]) for f in wide.fields
    )
    assert len(hashed) > record._REVISION_KEPT_CHARS
    before = dict(record._REVISIONS)
    assert wide.revision == _long_way(wide)["revision"]
    assert before == record._REVISIONS  # a wide record's revision is not kept
