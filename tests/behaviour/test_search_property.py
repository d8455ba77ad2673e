"""Search against a pure-Python oracle (docs/contract.md §9, "Search"), on both databases and
both fronts: drawn records, grants, queries, orders, page sizes, scan lengths (so both
phases, the scan and the index, answer) and counts (without one, relevance order of word
terms is the word index's: `search._word_ranked`).

The oracle reads the contract and the documented score (docs/search.md, "Relevance") alone: a
record matches when every folded term occurs in the folded text of one of its searchable granted
fields (the manifest's lexical fields the grant covers; a term holding whitespace, a phrase,
with each run of whitespace in it matching any run of space, tab, LF, VT, FF or CR in the text:
a regular expression written here); hits come by score (computed here from the formula, not by
the store's code), then newest first by the granted order field
(`received_at`), then key; or by time alone for `desc`/`asc`; per matched field the excerpt is
the first occurrence of the first term (in query order) found there; each hit's record card shows
the declared-role fields the grant covers, cut to their slots' bounds (§13). Every page is read;
no hit is skipped or repeated; every continuation is replayed and must show the same match.
"""

from __future__ import annotations

import itertools
import re
from typing import Any
from unittest import mock

import pytest
from _data import manifest, on_one_store, setup_mailbox
from _fronts import StoreFront
from hypothesis import given
from hypothesis import strategies as st

from pdpp_store import Grant, fold
from pdpp_store._core import relevance
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._ops import search as search_ops

MS = "messages"
LEXICAL = ("subject", "from_name", "from_email", "snippet")  # gmail's, in manifest order
OTHER = ("thread_id", "labels_note")
ALPHABET = "ab AB.\u0130i\u0131\u00df\u1e9e\u03a3\u03c3\u03c2\U0001f600\u00e9\n\t\r\u00a0"
"""Letters whose folds matter: dotted and dotless i, sharp s, the sigmas, an emoji, an accent;
and layout (space, LF, tab, CR) beside a no-break space, which is not layout."""
LAYOUT = " \t\n\x0b\x0c\r"


def _needle(term: str) -> re.Pattern[str]:
    """The oracle's match of a folded term: its pieces between runs of layout, each run of
    layout matching any run in the text."""
    run = "[" + re.escape(LAYOUT) + "]+"
    return re.compile(run.join(re.escape(piece) for piece in re.split(run, term)))


_CONNECTIONS = itertools.count()


def _texts() -> st.SearchStrategy[str]:
    short = st.text(ALPHABET, max_size=30)

    @st.composite
    def long(draw: st.DrawFn) -> str:
        # Long enough to cross chunk boundaries, with a drawn needle placed near one.
        size = draw(st.integers(CHUNK_CHARS - 20, 2 * CHUNK_CHARS + 40))
        filler = "." * size
        needle = draw(st.text(ALPHABET, min_size=1, max_size=12))
        at = draw(st.integers(0, size))
        return filler[:at] + needle + filler[at:]

    @st.composite
    def beyond(draw: st.DrawFn) -> str:
        # Across the scored prefix's end: a word cut there (an overlong one, with a word
        # filler), or a needle only beyond it (a hit the word index cannot see).
        size = draw(st.integers(relevance.SCORE_CHARS - 6, relevance.SCORE_CHARS + 4))
        filler = draw(st.sampled_from([". ", "a", "ab "])) * size
        needle = draw(st.text(ALPHABET, min_size=1, max_size=8))
        return filler[:size] + needle + draw(short)

    return st.one_of(short, short, long(), beyond())


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 7))
    records = []
    for number in range(count):
        day = draw(st.integers(1, 3))
        fields = {"id": f"r{number:02d}", "received_at": f"2026-01-0{day}T00:00:00Z"}
        for name in LEXICAL + OTHER:
            if draw(st.booleans()):
                fields[name] = draw(_texts())
        records.append(fields)
    granted = draw(st.one_of(st.none(), st.sets(st.sampled_from(LEXICAL + OTHER))))
    pool = [text for record in records for key, text in record.items() if key not in ("id",)]
    terms = []
    runs = st.text(st.sampled_from(LAYOUT), min_size=1, max_size=3)
    inner = [
        (text, found)
        for text in pool
        for found in re.finditer("[" + re.escape(LAYOUT) + "]+", text)
        if found.start() > 0 and found.end() < len(text)
    ]
    across: bool = draw(st.booleans())
    if inner and across:
        # A phrase across a run of layout in a drawn text, its run redrawn.
        text, found = draw(st.sampled_from(inner))
        begin = draw(st.integers(max(0, found.start() - 4), found.start() - 1))
        end = draw(st.integers(found.end() + 1, min(len(text), found.end() + 4)))
        terms.append(text[begin : found.start()] + draw(runs) + text[found.end() : end])
    for _ in range(draw(st.integers(0 if terms else 1, 2 if terms else 3))):
        from_pool: bool = draw(st.booleans())
        if pool and from_pool:
            source = draw(st.sampled_from(pool))
            start = draw(st.integers(0, max(0, len(source) - 1)))
            piece = source[start : start + draw(st.integers(1, 12))]
            if draw(st.booleans()):
                # The same words laid out otherwise: each run of layout redrawn.
                piece = re.sub("[" + re.escape(LAYOUT) + "]+", lambda _: draw(runs), piece)
        else:
            piece = draw(st.text(ALPHABET, min_size=1, max_size=4))
        terms.append(piece)
    return {
        "records": records,
        "granted": granted,
        "terms": terms,
        "limit": draw(st.integers(1, 4)),
        "order": draw(st.sampled_from(["relevance", "relevance", "desc", "asc"])),
        "since_day": draw(st.one_of(st.none(), st.integers(1, 3))),
        "scan": draw(st.sampled_from([1, 2, 1000])),
        "count": draw(st.sampled_from(["exact", "none"])),
    }


def _query(terms: list[str]) -> tuple[str, list[str]]:
    """`q` for the drawn pieces (a piece with space or quote-free whitespace is quoted), and the
    terms the store will see, in order, without folded duplicates."""
    parts: list[str] = []
    seen: list[str] = []
    for drawn in terms:
        piece = drawn.replace('"', "")
        if not piece.strip():
            continue
        parts.append(f'"{piece}"' if any(c.isspace() for c in piece) else piece)
        if all(fold(piece) != fold(s) for s in seen):
            seen.append(piece)
    return " ".join(parts), seen


SCORE_TOLERANCE = 1e-6
"""Scores agree with the oracle's to this (both round to `relevance.DIGITS` places)."""


def _tf(text: str, needle: str) -> float:
    """The formula's tf, occurrence by occurrence (left to right, without overlap): whole-word
    occurrences 1, others PART_WEIGHT."""
    text = text[: relevance.SCORE_CHARS]
    total = 0.0
    for found in _needle(needle).finditer(text):
        at, end = found.span()
        before = text[at - 1] if at else " "
        after = text[end] if end < len(text) else " "
        wordy = [c.isalnum() or c == "_" for c in (before, after)]
        total += relevance.PART_WEIGHT if any(wordy) else 1.0
    return total


def _score(texts: dict[str, str], terms: list[str]) -> float:
    total = 0.0
    for text in texts.values():
        norm = 1 - relevance.B + relevance.B * len(text) / relevance.AVERAGE_CHARS
        for term in terms:
            tf = _tf(text, fold(term))
            if tf:
                total += tf * (relevance.K1 + 1) / (tf + relevance.K1 * norm)
    return round(total, relevance.DIGITS)


def _oracle(
    records: list[dict[str, Any]], granted: set[str] | None, terms: list[str], order: str
) -> list[tuple[str, list[tuple[str, str, int, int]], float]]:
    searchable = [p for p in LEXICAL if granted is None or p in granted]
    timed = granted is None or "received_at" in granted
    hits = []
    for record in sorted(records, key=lambda r: r["id"]):
        texts = {p: fold(record[p]) for p in searchable if p in record}
        if not all(any(_needle(fold(t)).search(x) for x in texts.values()) for t in terms):
            continue
        excerpts = []
        for path in searchable:
            if path not in texts:
                continue
            for term in terms:
                found = _needle(fold(term)).search(texts[path])
                if found is not None:
                    excerpts.append((path, term, *found.span()))
                    break
        hits.append((record, excerpts, _score(texts, terms)))
    # Stable sorts, last key first: key ascending, then time, then score.
    if timed:
        hits.sort(key=lambda hit: hit[0]["received_at"], reverse=order != "asc")
    if order == "relevance":
        hits.sort(key=lambda hit: -hit[2])
    return [(record["id"], excerpts, score) for record, excerpts, score in hits]


SLOTS = (
    ("title", "subject", 200),
    ("time", "received_at", 64),
    ("actor", "from_name", 200),
    ("secondary", "snippet", 280),
)
"""gmail's `messages` roles: each slot, the field declaring it, and its bound (§13)."""


def _card(record: dict[str, Any], granted: set[str] | None) -> dict[str, Any]:
    """The oracle's record card: each slot from its field when granted and present, cut."""
    card: dict[str, Any] = {}
    for slot, path, bound in SLOTS:
        if (granted is None or path in granted) and path in record:
            value = record[path]
            card[slot] = {"field": path, "value": value[:bound], "complete": len(value) <= bound}
    return card


@pytest.fixture
def searched(store: StoreFront) -> StoreFront:
    """A store of each backend and front with the gmail manifest registered."""
    setup_mailbox(store)
    return store


@on_one_store()
@given(scenario=scenarios())
def test_search_equals_the_oracle(searched: StoreFront, scenario: dict[str, Any]) -> None:
    store = searched
    q, terms = _query(scenario["terms"])
    if not terms:
        return
    connection = f"cin_prop{next(_CONNECTIONS)}"
    store.add_connection(connection, manifest("gmail")["connector_id"])
    store.upsert_records(connection, MS, scenario["records"])
    granted = scenario["granted"]
    stream: dict[str, Any] = {"name": MS, "instance_ids": [connection]}
    if granted is not None:
        stream["fields"] = sorted(granted | {"id"})
    grant = Grant.from_dict({"grant_id": "g-prop", "streams": [stream]})
    since = scenario["since_day"]
    if granted is not None and "received_at" not in granted:
        since = None  # a filter is a read of its field: only on a granted one
    counting = scenario.get("count", "exact")
    args: dict[str, Any] = {"order": scenario["order"], "count": counting}
    if since is not None:
        args["filter"] = {"received_at": {"gte": f"2026-01-0{since}T00:00:00Z"}}

    pages, cursor = [], None
    with mock.patch.object(search_ops, "SCAN_RECORDS", scenario["scan"]):
        while True:
            page = store.search(grant, q, limit=scenario["limit"], cursor=cursor, **args).to_dict()
            pages.append(page)
            assert len(page["data"]) <= scenario["limit"]
            if not page["has_more"]:
                break
            cursor = page["next_cursor"]
    hits = [hit for page in pages for hit in page["data"]]
    kept = [
        record
        for record in scenario["records"]
        if since is None or record["received_at"] >= f"2026-01-0{since}T00:00:00Z"
    ]
    expected = _oracle(kept, granted, terms, scenario["order"])
    if counting == "exact":
        assert all(page["count"] == {"kind": "exact", "value": len(expected)} for page in pages)
    else:  # relevance order without a count: the word index's path, where the terms allow
        assert all("count" not in page for page in pages)
    assert [hit["record_key"] for hit in hits] == [record_id for record_id, _, _ in expected]
    by_id = {record["id"]: record for record in scenario["records"]}
    for hit, (record_id, excerpts, score) in zip(hits, expected, strict=True):
        assert abs(hit["score"] - score) <= SCORE_TOLERANCE, record_id
        slots = {name: slot for name, slot in hit["card"].items() if isinstance(slot, dict)}
        assert slots == _card(by_id[record_id], granted), record_id
        got = [
            (
                e["field_path"],
                e["read"]["arguments"]["q"],
                e["match_start_chars"],
                e["match_end_chars"],
            )
            for e in hit["evidence_excerpts"]
        ]
        assert got == excerpts, record_id
        for excerpt in hit["evidence_excerpts"]:
            text = by_id[record_id][excerpt["field_path"]]
            assert text[excerpt["start_chars"] : excerpt["end_chars"]] == excerpt["preview_text"]
            args = dict(excerpt["read"]["arguments"])
            window = store.read_field_window(grant, args.pop("record"), args.pop("field"), **args)
            assert window.match_start_chars == excerpt["match_start_chars"]
            assert window.match_end_chars == excerpt["match_end_chars"]
            assert window.field.digest == excerpt["digest"]
