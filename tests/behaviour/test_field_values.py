"""What the write path stores for filters and changes pages, against a Python model, on both
databases and both fronts: after any run of upserts, updates and deletes, `field_values` holds
exactly `comparable_rows` of each live record's latest state (a deleted record none), and every
change took the next value of its connection's change sequence (so each record's latest change
holds its number in the run, and identical upserts take none); and `value_counts` holds exactly
the count of each own value of `field_values` (no key of a vanished value left)."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest
from _fronts import FRONTS, Front, open_front
from _values import (
    STREAM,
    VALUES_MANIFEST,
    change_seqs,
    counted_values,
    expected_values,
    spec,
    stored_counts,
    stored_values,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdpp_store import NotFound
from pdpp_store._core.manifest import Manifest, StreamSpec

_CONNECTIONS = itertools.count()
IDS = ("a", "b", "c", "d")
BATCH_SIZE = 2
"""Small, so one call's records span batches (each its own transaction and change values)."""
LETTERS = "aA bB\u0130i\u00df\u1e9e\u03a3\u03c3\u03c2\U0001f600"

_strings = st.one_of(
    st.text(LETTERS, max_size=8),
    st.sampled_from(
        [
            "2026-03-01T10:00:00Z",
            "2026-03-01T11:00:00+01:00",
            "2026-03-01",
            "2026-13-01",
            "1e3",
            "true",
            "x" * 256,
            "y" * 257,
            "",
            "bin\x00ary",
        ]
    ),
)
_numbers = st.one_of(
    st.integers(-(2**64), 2**64),
    st.sampled_from([2**53 + 1, -(2**63), 2**63 - 1, 2**63, 0.1, 1.0, -0.0, 1e300, 2.5e-300]),
    st.floats(allow_nan=False, allow_infinity=False),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _strings)
_values = st.one_of(
    _scalars,
    st.lists(st.one_of(_scalars, st.lists(_scalars, max_size=2)), max_size=6),
    st.dictionaries(st.sampled_from(["k", "K"]), _scalars, max_size=2),
)


@st.composite
def _record(draw: st.DrawFn) -> dict[str, Any]:
    record: dict[str, Any] = {"id": draw(st.sampled_from(IDS))}
    for name in ("title", "n", "flag", "tags", "when", "maybe", "anything", "doc", "extra"):
        if draw(st.booleans()):
            record[name] = draw(_values)
    if draw(st.booleans()):
        record["raw"] = "QUJD" * 40  # base64: binary-only, never comparable
    return record


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(_record(), min_size=1, max_size=4)),
        st.tuples(st.just("delete"), st.sampled_from(IDS)),
    ),
    min_size=1,
    max_size=8,
)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether the store sees two records as identical (their fields' canonical JSON)."""

    def canonical(record: dict[str, Any]) -> str:
        return json.dumps(record, sort_keys=True, ensure_ascii=False)

    return canonical(a) == canonical(b)


class _Model:
    """The records' latest states and the order their changes happened in."""

    def __init__(self) -> None:
        self.live: dict[str, dict[str, Any]] = {}
        self.deleted: set[str] = set()
        self.changes: list[str] = []

    def upsert(self, records: list[dict[str, Any]]) -> None:
        for start in range(0, len(records), BATCH_SIZE):
            self._batch(records[start : start + BATCH_SIZE])

    def _batch(self, batch: list[dict[str, Any]]) -> None:
        latest = {record["id"]: record for record in batch}  # the last of duplicates wins
        for record_id in sorted(latest):
            record = latest[record_id]
            if record_id in self.live and _same(self.live[record_id], record):
                continue
            self.live[record_id] = record
            self.deleted.discard(record_id)
            self.changes.append(record_id)

    def delete(self, record_id: str) -> bool:
        if record_id not in self.live:
            return False
        del self.live[record_id]
        self.deleted.add(record_id)
        self.changes.append(record_id)
        return True

    def latest_change(self) -> dict[str, int]:
        """Per record, the number (1-based) of its latest change."""
        return {record_id: n for n, record_id in enumerate(self.changes, start=1)}


def _check(url: str, connection_id: str, model: _Model) -> None:
    assert stored_values(url, connection_id) == expected_values(model.live)
    assert stored_counts(url, connection_id) == counted_values(url, connection_id)
    seqs, last = change_seqs(url, connection_id)
    assert last == len(model.changes)
    assert {r: seq for r, (seq, _) in seqs.items()} == model.latest_change()
    assert {r for r, (_, deleted) in seqs.items() if deleted} == model.deleted
    assert len({seq for seq, _ in seqs.values()}) == len(seqs)


@pytest.mark.parametrize("front", FRONTS)
def test_stored_values_and_change_sequence_follow_every_write(db_url: str, front: Front) -> None:
    store = open_front(front, db_url, batch_size=BATCH_SIZE)
    try:
        store.register_manifest(VALUES_MANIFEST)

        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(steps=_steps)
        def run(steps: list[tuple[str, Any]]) -> None:
            connection_id = f"v{next(_CONNECTIONS)}"
            store.add_connection(connection_id, VALUES_MANIFEST["connector_id"])
            model = _Model()
            for action, argument in steps:
                if action == "upsert":
                    store.upsert_records(connection_id, STREAM, argument)
                    model.upsert(argument)
                elif model.delete(argument):
                    store.delete_record(connection_id, STREAM, argument)
                else:
                    with pytest.raises(NotFound):
                        store.delete_record(connection_id, STREAM, argument)
            _check(db_url, connection_id, model)

        run()
    finally:
        store.close()


EDGES: list[dict[str, Any]] = [
    {"id": "a", "title": "a\x00B", "tags": ["x\x00", "\x01y", 2**53 + 1, 0.1, True, None, "X\x00"]},
    {"id": "b", "n": 1.2345678901234567, "maybe": None, "flag": False, "when": "2026-03-01"},
    {"id": "c", "n": 2**63 - 1, "anything": -(2**63), "title": "İstanbul", "doc": {"k": 1}},
    {"id": "d", "n": 2**64, "title": "y" * 257, "tags": [[1], {"k": 2}, "Z", "z"]},
]


@pytest.mark.parametrize("front", FRONTS)
def test_edge_values_are_stored_exactly(db_url: str, front: Front) -> None:
    """Strings holding NUL (stored through `stored_text`), integers past 2**53 and at the ends
    of 64 bits, doubles of 17 significant digits, a deleted record brought back whole."""
    with open_front(front, db_url, batch_size=BATCH_SIZE) as store:
        store.register_manifest(VALUES_MANIFEST)
        store.add_connection("edges", VALUES_MANIFEST["connector_id"])
        model = _Model()
        store.upsert_records("edges", STREAM, EDGES)
        model.upsert(EDGES)
        _check(db_url, "edges", model)
        for record_id in ("a", "c"):
            store.delete_record("edges", STREAM, record_id)
            model.delete(record_id)
        _check(db_url, "edges", model)
        again = [EDGES[0], {**EDGES[2], "title": "istanbul"}]
        store.upsert_records("edges", STREAM, again)
        model.upsert(again)
        _check(db_url, "edges", model)


def _redeclared() -> dict[str, Any]:
    """`VALUES_MANIFEST` with `title` binary (base64), `n` and `tags` undeclared, `extra`
    declared."""
    changed = copy.deepcopy(VALUES_MANIFEST)
    properties = changed["streams"][0]["schema"]["properties"]
    properties["title"] = {"type": "string", "contentEncoding": "base64"}
    del properties["n"], properties["tags"]
    properties["extra"] = {"type": ["string", "number", "null"]}
    del changed["streams"][0]["query"]
    return changed


@pytest.mark.parametrize("front", FRONTS)
def test_stored_values_follow_a_manifest_that_declares_anew(db_url: str, front: Front) -> None:
    """Registering a manifest that declares other fields gives stored records exactly the rows
    a write under it would: fields no longer declared (or now binary) lose theirs, fields newly
    declared get them from the stored text, on every connection of the connector, deleted
    records excepted; and back again."""
    records: list[dict[str, Any]] = [
        {"id": "a", "title": "Hello", "n": 2**53 + 1, "tags": ["x", 2], "extra": "Éé"},
        {"id": "b", "title": "y" * 300, "extra": 0.1, "when": "2026-03-01"},
        {"id": "c", "extra": [1], "title": "a\x00b"},
        {"id": "d", "extra": None},
        {"id": "e", "extra": "gone"},
    ]
    redeclared = _redeclared()
    later = Manifest.from_dict(redeclared).spec(STREAM)
    assert later is not None
    with open_front(front, db_url, batch_size=BATCH_SIZE) as store:
        store.register_manifest(VALUES_MANIFEST)
        for connection_id in ("r1", "r2"):
            store.add_connection(connection_id, VALUES_MANIFEST["connector_id"])
            store.upsert_records(connection_id, STREAM, records)
        store.delete_record("r1", STREAM, "e")
        live = {"r1": records[:4], "r2": records}

        def check(declared: StreamSpec) -> None:
            for connection_id, kept in live.items():
                expected = expected_values({r["id"]: r for r in kept}, declared)
                assert stored_values(db_url, connection_id) == expected
                assert stored_counts(db_url, connection_id) == counted_values(db_url, connection_id)

        check(spec())
        store.register_manifest(redeclared)
        check(later)
        assert any(row[1] == "extra" for row in stored_values(db_url, "r1"))
        store.register_manifest(VALUES_MANIFEST)
        check(spec())
