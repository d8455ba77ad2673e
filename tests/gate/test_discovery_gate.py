"""P0 gate for discovery (docs/contract.md §11.3): every figure counts only what the grant can
see, on every backend and front.

Over the canary dataset of `test_gate_canaries` (hidden records of every kind: other
connections, outside `resources`, outside the time constraint or without a valid time, deleted)
and grants drawn by its strategy, `describe_grant` must give, per granted stream:

1. `record_count`: exactly the records the oracle (`visible`, a direct reading of §2) shows;
2. `order`: the order field only when granted, and then its oldest and newest instant among
   the visible records (the dataset's own table of instants, not the library's parser); a
   hidden, deleted or ungranted value never bounds it;
3. `last_written_at` exactly when a record is visible;
4. no unauthorized canary in the answer, and none crossing the database boundary
   (`BoundaryAudit`): discovery reads aggregates, never a value;
5. an unusable grant refused with the oracle's code;
6. a page at a time (`limit=1`, following `next`), the same streams as in one answer, each
   page under the same checks.

The proof bites: with the visibility condition removed from the statements (`true()`), the
counts of hidden and deleted records come through and the checks fail.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from audit import BoundaryAudit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import true
from test_gate_canaries import (
    CONSENT,
    DATASET,
    GrantDict,
    allows,
    covers,
    forbidden,
    grants,
    load,
    refusal,
    stream_grant,
    visible,
)

from pdpp_store import Grant, Store, StoreError
from pdpp_store._sql import visibility as sql

EXAMPLES = int(os.environ.get("PDPP_GATE_EXAMPLES", "40"))
DECLARING = ("cin_mail", "cin_other")
"""The connections that exist (and declare every gmail stream); the strategy's ghost does not."""


def _stamp(instant: Any) -> str:
    return str(instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))


def expected_stream(grant: GrantDict, name: str) -> dict[str, Any]:
    """The figures the oracle gives one granted stream."""
    sg = stream_grant(grant, name)
    assert sg is not None
    shown = [rec for rec in DATASET.records.values() if rec.stream == name and visible(sg, rec)]
    order_field = CONSENT[name]  # every gmail stream here orders by its consent field
    order: dict[str, Any] = {"field": None, "oldest": None, "newest": None}
    declaring = [conn for conn in DECLARING if covers(sg, conn)]
    if declaring and allows(sg, order_field):  # no covered connection: nothing declared
        instants = sorted(rec.instant for rec in shown if rec.instant is not None)
        order = {
            "field": order_field,
            "oldest": _stamp(instants[0]) if instants else None,
            "newest": _stamp(instants[-1]) if instants else None,
        }
    return {"record_count": len(shown), "order": order, "connection_ids": declaring}


def _one_at_a_time(store: Any, grant: Grant) -> list[dict[str, Any]]:
    pages = [store.describe_grant(grant, limit=1).to_dict()]
    while pages[-1]["next"] is not None:
        pages.append(store.describe_grant(grant, **pages[-1]["next"]["arguments"]).to_dict())
    return pages


def check_discovery(store: Any, grant: GrantDict) -> None:
    secret = forbidden(grant)
    engine = store.engine
    pages: list[dict[str, Any]] = []
    with BoundaryAudit(engine) as audit:
        try:
            answer = store.describe_grant(Grant.from_dict(grant)).to_dict()
            error: StoreError | None = None
            pages = _one_at_a_time(store, Grant.from_dict(grant))
        except StoreError as refused:
            answer, error = {}, refused
    said = json.dumps([answer, pages], ensure_ascii=False).lower()
    cells = "".join(v if isinstance(v, str) else "" for v in audit.values).lower()
    leaked = [c for c in secret if c.lower() in said or c.lower() in cells]
    assert not leaked, f"unauthorized canary in discovery: {leaked} under {grant}"
    codes = refusal(grant)
    if codes:
        assert error is not None, grant
        assert error.code in codes
        return
    assert error is None, (error, grant)
    assert [s for page in pages for s in page["streams"]] == answer["streams"], grant
    assert [len(page["streams"]) for page in pages] == ([1] * len(answer["streams"]) or [0])
    streams = {s["name"]: s for s in answer["streams"]}
    for sg in grant["streams"]:
        got, want = streams[sg["name"]], expected_stream(grant, sg["name"])
        assert got["record_count"] == want["record_count"], (sg, got["record_count"], want)
        assert got["order"] == want["order"], (sg, got["order"], want)
        assert got["connection_ids"] == want["connection_ids"], sg
        assert (got["last_written_at"] is None) == (want["record_count"] == 0), sg
        assert all(allows(sg, f["path"]) for f in got["fields"]), sg
        assert all(allows(sg, name) for name in got["filters"]), sg


@pytest.fixture
def loaded(store: Any) -> Any:
    load(store)
    return store


@given(data=st.data())
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_property_discovery_counts_only_what_the_grant_sees(
    loaded: Any, data: st.DataObject
) -> None:
    check_discovery(loaded, data.draw(grants("g-disc"), label="grant"))


FIXED: list[GrantDict] = [
    {"grant_id": "g", "streams": [{"name": "message_bodies", "instance_ids": ["cin_mail"]}]},
    {"grant_id": "g", "streams": [{"name": "attachments", "resources": ["a_in", "a_del"]}]},
    {
        "grant_id": "g",
        "streams": [
            {
                "name": "message_bodies",
                "time_constraint": {
                    "field": "message_received_at",
                    "since": "2026-01-01T00:00:00Z",
                },
            }
        ],
    },
    {"grant_id": "g", "streams": [{"name": "message_bodies", "fields": ["id"]}]},
]
"""Grants whose figures differ once hidden or deleted records count: another connection, a
deleted record inside `resources`, records outside the time constraint."""


@pytest.fixture
def sync_loaded(db_url: str) -> Any:
    with Store.open(db_url) as opened:
        load(opened)
        yield opened


def test_fixed_grants_hold(sync_loaded: Store) -> None:
    for grant in FIXED:
        check_discovery(sync_loaded, grant)


def test_visibility_removed_fails_the_proof(
    sync_loaded: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pdpp_store._sql import discovery as discovery_sql

    def everything_visible(shape: sql.GrantShape, prefix: str = "g", **_: Any) -> Any:
        return true()

    monkeypatch.setattr(sql, "visible_records", everything_visible)
    discovery_sql._stream_figures.cache_clear()
    discovery_sql._order_bound.cache_clear()
    try:
        for grant in FIXED[:3]:
            with pytest.raises(AssertionError):
                check_discovery(sync_loaded, grant)
    finally:
        monkeypatch.undo()
        discovery_sql._stream_figures.cache_clear()
        discovery_sql._order_bound.cache_clear()
