"""Tests of `pdpp_store._core.window` (selector rules, match arithmetic) and of the
`pdpp_store.evidence.FieldWindow` card (the envelope arithmetic of docs/contract.md §3, "Field
windows")."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from _data import ENVELOPE_KEYS, WINDOW_KEYS
from hypothesis import example, given
from hypothesis import strategies as st

from pdpp_store._core.errors import BadRequest
from pdpp_store._core.fields import FieldKind
from pdpp_store._core.window import (
    DEFAULT_CONTEXT_CHARS,
    DEFAULT_LIMIT_CHARS,
    MAX_CONTEXT_CHARS,
    MAX_LIMIT_CHARS,
    MAX_QUERY_CHARS,
    CursorSelector,
    MatchSelector,
    OffsetSelector,
    limit_clamped_warning,
    match_window_limit,
    match_window_start,
    parse_selector,
    window_bounds,
)
from pdpp_store.evidence import FieldInfo, FieldWindow

CLAMPED = {"code": "limit_clamped", "param": "limit_chars"}


def test_constants() -> None:
    assert (DEFAULT_LIMIT_CHARS, MAX_LIMIT_CHARS) == (4096, 16384)
    assert (DEFAULT_CONTEXT_CHARS, MAX_CONTEXT_CHARS, MAX_QUERY_CHARS) == (2048, 8192, 1024)


# -- parse_selector ---------------------------------------------------------------------------


def test_no_selector_is_offset_zero() -> None:
    assert parse_selector() == (OffsetSelector(0, 4096), ())


def test_offset_selector() -> None:
    assert parse_selector(offset_chars=10, limit_chars=5) == (OffsetSelector(10, 5), ())
    assert parse_selector(limit_chars=5) == (OffsetSelector(0, 5), ())


def test_match_selector_defaults() -> None:
    assert parse_selector(q="x") == (MatchSelector("x", 2048, 2048, None), ())
    selector, _ = parse_selector(q="x", before_chars=0, after_chars=8192, limit_chars=9)
    assert selector == MatchSelector("x", 0, 8192, 9)


def test_cursor_selector() -> None:
    assert parse_selector(cursor="abc") == (CursorSelector("abc", None), ())
    assert parse_selector(cursor="abc", limit_chars=7) == (CursorSelector("abc", 7), ())


@pytest.mark.parametrize("kwargs", [{}, {"q": "x"}, {"cursor": "c"}])
def test_limit_is_clamped_with_a_warning(kwargs: dict[str, Any]) -> None:
    selector, warnings = parse_selector(limit_chars=16385, **kwargs)
    assert selector.limit_chars == MAX_LIMIT_CHARS
    assert warnings == (CLAMPED,)
    assert parse_selector(limit_chars=16384, **kwargs)[1] == ()


def test_clamp_warning_is_fresh() -> None:
    first = limit_clamped_warning()
    first["code"] = "changed"
    assert limit_clamped_warning() == CLAMPED


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"cursor": "c", "offset_chars": 0}, "offset_chars"),
        ({"cursor": "c", "q": "x"}, "q"),
        ({"cursor": "c", "before_chars": 1}, "before_chars"),
        ({"cursor": "c", "after_chars": 1}, "after_chars"),
        ({"q": "x", "offset_chars": 0}, "offset_chars"),
        ({"before_chars": 1}, "before_chars"),
        ({"after_chars": 1}, "after_chars"),
        ({"offset_chars": 1, "after_chars": 1}, "after_chars"),
        ({"offset_chars": -1}, "offset_chars"),
        ({"offset_chars": True}, "offset_chars"),
        ({"offset_chars": 1.0}, "offset_chars"),
        ({"offset_chars": "1"}, "offset_chars"),
        ({"limit_chars": 0}, "limit_chars"),
        ({"limit_chars": -5}, "limit_chars"),
        ({"limit_chars": False}, "limit_chars"),
        ({"limit_chars": 2.5}, "limit_chars"),
        ({"q": "x", "limit_chars": 0}, "limit_chars"),
        ({"cursor": "c", "limit_chars": "9"}, "limit_chars"),
        ({"q": ""}, "q"),
        ({"q": 5}, "q"),
        ({"q": "a\x00b"}, "q"),
        ({"q": "x" * 1025}, "q"),
        ({"q": "x", "before_chars": -1}, "before_chars"),
        ({"q": "x", "before_chars": 8193}, "before_chars"),
        ({"q": "x", "after_chars": 8193}, "after_chars"),
        ({"q": "x", "after_chars": True}, "after_chars"),
        ({"q": "x", "before_chars": "10"}, "before_chars"),
        ({"cursor": ""}, "cursor"),
        ({"cursor": 12}, "cursor"),
    ],
)
def test_selector_errors(kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_selector(**kwargs)
    assert (info.value.code, info.value.param) == ("invalid_window", param)
    assert param in info.value.message
    assert info.value.http_status == 400


def test_query_length_is_counted_in_code_points() -> None:
    selector, _ = parse_selector(q="🙂" * 1024)
    assert isinstance(selector, MatchSelector)


@pytest.mark.parametrize(
    ("build", "param"),
    [
        (lambda: OffsetSelector(0, 16385), "limit_chars"),
        (lambda: OffsetSelector(-1, 1), "offset_chars"),
        (lambda: MatchSelector("x", 0, 0, 16385), "limit_chars"),
        (lambda: CursorSelector("c", 0), "limit_chars"),
    ],
)
def test_selectors_validate_themselves(build: Any, param: str) -> None:
    with pytest.raises(BadRequest) as info:
        build()
    assert info.value.param == param


# -- arithmetic -------------------------------------------------------------------------------


def test_match_window_arithmetic() -> None:
    assert match_window_start(100, 30) == 70
    assert match_window_start(10, 30) == 0
    assert match_window_limit(100, 70, 5, 20, None) == (30 + 5 + 20, False)
    assert match_window_limit(10, 0, 5, 20, None) == (10 + 5 + 20, False)
    assert match_window_limit(100, 70, 5, 20, 3) == (3, False)
    assert match_window_limit(9000, 1000, 1024, 8192, None) == (MAX_LIMIT_CHARS, True)


def test_window_bounds() -> None:
    assert window_bounds(0, 0) == 0
    assert window_bounds(5, 10) == 5
    assert window_bounds(50, 10) == 10


# -- the envelope -----------------------------------------------------------------------------


def _window(text: str, offset: int, limit: int, **extra: Any) -> FieldWindow:
    """Build a window the way the store does, with the Python slice as the oracle."""
    info = FieldInfo("body", FieldKind.TEXT, "string", len(text), len(text.encode()), "sha256:x")
    start = window_bounds(offset, len(text))
    piece = text[start : start + limit]
    end = start + len(piece)
    cursors = {
        "next_cursor": "n" if end < len(text) else None,
        "previous_cursor": "p" if start > 0 else None,
    }
    return FieldWindow("cin_a", "emails", "e1", info, piece, start, limit, **(cursors | extra))


def _math(window: FieldWindow) -> tuple[Any, ...]:
    return (
        window.start_chars,
        window.end_chars,
        window.complete,
        window.has_more,
        window.next_offset_chars,
        window.previous_offset_chars,
    )


def test_empty_field() -> None:
    assert _math(_window("", 0, 10)) == (0, 0, True, False, None, None)


def test_offset_past_end_is_empty_at_end() -> None:
    window = _window("hello", 99, 3)
    assert window.text == ""
    assert _math(window) == (5, 5, False, False, None, 2)


def test_exact_end() -> None:
    assert _math(_window("hello", 0, 5)) == (0, 5, True, False, None, None)
    assert _math(_window("hello", 2, 3)) == (2, 5, False, False, None, 0)


def test_middle_window() -> None:
    assert _math(_window("abcdefghij", 4, 3)) == (4, 7, False, True, 7, 1)


def test_astral_characters_count_as_one() -> None:
    text = "a🙂b🙂c"
    window = _window(text, 1, 2)
    assert window.text == "🙂b"
    assert _math(window) == (1, 3, False, True, 3, 0)
    assert window.to_dict()["window"]["total_chars"] == 5


def test_envelope_shape() -> None:
    window = _window(
        "x" * 20, 0, 8, match_start_chars=2, match_end_chars=4, warnings=(limit_clamped_warning(),)
    )
    envelope = window.to_dict()
    assert list(envelope) == list(ENVELOPE_KEYS)
    assert envelope["object"] == "field_window"
    assert envelope["field"] == window.field.to_dict()
    assert list(envelope["window"]) == list(WINDOW_KEYS)
    assert envelope["window"] | {"text": None} == {
        "text": None,
        "total_chars": 20,
        "start_chars": 0,
        "end_chars": 8,
        "limit_chars": 8,
        "complete": False,
        "has_more": True,
        "match_start_chars": 2,
        "match_end_chars": 4,
        "next_offset_chars": 8,
        "previous_offset_chars": None,
        "next_cursor": "n",
        "previous_cursor": None,
        "next_match_cursor": None,
    }
    assert envelope["meta"] == {"warnings": [CLAMPED]}


@pytest.mark.parametrize(
    "changes",
    [
        {"text": "xx"},
        {"start_chars": 6},
        {"limit_chars": 0},
        {"limit_chars": 16385},
        {"match_start_chars": 1},
        {"match_start_chars": 3, "match_end_chars": 3},
        {"match_start_chars": 3, "match_end_chars": 99},
        {"next_cursor": None},
        {"previous_cursor": "p"},
    ],
)
def test_window_refuses_inconsistent_values(changes: dict[str, Any]) -> None:
    good = _window("abcde", 0, 3)
    fields = {item.name: getattr(good, item.name) for item in dataclasses.fields(FieldWindow)}
    with pytest.raises(ValueError, match=r"must|go together"):
        FieldWindow(**(fields | changes))


@given(
    st.text(st.characters(codec="utf-8") | st.characters(min_codepoint=0x10000), max_size=60),
    st.integers(min_value=0, max_value=80),
    st.integers(min_value=1, max_value=MAX_LIMIT_CHARS),
)
def test_envelope_invariants(text: str, offset: int, limit: int) -> None:
    window = _window(text, offset, limit)
    body = window.to_dict()["window"]
    total, start, end = len(text), body["start_chars"], body["end_chars"]
    assert body["text"] == text[start:end]
    assert 0 <= start <= end <= total
    assert start == min(offset, total)
    assert end - start == min(limit, total - start)
    assert body["complete"] == (start == 0 and end == total)
    assert body["has_more"] == (end < total)
    assert body["next_offset_chars"] == (end if end < total else None)
    assert body["previous_offset_chars"] == (max(0, start - limit) if start > 0 else None)
    assert (body["next_cursor"] is None) == (body["next_offset_chars"] is None)
    assert (body["previous_cursor"] is None) == (body["previous_offset_chars"] is None)
    if body["has_more"]:  # paging on from next_offset_chars continues exactly where this ended
        assert _window(text, end, limit).text == text[end : end + limit]


# -- the selector's fast path -----------------------------------------------------------------

_SELECTOR_VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-3, max_value=MAX_LIMIT_CHARS + 3),
    st.booleans(),
    st.sampled_from(["", "c", "12", 1.0]),
)


@given(
    st.dictionaries(
        st.sampled_from(["offset_chars", "limit_chars", "cursor", "q", "occurrence", "other"]),
        _SELECTOR_VALUES,
        max_size=3,
    )
)
@example({})
@example({"limit_chars": 10})
@example({"offset_chars": 7})
@example({"offset_chars": 7, "limit_chars": 10})
@example({"offset_chars": 7, "limit_chars": MAX_LIMIT_CHARS + 1})
@example({"cursor": "c"})
@example({"cursor": "c", "limit_chars": 10})
@example({"cursor": "c", "offset_chars": 7})
def test_the_fast_path_agrees_with_the_rules(args: dict[str, Any]) -> None:
    """Whatever the arguments, `parse_selector` answers what the general parser answers (the
    fast path takes only plain offset and cursor windows, and builds the same selector)."""
    from pdpp_store._core.window import _parse, _plain_window

    try:
        general: Any = _parse(dict(args))
    except BadRequest as exc:
        general = (exc.code, exc.param)
    fast = _plain_window(dict(args))
    if fast is not None:
        assert (fast, ()) == general
    try:
        answer: Any = parse_selector(**args)
    except BadRequest as exc:
        answer = (exc.code, exc.param)
    assert answer == general


# -- cursors minted when first read -----------------------------------------------------------


def _minted_window(mint: Any) -> FieldWindow:
    info = FieldInfo("body", FieldKind.TEXT, "string", 20, 20, "sha256:x")
    return FieldWindow(
        "cin_a",
        "emails",
        "e1",
        info,
        "x" * 5,
        5,
        5,
        next_cursor=mint("n"),
        previous_cursor=mint("p"),
    )


def test_a_deferred_cursor_is_the_eager_one() -> None:
    from pdpp_store.evidence.window import deferred_cursor

    calls: list[str] = []

    def mint(name: str) -> str:
        calls.append(name)
        return f"token-{name}"

    eager = _minted_window(lambda name: f"token-{name}")
    lazy = _minted_window(lambda name: deferred_cursor(mint, name))
    assert calls == []  # building (and checking) a window mints nothing
    assert lazy.previous_cursor == "token-p"
    assert calls == ["p"]
    assert lazy == eager
    assert hash(lazy) == hash(eager)
    assert repr(lazy) == repr(eager)
    assert lazy.to_dict() == eager.to_dict()
    assert calls == ["p", "n"]  # each minted once, then kept
    assert lazy.next_cursor == "token-n"
    assert calls == ["p", "n"]
    again = _minted_window(lambda name: deferred_cursor(mint, name))
    assert dataclasses.replace(again, warnings=()) == eager  # copies read the tokens
    assert again != _minted_window(lambda name: f"other-{name}")


def test_a_window_refuses_a_cursor_that_is_not_text() -> None:
    info = FieldInfo("body", FieldKind.TEXT, "string", 20, 20, "sha256:x")
    with pytest.raises(ValueError, match="cursor"):
        FieldWindow("cin_a", "emails", "e1", info, "x" * 5, 0, 5, next_cursor=7)  # type: ignore[arg-type]
