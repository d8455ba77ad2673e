"""Match windows (`q`, docs/contract.md §3, "Field windows"), on every backend and front: the first
occurrence under the project's case folding (`pdpp_store.fold`), the window arithmetic around it,
needles across the stored chunks' boundaries, and `query_not_found`.

The oracle of a match is `fold(text).find(fold(q))` (the fold preserves length, so an offset in
folded text is the offset in the text), and the oracle of its window is the Python slice.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from _data import (
    MAILBOX,
    assert_store_error,
    assert_window,
    body,
    canonical,
    example_body,
    mixed_text,
    on_one_store,
    owner,
    ref_id,
    setup_mailbox,
    unicode_texts,
)
from _fronts import StoreFront
from hypothesis import assume, example, given
from hypothesis import strategies as st

from pdpp_store import Store, StoreError, fold
from pdpp_store._core.values import CHUNK_CHARS, looks_like_base64

BODY = "body_text"
OWNER = owner()
CLAMPED = {"code": "limit_clamped", "param": "limit_chars"}
FILLER = "0123456789 ,.;-" * 1000
"""Background text that holds no letter, so a needle of letters occurs only where placed."""


def _match(store: StoreFront, record_id: str, q: str, **args: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = store.read_field_window(
        OWNER, ref_id(record_id), BODY, q=q, **args
    ).to_dict()
    return envelope


def assert_match(
    envelope: dict[str, Any],
    text: str,
    match_start: int,
    q_len: int,
    *,
    before: int = 2048,
    after: int = 2048,
    limit: int | None = None,
) -> dict[str, Any]:
    """Contract §3's match window: it starts `before` code points before the match (or at 0), and is
    `limit` long if given, else the context before + the match + `after`; both clamped to 16384."""
    start = max(0, match_start - before)
    length = limit if limit is not None else (match_start - start) + q_len + after
    window = assert_window(envelope, text, start, min(length, 16384))
    assert (window["match_start_chars"], window["match_end_chars"]) == (
        match_start,
        match_start + q_len,
    )
    return window


# -- the first occurrence and its window --------------------------------------------------------


def test_first_occurrence_and_the_length_rules(store: StoreFront) -> None:
    setup_mailbox(store)
    text = FILLER[:5000] + "NEEDLE" + FILLER[:3000] + "needle" + FILLER[:1000] + "NeEdLe"
    near_start = "abc needle" + FILLER[:5000]
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", text), body("e2", near_start)])

    # Defaults: 2048 before, the match, 2048 after; the text keeps its case.
    window = assert_match(_match(store, "e1", "needle"), text, 5000, 6)
    assert (window["start_chars"], window["limit_chars"]) == (2952, 2048 + 6 + 2048)
    assert window["text"][2048 : 2048 + 6] == "NEEDLE"
    assert (window["complete"], window["has_more"]) == (False, True)
    assert window["previous_offset_chars"] == max(0, 2952 - window["limit_chars"])

    for before, after in ((10, 20), (0, 0), (1, 0), (0, 1), (4999, 3), (5000, 0), (5001, 9)):
        envelope = _match(store, "e1", "nEEDLE", before_chars=before, after_chars=after)
        window = assert_match(envelope, text, 5000, 6, before=before, after=after)
        assert envelope["meta"] == {"warnings": []}
    assert _match(store, "e1", "needle", before_chars=0, after_chars=0)["window"]["text"] == (
        "NEEDLE"
    )
    # Context before the start of the field is cut: the window starts at 0.
    window = assert_match(
        _match(store, "e1", "needle", before_chars=8000), text, 5000, 6, before=8000
    )
    assert (window["start_chars"], window["limit_chars"]) == (0, 5000 + 6 + 2048)
    assert window["previous_offset_chars"] is None

    # With limit_chars the length is the limit, whatever the context.
    for before, limit in ((10, 7), (10, 1), (0, 100), (2048, 16384), (8192, 3)):
        envelope = _match(store, "e1", "needle", before_chars=before, limit_chars=limit)
        assert_match(envelope, text, 5000, 6, before=before, limit=limit)
        assert envelope["meta"] == {"warnings": []}

    # A needle near the start: the window starts at 0 and is complete when short enough.
    window = assert_match(
        _match(store, "e2", "NEEDLE", after_chars=5000), near_start, 4, 6, after=5000
    )
    assert window["start_chars"] == 0
    assert (window["complete"], window["has_more"]) == (True, False)


def test_match_windows_at_the_field_edges_and_at_the_clamp(store: StoreFront) -> None:
    setup_mailbox(store)
    edges = "Start" + FILLER[:3000] + "TheEnd"
    long = FILLER[:15000] + "needle" + FILLER[:15000]
    store.upsert_records(MAILBOX, "message_bodies", [body("edges", edges), body("long", long)])

    # At the very end: the window ends with the field, nothing follows.
    window = assert_match(_match(store, "edges", "theend"), edges, 3005, 6)
    assert (window["end_chars"], window["has_more"]) == (3011, False)
    assert (window["next_offset_chars"], window["next_cursor"]) == (None, None)
    assert window["text"].endswith("TheEnd")
    window = assert_match(
        _match(store, "edges", "thEEnd", before_chars=0, after_chars=0),
        edges,
        3005,
        6,
        before=0,
        after=0,
    )
    assert window["text"] == "TheEnd"
    # At the very start: nothing precedes.
    window = assert_match(_match(store, "edges", "START", after_chars=0), edges, 0, 5, after=0)
    assert (window["text"], window["previous_offset_chars"]) == ("Start", None)

    # 8192 + 6 + 8192 > 16384: the window is cut to 16384 from its start, with a warning.
    envelope = _match(store, "long", "needle", before_chars=8192, after_chars=8192)
    window = assert_match(envelope, long, 15000, 6, before=8192, after=8192)
    assert (window["start_chars"], window["limit_chars"]) == (15000 - 8192, 16384)
    assert envelope["meta"] == {"warnings": [CLAMPED]}
    for limit in (16385, 10**9):
        envelope = _match(store, "long", "needle", before_chars=100, limit_chars=limit)
        assert_match(envelope, long, 15000, 6, before=100, limit=16384)
        assert envelope["meta"] == {"warnings": [CLAMPED]}


# -- case-insensitive, the same on every backend ------------------------------------------------

# (text, q, first match offset or -1): the fold is per code point, simple and length-preserving.
FOLD_CASES: list[tuple[str, str, int]] = [
    ("Das Éxposé", "éx", 4),
    ("das éxposé", "ÉX", 4),
    ("Éx", "éx", 0),
    ("ΟΔΥΣΣΕΥΣ", "οδυσσευς", 0),  # capital sigma ~ small sigma ~ final sigma
    ("Ὀδυσσεύς σοφός", "ΣΟΦΌΣ", 9),
    ("abc ς", "Σ", 4),
    ("abc \u03c3", "ς", 4),
    ("abc Σ", "\u03c3", 4),
    ("273 \u212a", "k", 4),  # the Kelvin sign folds to k
    ("273 k", "\u212a", 4),
    ("273 K", "\u212a", 4),
    ("\u212bngström", "ÅNGSTRÖM", 0),  # the Angstrom sign folds to å
    ("STRAẞE", "straße", 0),  # capital sharp s folds to ß
    ("Straße", "STRAẞE", 0),
    ("GROẞ und groß", "GROß", 0),
    ("xAx ax", "a", 1),  # the first occurrence
    ("aaaa", "aa", 0),
    ("Strasse", "straße", -1),  # simple folding: ß is not ss
    ("straße", "STRASSE", -1),
    ("İstanbul", "istanbul", 0),  # fold v2: İ folds to i (its full folding is i + U+0307)
    ("ISTANBUL", "İstanbul", 0),
    ("\u1fd3", "\u0390", 0),  # the two iotas with dialytika and oxia fold alike
    ("résumé", "resume", -1),  # folding is not accent stripping
]


def test_matching_folds_case_the_same_on_every_backend(store: StoreFront) -> None:
    setup_mailbox(store)
    # Each case alone, and again straddling the first chunk boundary.
    pad = "." * (CHUNK_CHARS - 3)
    records = []
    for number, (text, _, _) in enumerate(FOLD_CASES):
        records += [body(f"f{number}", text), body(f"p{number}", pad + text)]
    store.upsert_records(MAILBOX, "message_bodies", records)

    for number, (text, q, expected) in enumerate(FOLD_CASES):
        assert fold(text).find(fold(q)) == expected, (text, q)  # the table agrees with the fold
        for record_id, content, offset in (
            (f"f{number}", text, 0),
            (f"p{number}", pad + text, len(pad)),
        ):
            if expected < 0:
                with pytest.raises(StoreError) as caught:
                    _match(store, record_id, q)
                assert_store_error(caught.value, "query_not_found", 404, "q")
                continue
            window = assert_match(
                _match(store, record_id, q, before_chars=0, after_chars=0),
                content,
                offset + expected,
                len(q),
                before=0,
                after=0,
            )
            assert window["text"] == content[offset + expected :][: len(q)]  # original case


def test_json_fields_match_in_their_canonical_text(store: StoreFront) -> None:
    setup_mailbox(store)
    value = {"Name": "ZOË", "a": [1, 2, 3]}
    record = body("j1", "")
    record["body_text"] = value
    store.upsert_records(MAILBOX, "message_bodies", [record])
    text = canonical(value)

    assert_match(_match(store, "j1", "zoë"), text, text.index("ZOË"), 3)
    assert_match(_match(store, "j1", '"A":[1,'), text, text.index('"a":[1,'), 7)


# -- needles across chunk boundaries ------------------------------------------------------------


def test_needles_straddling_chunk_boundaries(store: StoreFront) -> None:
    setup_mailbox(store)
    needle = "Straddle😀Ωé"
    q = "sTRADDLE😀ωÉ"
    placements = [
        boundary - k for boundary in (CHUNK_CHARS, 2 * CHUNK_CHARS) for k in range(len(needle) + 2)
    ]
    texts = {position: FILLER[:position] + needle + FILLER[:1500] for position in placements}
    store.upsert_records(
        MAILBOX, "message_bodies", [body(f"s{pos}", text) for pos, text in texts.items()]
    )

    for position, text in texts.items():
        window = assert_match(
            _match(store, f"s{position}", q, before_chars=5, after_chars=5),
            text,
            position,
            len(needle),
            before=5,
            after=5,
        )
        assert window["text"][5:-5] == needle


def test_needles_of_1024_code_points(store: StoreFront) -> None:
    setup_mailbox(store)
    rng = random.Random(1024)
    needle = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzéΣΩ😀") for _ in range(1024))
    q = needle.swapcase()
    assert len(q) == 1024
    assert q != needle
    placements = (0, 1, 500, 1023, 1024, 1025, 2047, 2048)
    texts = {position: FILLER[:position] + needle + FILLER[:1100] for position in placements}
    texts[-1] = FILLER[:2100] + needle  # at the very end
    store.upsert_records(
        MAILBOX, "message_bodies", [body(f"n{pos}", text) for pos, text in texts.items()]
    )

    for position, text in texts.items():
        expected = position if position >= 0 else 2100
        window = assert_match(
            _match(store, f"n{position}", q, before_chars=0, after_chars=0),
            text,
            expected,
            1024,
            before=0,
            after=0,
        )
        assert window["text"] == needle


def test_mixed_text_matches_agree_with_the_oracle(store: StoreFront) -> None:
    """Every needle cut from a multi-chunk mixed text, at and around each boundary, recased."""
    setup_mailbox(store)
    text = mixed_text(4 * CHUNK_CHARS, seed=5)
    store.upsert_records(MAILBOX, "message_bodies", [body("m", text)])
    rng = random.Random(3)

    for start in (0, 1000, 1020, 1023, 1024, 2040, 2047, 3070, 4 * CHUNK_CHARS - 8):
        for length in (1, 3, 8):
            q = _recase(text[start : start + length], rng)
            expected = fold(text).find(fold(q))
            window = assert_match(
                _match(store, "m", q, before_chars=2, after_chars=2),
                text,
                expected,
                len(q),
                before=2,
                after=2,
            )
            assert expected <= start
            assert fold(window["text"]).find(fold(q)) == expected - window["start_chars"]


# -- no match -----------------------------------------------------------------------------------


def test_absent_needles_are_query_not_found(store: StoreFront) -> None:
    setup_mailbox(store)
    text = FILLER[: CHUNK_CHARS - 3] + "Needle" + FILLER[:500] + "TheEnd"
    short = "Zoë 😀"
    store.upsert_records(
        MAILBOX,
        "message_bodies",
        [body("e1", text), body("short", short), body("empty", "")],
    )

    for record_id, q in (
        ("e1", "absent"),
        ("e1", "Needles"),  # a prefix occurs, the whole does not
        ("e1", "TheEnd!"),  # runs past the end of the field
        ("e1", "ThéEnd"),
        ("e1", "needle" + FILLER[:1018]),  # 1024 code points, the first six occur
        ("short", short + "!"),  # longer than the field
        ("short", "ZOË 😀😀"),
        ("short", "x" * 1024),
        ("empty", "a"),
    ):
        with pytest.raises(StoreError) as caught:
            _match(store, record_id, q)
        assert_store_error(caught.value, "query_not_found", 404, "q")
        wire = caught.value.to_dict()["error"]
        assert set(wire) == {"type", "code", "message", "param"}
        assert (wire["code"], wire["param"]) == ("query_not_found", "q")


# -- property: the match is the fold oracle's -------------------------------------------------

_NEEDLE_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")


def _recase(text: str, rng: random.Random) -> str:
    """Random case changes, one code point for one (length-preserving)."""
    out = []
    for char in text:
        options = [c for c in (char, char.upper(), char.lower(), char.swapcase()) if len(c) == 1]
        out.append(rng.choice(options))
    return "".join(out)


_LAYOUT_RUN = "[" + re.escape(" \t\n\x0b\x0c\r") + "]+"


def _layout_needle(needle: str) -> re.Pattern[str]:
    """The oracle's match of a folded needle: its pieces between runs of layout, each run
    matching a whole run of the text's layout (greedy, leftmost)."""
    return re.compile(_LAYOUT_RUN.join(re.escape(piece) for piece in re.split(_LAYOUT_RUN, needle)))


@st.composite
def haystacks(draw: st.DrawFn) -> tuple[str, str]:
    """A text and a needle: a piece of the text with random case changes, or arbitrary."""
    text = draw(unicode_texts())
    if text and draw(st.booleans()):
        start = draw(st.integers(0, len(text) - 1))
        length = draw(st.integers(1, min(len(text) - start, 1024)))
        return text, _recase(text[start : start + length], draw(st.randoms()))
    return text, draw(st.text(_NEEDLE_CHARS, min_size=1, max_size=12))


@on_one_store()
@given(
    case=haystacks(),
    before=st.integers(0, 8192),
    after=st.integers(0, 8192),
)
@example(case=("aaaa\n\naaaa", "\na"), before=0, after=0)  # the run takes "\n\n" whole
def test_property_match_offset_is_the_fold_oracle(
    each_database: Store, case: tuple[str, str], before: int, after: int
) -> None:
    """The first occurrence of the folded `q` in the folded text, each run of layout in `q`
    taking a whole run of the text's layout (docs/decisions.md, "Phrases that forgive
    layout"; a regular expression written here)."""
    text, q = case
    assume(not looks_like_base64(text))  # stored as binary-only by design: not this property
    record_id = example_body(each_database, text)
    found = _layout_needle(fold(q)).search(fold(text))
    expected, length = (found.start(), found.end() - found.start()) if found else (-1, 0)

    if expected < 0:
        with pytest.raises(StoreError) as caught:
            each_database.read_field_window(OWNER, ref_id(record_id), BODY, q=q)
        assert_store_error(caught.value, "query_not_found", 404, "q")
        return
    envelope = each_database.read_field_window(
        OWNER, ref_id(record_id), BODY, q=q, before_chars=before, after_chars=after
    ).to_dict()
    assert_match(envelope, text, expected, length, before=before, after=after)


# -- late matches: found through the search index after the first chunks' scan -------------------


def test_late_matches_through_the_index_and_after_rewrites(store: StoreFront) -> None:
    """Past the scanned head (`SCAN_CHUNKS`), matches come from the index, re-checked on the
    text: late, straddling a boundary, long, short, and after the field was rewritten."""
    from pdpp_store._sql.index import SCAN_CHUNKS

    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("first", "an earlier field")])
    size = (SCAN_CHUNKS + 8) * CHUNK_CHARS
    late = (SCAN_CHUNKS + 3) * CHUNK_CHARS
    long_needle = "Zebra-" + "q" * 80 + "-END"
    text = list(FILLER * (size // len(FILLER) + 1))[:size]
    placed = {
        "XyLoPhOnE": late + 100,
        "boundary": late + CHUNK_CHARS - 4,  # straddles a chunk boundary
        long_needle: late + 3 * CHUNK_CHARS - 30,  # long, straddling too
        "zq": size - 2,  # short: found by scanning alone
        "Qat": SCAN_CHUNKS * CHUNK_CHARS - 1,  # straddles the scanned head's last boundary
    }
    for needle, at in placed.items():
        text[at : at + len(needle)] = needle
    content = "".join(text)
    store.upsert_records(MAILBOX, "message_bodies", [body("late", content)])
    for needle, at in placed.items():
        for q in (needle, needle.upper()):
            window = assert_match(
                _match(store, "late", q, before_chars=5), content, at, len(q), before=5
            )
            assert window["text"][5 : 5 + len(q)] == content[at : at + len(q)]
    for absent in ("xylophones", "boundaryx", long_needle + "!"):
        with pytest.raises(StoreError) as caught:
            _match(store, "late", absent)
        assert_store_error(caught.value, "query_not_found", 404, "q")

    # Rewritten: the old text's index entries are gone, the new text's are there.
    moved = content.replace("XyLoPhOnE", "." * 9).replace("boundary", "mangrove")
    store.upsert_records(MAILBOX, "message_bodies", [body("late", moved)])
    with pytest.raises(StoreError) as caught:
        _match(store, "late", "xylophone")
    assert_store_error(caught.value, "query_not_found", 404, "q")
    assert_match(_match(store, "late", "MANGROVE"), moved, placed["boundary"], 8)
    # Removed: a record without the field, then with it again.
    store.upsert_records(MAILBOX, "message_bodies", [{**body("late", ""), "body_text": None}])
    store.upsert_records(MAILBOX, "message_bodies", [body("late", content)])
    assert_match(_match(store, "late", "xylophone"), content, placed["XyLoPhOnE"], 9)


# -- every occurrence: `occurrence` and `next_match_cursor` --------------------------------------


def _occurrences(text: str, q: str) -> list[int]:
    """The oracle: every position where the folded `q` starts in the folded text (overlapping)."""
    folded, needle, found = fold(text), fold(q), []
    at = folded.find(needle)
    while at >= 0:
        found.append(at)
        at = folded.find(needle, at + 1)
    return found


def test_every_occurrence_by_number_and_by_next_match_cursor(store: StoreFront) -> None:
    from pdpp_store._sql.index import SCAN_CHUNKS

    setup_mailbox(store)
    size = (SCAN_CHUNKS + 6) * CHUNK_CHARS
    text = list(FILLER * (size // len(FILLER) + 1))[:size]
    for at in (7, 2000, CHUNK_CHARS - 3, SCAN_CHUNKS * CHUNK_CHARS - 2, size - 40, size - 38):
        text[at : at + 6] = "Needle"
    text[100:104] = "aaaa"
    content = "".join(text)
    store.upsert_records(MAILBOX, "message_bodies", [body("many", content)])
    for q in ("needle", "NEEDLE", "aa", "edl"):
        expected = _occurrences(content, q)
        assert expected
        by_number = [
            _match(store, "many", q, occurrence=n, before_chars=3, after_chars=3)["window"][
                "match_start_chars"
            ]
            for n in range(1, len(expected) + 1)
        ]
        assert by_number == expected
        with pytest.raises(StoreError) as caught:
            _match(store, "many", q, occurrence=len(expected) + 1)
        assert_store_error(caught.value, "query_not_found", 404, "q")

        walked, envelope = [], _match(store, "many", q, before_chars=3, after_chars=3)
        while True:
            window = assert_match(
                envelope,
                content,
                envelope["window"]["match_start_chars"],
                len(q),
                before=3,
                after=3,
            )
            walked.append(window["match_start_chars"])
            follow = window["next_match_cursor"]
            if follow is None:
                assert window["match_end_chars"] == len(content)
                break
            try:
                envelope = store.read_field_window(
                    OWNER, ref_id("many"), BODY, cursor=follow
                ).to_dict()
            except StoreError as error:
                assert_store_error(error, "query_not_found", 404, "q")
                break
        assert walked == expected


def test_occurrence_and_match_cursor_rules(store: StoreFront) -> None:
    setup_mailbox(store)
    text = "one two one two one"
    store.upsert_records(MAILBOX, "message_bodies", [body("r", text), body("s", text)])
    for bad in (0, -1, True, "2", 10_001):
        with pytest.raises(StoreError) as caught:
            _match(store, "r", "one", occurrence=bad)
        assert_store_error(caught.value, "invalid_window", 400, "occurrence")
    with pytest.raises(StoreError) as caught:
        store.read_field_window(OWNER, ref_id("r"), BODY, occurrence=2)
    assert_store_error(caught.value, "invalid_window", 400, "occurrence")
    first = _match(store, "r", "two", before_chars=0, after_chars=0)
    follow = first["window"]["next_match_cursor"]
    assert follow
    with pytest.raises(StoreError) as caught:
        store.read_field_window(OWNER, ref_id("r"), BODY, cursor=follow, occurrence=2)
    assert_store_error(caught.value, "invalid_window", 400, "occurrence")
    # Bound to the record, the field and the grant like every cursor.
    with pytest.raises(StoreError) as caught:
        store.read_field_window(OWNER, ref_id("s"), BODY, cursor=follow)
    assert_store_error(caught.value, "invalid_cursor", 400, "cursor")
    with pytest.raises(StoreError) as caught:
        store.read_field_window(OWNER, ref_id("r"), "id", cursor=follow)
    assert_store_error(caught.value, "invalid_cursor", 400, "cursor")
    other = grant_for_fields([BODY, "id"])
    with pytest.raises(StoreError) as caught:
        store.read_field_window(other, ref_id("r"), BODY, cursor=follow)
    assert_store_error(caught.value, "invalid_cursor", 400, "cursor")
    second = store.read_field_window(OWNER, ref_id("r"), BODY, cursor=follow).to_dict()["window"]
    assert (second["match_start_chars"], second["text"]) == (12, "two")
    assert second["next_match_cursor"]
    with pytest.raises(StoreError) as caught:
        store.read_field_window(OWNER, ref_id("r"), BODY, cursor=second["next_match_cursor"])
    assert_store_error(caught.value, "query_not_found", 404, "q")
    # The field changed since: stale, with the current digest.
    store.upsert_records(MAILBOX, "message_bodies", [body("r", "two two two")])
    with pytest.raises(StoreError) as caught:
        store.read_field_window(OWNER, ref_id("r"), BODY, cursor=follow)
    assert_store_error(caught.value, "stale_cursor", 409, "cursor")
    # A match ending the field has no next match.
    last = _match(store, "s", "one", occurrence=3)["window"]
    assert last["match_end_chars"] == len(text)
    assert last["next_match_cursor"] is None


def grant_for_fields(fields: list[str]) -> Any:
    from _data import grant

    return grant({"name": "message_bodies", "instance_ids": [MAILBOX], "fields": fields})
