"""Search's filter reaches the database as parameters (`_sql.search` Rule 6), on both databases
and both fronts: no filter value is in any statement a filtered search sends, and a second
filter of the same shape (other values) builds no statement of its own: every filtered search
statement (the hits, the word index's ranking, the hits' counts) is the one built for the
first."""

from __future__ import annotations

from typing import Any

import pytest
from _bites import clear_statement_caches
from _data import MAILBOX, grant, setup_mailbox
from _fronts import StoreFront
from audit import BoundaryAudit

from pdpp_store._sql import ranking as ranking_sql
from pdpp_store._sql import search as search_sql
from pdpp_store._sql import words as words_sql

MS = "messages"
OWNER = grant({"name": MS, "instance_ids": [MAILBOX]})
BUILDERS = {
    "hits": search_sql._hits,
    "ranked": words_sql._ranked,
    "hit_counts": ranking_sql._hit_counts,
}
SENDERS = {"ann": ("ann.zqx@example.org", 1), "bob": ("bob.zqy@example.org", 11)}
"""Each sender's address and first day: their records alike, a filter picks as many of each."""


def _load(store: StoreFront) -> dict[str, list[dict[str, Any]]]:
    setup_mailbox(store)
    records: dict[str, list[dict[str, Any]]] = {}
    for name, (sender, first) in SENDERS.items():
        records[name] = [
            {
                "id": f"{name}{n}",
                "subject": f"budget note {'budget ' * (n % 3)}{n}",
                "from_email": sender,
                "received_at": f"2026-03-{first + n:02d}T10:00:00Z",
            }
            for n in range(6)
        ]
    store.upsert_records(MAILBOX, MS, [r for rs in records.values() for r in rs])
    return records


def _filter(name: str) -> dict[str, Any]:
    """The sender's records from its third day: the same shape for each sender."""
    sender, first = SENDERS[name]
    return {"from_email": sender.upper(), "received_at": {"gte": f"2026-03-{first + 2:02d}"}}


def _walk(store: StoreFront, name: str, **args: Any) -> list[str]:
    keys, cursor = [], None
    while True:
        page = store.search(
            OWNER, "budget", streams=[MS], limit=3, cursor=cursor, filter=_filter(name), **args
        ).to_dict()
        keys += [hit["record_key"] for hit in page["data"]]
        if not page["has_more"]:
            return keys
        cursor = page["next_cursor"]


def _misses() -> dict[str, int]:
    return {name: builder.cache_info().misses for name, builder in BUILDERS.items()}


def _hits() -> dict[str, int]:
    return {name: builder.cache_info().hits for name, builder in BUILDERS.items()}


ASKED = {
    "relevance": {},
    "asc": {"order": "asc"},
    "exact": {"count": "exact"},
}
"""The searches asked, and which filtered statements each asks for at least once."""
USES = {"relevance": {"ranked"}, "asc": {"hits"}, "exact": {"hits", "hit_counts"}}


@pytest.mark.parametrize("asked", sorted(ASKED))
def test_a_filter_of_the_same_shape_builds_no_statement_and_is_never_statement_text(
    store: StoreFront, asked: str
) -> None:
    records = _load(store)
    args = ASKED[asked]
    clear_statement_caches()  # each case on its own: none meets a statement another built
    with BoundaryAudit(store.engine) as audit:
        ann = _walk(store, "ann", **args)
        misses, hits = _misses(), _hits()
        bob = _walk(store, "bob", **args)
        assert _misses() == misses  # bob's filter built nothing: ann's statements served it
    used = {name for name, count in _hits().items() if count > hits[name]}
    assert USES[asked] <= used, used
    for name, keys in (("ann", ann), ("bob", bob)):
        assert sorted(keys) == sorted(r["id"] for r in records[name][2:])
    if asked == "asc":
        assert ann == [f"ann{n}" for n in range(2, 6)]
    assert audit.statements
    for statement in audit.statements:
        for value in ("zqx", "zqy", "2026-03-03", "2026-03-13", "received_at", "from_email"):
            assert value not in statement.lower(), (value, statement)
    given = set(map(str, audit.parameter_values()))
    assert "ann.zqx@example.org" in given  # folded, as stored
    assert any(value.startswith("2026-03-13T00:00:00") for value in given)
