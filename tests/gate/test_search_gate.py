"""P0 gate for search (docs/contract.md §9, "Search"): what a grant does not cover never makes,
shapes or leaks a hit.

The dataset puts a canary of its own (a unique token, mixed case) in every place a search grant
excludes: a searchable field the grant does not cover (`from_name`), a granted field that is not
declared searchable (`thread_id`) or not declared at all (`x_note`), a soft-deleted record, a
record of a connection the grant does not cover, a record outside `resources`, and a record
outside the time constraint. Each canary sits in at least two records, so a leak would show in
`has_more` of a one-hit page even where the record is dropped later. In the records a granted
query finds, the canaries of the fields a search must not read sit next to that query's term, so
a page's evidence read from them would find a match there (and cut a preview of it). Proofs, on
every backend and front:

1. A query for any canary (alone, or with a term that matches granted content) answers exactly
   what a query matching nothing answers (the same page: hits, `has_more`, `next_cursor`).
2. No cell the database returns during those searches, nor during a search whose hits also hold
   canaries in ungranted fields, contains a canary (`BoundaryAudit`, returned cells only: the
   query itself carries the canary as a parameter), and the word index's statement ranks no
   record for a canary (it returns keys and scores: a key of a record whose only canary lies
   where the grant does not reach would tell where it lies); and the cells of that last
   search do hold its excerpts' text, so the audit saw the rows the page was made of.
   The hits' record cards show granted fields only (`from_name`, the `actor`, is not), and the
   audit saw the rows their slots came from.
3. The proofs bite: with the grant's field filter removed from the searched paths, the paths
   removed from the search SQL or from the page's evidence statements, the grant removed from
   the fields the page's cards read (or from the cards themselves), or the visibility
   condition removed, they fail; as they do with the visibility or the searched paths removed
   from the word index's statement alone.

Every proof runs twice: as the dataset is (its records fit in the first phase's scan), and with
that scan cut to one record, so hits come from the search index's candidates (`SCAN_RECORDS`),
whose every batch the same hit statement re-checks. Pages of word terms without a count are
ranked from the word index (`_sql.words`): the same proofs cover it, and bite when its
statement loses the grant's visibility or the searched paths. Searches with a `filter` (and
their counts) are proved in test_search_filter_gate.py, with bites of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _bites import breakable_monkeypatch, clear_statement_caches
from _data import MAILBOX, OTHER_MAILBOX, grant, manifest
from _fronts import StoreFront
from audit import BoundaryAudit

from pdpp_store import Grant, Store
from pdpp_store._core.folding import fold
from pdpp_store._ops import search as search_ops
from pdpp_store._sql import search as search_sql
from pdpp_store._sql import visibility as sql
from pdpp_store._sql import words as words_sql

MS = "messages"
CANARIES = {
    "ungranted": "cAnARy0042xT",
    "not_searchable": "cAnARy0077zQ",
    "undeclared": "cAnARy0313wK",
    "deleted": "cAnARy0555dL",
    "other_connection": "cAnARy0616oC",
    "outside_resources": "cAnARy0727rS",
    "outside_time": "cAnARy0838tM",
}
NOTHING = "zzNoSuchTokenAnywherezz"
SINCE = "2026-01-01T00:00:00Z"


def _message(record_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": record_id,
        "thread_id": f"t-{record_id}",
        "subject": "Quarterly report",
        "from_name": "Zoë",
        "snippet": "the numbers are in",
        "received_at": "2026-03-01T10:00:00Z",
        **fields,
    }


def load(store: StoreFront) -> None:
    gmail = manifest("gmail")
    store.register_manifest(gmail)
    for connection in (MAILBOX, OTHER_MAILBOX):
        store.add_connection(connection, gmail["connector_id"])
    c = CANARIES
    records = []
    for n in range(2):
        records += [
            _message(f"ungranted{n}", from_name=f"Quarterly\n{c['ungranted']} x"),
            _message(f"notsearch{n}", thread_id=f"quarterly-{c['not_searchable']}-{n}"),
            _message(f"undeclared{n}", x_note=f"quarterly note {c['undeclared']}"),
            _message(f"deleted{n}", subject=f"Gone {c['deleted']}"),
            _message(f"outside{n}", subject=f"Hidden {c['outside_resources']}"),
            _message(
                f"old{n}", subject=f"Old {c['outside_time']}", received_at="2020-01-01T00:00:00Z"
            ),
        ]
    store.upsert_records(MAILBOX, MS, records)
    store.upsert_records(
        OTHER_MAILBOX,
        MS,
        [_message(f"o{n}", subject=f"Elsewhere {c['other_connection']}") for n in range(2)],
    )
    for n in range(2):
        store.delete_record(MAILBOX, MS, f"deleted{n}")


def search_grant() -> Grant:
    visible = [
        f"{kind}{n}"
        for kind in ("ungranted", "notsearch", "undeclared", "deleted", "old")
        for n in range(2)
    ]
    return grant(
        {
            "name": MS,
            "instance_ids": [MAILBOX],
            "fields": ["id", "subject", "snippet", "thread_id", "x_note", "received_at"],
            "resources": visible,
            "time_constraint": {"field": "received_at", "since": SINCE},
        },
        grant_id="g-search-gate",
    )


GRANT = search_grant()
GRANTED = {"id", "subject", "snippet", "thread_id", "x_note", "received_at"}
"""The fields `GRANT` covers (`from_name`, an `actor`, holds a canary and is not granted)."""


def _answer(store: StoreFront, q: str, **args: Any) -> dict[str, Any]:
    page: dict[str, Any] = store.search(GRANT, q, **args).to_dict()
    return page


def _texts(audit: BoundaryAudit) -> list[str]:
    """The text of every str or bytes cell the database returned."""
    cells = [
        value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        for value in audit.values
    ]
    return [cell for cell in cells if isinstance(cell, str)]


def _leaked(audit: BoundaryAudit) -> list[str]:
    """The canaries found in any cell the database returned (case-folded, like the audit)."""
    texts = [fold(text) for text in _texts(audit)]
    return [name for name, canary in CANARIES.items() if any(fold(canary) in t for t in texts)]


def check_search_gate(store: StoreFront) -> None:
    """Proofs 1 and 2 (the function the bite tests run against broken variants)."""
    engine = store.engine
    for limit in (1, 10):
        nothing = _answer(store, NOTHING, limit=limit)
        assert nothing == {
            "object": "list",
            "data": [],
            "has_more": False,
            "next_cursor": None,
            "next": None,
            "complete": True,
        }
        for name, canary in CANARIES.items():
            # The phrase, across layout, takes the phrase path (squeezed text, chunk texts).
            phrase = f'"quarterly \r\n{canary}"'
            for q in (canary, canary.upper(), f'"{canary}"', f"quarterly {canary}", phrase):
                with BoundaryAudit(engine) as audit, _word_ranked() as ranked:
                    answer = _answer(store, q, limit=limit)
                leaked = _leaked(audit)
                assert not leaked, f"canaries leaked searching {q!r}: {leaked}"
                if not q.startswith(("quarterly", '"quarterly')):
                    # The word index ranks records: none holds the canary where it may look.
                    assert not ranked, (
                        f"the word index ranked {[row.key for row in ranked]} for {q!r}: its"
                        f" work depends on content the grant does not cover ({name})"
                    )
                reference = f"quarterly {NOTHING}" if q.startswith("quarterly") else NOTHING
                assert answer == _answer(store, reference, limit=limit), (
                    f"the answer to {q!r} depends on content the grant does not cover ({name})"
                )
                counted = _answer(store, q, limit=limit, count="exact")
                assert counted == _answer(store, reference, limit=limit, count="exact"), (
                    f"the count for {q!r} depends on content the grant does not cover ({name})"
                )
    # Hits that hold canaries in fields the grant does not cover show none of them.
    with BoundaryAudit(engine) as audit:
        page = _answer(store, "quarterly numbers", limit=50)
    leaked = _leaked(audit)
    assert not leaked, f"canaries leaked into the evidence of a granted page: {leaked}"
    ids = [hit["record_key"] for hit in page["data"]]
    assert ids == sorted(
        f"{k}{n}" for k in ("notsearch", "undeclared", "ungranted") for n in range(2)
    )
    texts = _texts(audit)
    for hit in page["data"]:
        excerpts = hit["evidence_excerpts"]
        assert excerpts, f"no evidence for {hit['record_key']}"
        assert {e["field_path"] for e in excerpts} <= {"subject", "snippet"}
        for excerpt in excerpts:  # the audit saw the page's rows: its silence means something
            assert any(excerpt["preview_text"] in text for text in texts), (
                f"the audit saw no row holding the excerpt {excerpt['preview_text']!r}"
            )
        _check_card(hit, texts)


@contextmanager
def _word_ranked() -> Iterator[list[Any]]:
    """The records the word index's statement returns meanwhile (`words_sql.ranked_records`):
    keys and scores only, but a key is a record, and its score what its fields hold."""
    seen: list[Any] = []
    real = words_sql.ranked_records

    def recording(rows: Any) -> Any:
        found = real(rows)
        seen.extend(found)
        return found

    words_sql.ranked_records = recording
    try:
        yield seen
    finally:
        words_sql.ranked_records = real


def _check_card(hit: dict[str, Any], texts: list[str]) -> None:
    """A hit's card shows granted fields only, and the audit saw the rows it was made of."""
    card = hit["card"]
    slots = {name: slot for name, slot in card.items() if isinstance(slot, dict)}
    shown = {slot["field"] for slot in slots.values()}
    assert shown <= GRANTED, f"ungranted fields leaked into the card of {hit['id']}: {shown}"
    assert {"title", "time", "secondary"} <= set(slots), f"a card lost its slots: {card}"
    for slot in slots.values():
        assert any(str(slot["value"]) in text for text in texts), (
            f"the audit saw no row holding the card's {slot['field']!r}"
        )


PHASES = {"scan": None, "index": 1}
"""`SCAN_RECORDS` per phase proved: the real one, or one record (the index names the rest)."""


@pytest.fixture(params=sorted(PHASES))
def phase(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    scan = PHASES[request.param]
    if scan is not None:
        monkeypatch.setattr(search_ops, "SCAN_RECORDS", scan)
    return str(request.param)


def test_search_never_answers_from_what_the_grant_does_not_cover(
    store: StoreFront, phase: str
) -> None:
    load(store)
    check_search_gate(store)


# ---------------------------------------------------------------- the proofs bite


@pytest.fixture
def breakable(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield from breakable_monkeypatch(monkeypatch)


@pytest.fixture(params=["sqlite_store", pytest.param("pg_store", marks=pytest.mark.postgres)])
def loaded(request: pytest.FixtureRequest, phase: str) -> Store:
    opened: Store = request.getfixturevalue(request.param)
    load(opened)
    check_search_gate(opened)  # the real library passes
    return opened


def _fails(store: Store) -> None:
    with pytest.raises(AssertionError, match=r"depends on content|leaked|hits changed"):
        check_search_gate(store)


def test_searching_ungranted_fields_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The grant's field filter removed where the searched paths are decided."""
    real = search_ops._groups

    def every_lexical_field(grant: Grant, names: list[str], catalogue: Any) -> Any:
        return (
            real(Grant.owner(MAILBOX, *names), names, catalogue)[0:1]
            + real(Grant.owner(MAILBOX, *names), names, catalogue)[1:]
        )

    breakable.setattr(search_ops, "_groups", _keep_grants(real))
    _fails(loaded)


def _keep_grants(real: Callable[..., Any]) -> Callable[..., Any]:
    """`_groups` whose paths ignore the grant's fields, but whose stream grants (visibility)
    stay the real ones."""

    def broken(grant: Grant, names: list[str], catalogue: Any, filter: Any = None) -> Any:
        stream_grants, _ = real(grant, names, catalogue, filter)
        _, groups = real(
            Grant.from_dict({"grant_id": "all", "streams": [{"name": n} for n in names]}),
            names,
            catalogue,
            filter,
        )
        return stream_grants, groups

    return broken


def test_paths_removed_from_the_search_sql_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The hit statements match terms in any field of the record, not only the searched ones:
    the key-order re-check and relevance order's counts (the evidence stays correct, so only
    the page's shape can tell)."""
    from sqlalchemy import Integer, bindparam, exists, true

    from pdpp_store._sql import ranking as ranking_sql
    from pdpp_store._sql.dialects import strpos
    from pdpp_store._sql.match import haystack_at as _haystack_at
    from pdpp_store._sql.tables import field_chunks, fields, records
    from pdpp_store._sql.visibility import same_record as _same_record

    def any_field(group: int, term: int, long_term: bool) -> Any:
        overlap = bindparam(f"t{term}_overlap", type_=Integer)
        haystack = _haystack_at(field_chunks, long_term, overlap)
        return exists().where(
            _same_record(fields, records),
            _same_record(field_chunks, fields),
            field_chunks.c.path == fields.c.path,
            strpos(haystack, bindparam(f"t{term}")) > 0,
        )

    breakable.setattr(search_sql, "_term_occurs", any_field)
    breakable.setattr(ranking_sql, "_searched_paths", lambda targets: true())
    _fails(loaded)


def test_paths_removed_from_the_page_evidence_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The page's evidence statements (`first_occurrences`, `previews`) read every text-like
    field of a hit, not only its searched paths. The store keeps the excerpts of the searched
    paths alone, so every answer is unchanged and only the audit can tell."""
    from pdpp_store._sql.tables import fields, records
    from pdpp_store._sql.visibility import same_record as _same_record

    real = search_sql._page_fields

    def every_field(shapes: Any, targets: Any) -> Any:
        _, conditions = real(shapes, targets)  # visibility and text-likeness stay
        joined = targets.join(records, _same_record(records, targets)).join(
            fields, _same_record(fields, records)
        )
        return joined, conditions

    queries = ["quarterly numbers", *(f"quarterly {canary}" for canary in CANARIES.values())]
    answers = [_answer(loaded, q, limit=50) for q in queries]
    breakable.setattr(search_sql, "_page_fields", every_field)
    clear_statement_caches()  # the statements built for `answers` hold the real `_page_fields`
    assert [_answer(loaded, q, limit=50) for q in queries] == answers
    with pytest.raises(AssertionError, match="leaked"):
        check_search_gate(loaded)


def test_visibility_removed_from_the_search_sql_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import true

    def everything_visible(shape: Any, prefix: str = "g") -> Any:
        return true()

    breakable.setattr(sql, "visible_records", everything_visible)
    _fails(loaded)


def test_index_candidates_taken_unchecked_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The index's candidates returned as hits, without the hit statement's re-check (grant,
    visibility, the text itself), in key order and in relevance order (where the counts
    re-check them): the index only ever narrows, and the proofs show it."""

    def trusting(
        stream_grants: Any, groups: Any, query: Any, after: Any, wanted: int
    ) -> Generator[Any, Any, Any]:
        longest = max((term.folded for term in query.terms), key=len)
        names = [g.name for g in stream_grants]
        start = after if after is not None else ("", "", "")
        rows = yield search_sql.candidates(groups, names, longest, start, wanted)
        return search_sql.hit_keys(rows or [])

    def trusting_counted(
        stream_grants: Any, groups: Any, query: Any, targets_of: Any
    ) -> Generator[Any, Any, Any]:
        keys = yield from trusting(stream_grants, groups, query, None, search_ops.ALL_HITS)
        return keys, {}

    breakable.setattr(search_ops, "_matching_keys", trusting)
    breakable.setattr(search_ops, "_counted_hits", trusting_counted)
    _fails(loaded)


def test_cards_reading_ungranted_role_fields_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The page's card statement names every role field, granted or not. The card itself still
    keeps the granted ones (`RecordCard.build`), so every answer is unchanged and only the
    audit can tell."""
    from pdpp_store._ops import cards as cards_ops

    real = cards_ops._role_fields

    def every_role_field(spec: Any, grant: Any) -> Any:
        return real(spec, _owner_stream())

    queries = ["quarterly numbers", *(f"quarterly {canary}" for canary in CANARIES.values())]
    answers = [_answer(loaded, q, limit=50) for q in queries]
    breakable.setattr(cards_ops, "_role_fields", every_role_field)
    assert [_answer(loaded, q, limit=50) for q in queries] == answers
    with pytest.raises(AssertionError, match="leaked"):
        check_search_gate(loaded)


def _owner_stream() -> Any:
    return Grant.owner(MAILBOX, MS).stream(MS)


def test_cards_built_without_the_grant_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The page's cards read and show every role field: the ungranted actor shows."""
    from pdpp_store._ops import cards as cards_ops

    real_fields, real_page = cards_ops._role_fields, cards_ops.page_cards

    def every_role_field(spec: Any, grant: Any) -> Any:
        return real_fields(spec, _owner_stream())

    def page_cards(grants: Any, specs: Any, keys: Any) -> Any:
        owned = {name: Grant.owner(MAILBOX, name).stream(name) for name in grants}
        return real_page({**grants, **owned}, specs, keys)

    breakable.setattr(cards_ops, "_role_fields", every_role_field)
    breakable.setattr(search_ops, "page_cards", page_cards)
    _fails(loaded)


def test_visibility_removed_from_the_word_index_statement_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The word index's ranking (`_sql.words`, relevance pages of word terms) keeps a record
    in a searched connection whatever the grant's visibility says: deleted records, records
    outside `resources` or the time constraint rank and show."""
    from sqlalchemy import bindparam, or_

    from pdpp_store._sql.tables import records

    def connections_only(shapes: Any, layout: Any, longs: Any, filters: Any = ()) -> Any:
        return or_(
            *(
                records.c.connection_id.in_(bindparam(f"c{number}", expanding=True))
                for number in range(len(layout))
            )
        )

    breakable.setattr(words_sql, "_in_scope", connections_only)
    _fails(loaded)


def test_paths_removed_from_the_word_index_statement_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The word index's ranking reads the words of every field of a searched connection's
    stream, not only the searched granted paths: a canary in an ungranted field makes a hit."""
    from sqlalchemy import and_, bindparam, or_

    def every_path(table: Any, count: int, **_: Any) -> Any:
        return or_(
            *(
                and_(
                    table.c.stream == bindparam(f"w_s{number}"),
                    table.c.connection_id.in_(bindparam(f"c{number}", expanding=True)),
                )
                for number in range(count)
            )
        )

    breakable.setattr(words_sql, "_in_groups", every_path)
    _fails(loaded)
