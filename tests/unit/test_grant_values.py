"""Grants and manifests check and canonicalise themselves however they are built (issue 10,
item 1): the constructor and `from_dict` give equal values with equal fingerprints, and any
narrowing of any term gives another fingerprint."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pdpp_store import Grant as _Grant
from pdpp_store import StoreError
from pdpp_store._core.grants import StreamGrant as _StreamGrant
from pdpp_store._core.grants import TimeConstraint as _TimeConstraint
from pdpp_store._core.manifest import Manifest as _Manifest
from pdpp_store._core.manifest import StreamSpec as _StreamSpec

# Typed as Any: the point is to call them with values of the wrong types, as a caller might.
Grant: Any = _Grant
StreamGrant: Any = _StreamGrant
TimeConstraint: Any = _TimeConstraint
Manifest: Any = _Manifest
StreamSpec: Any = _StreamSpec

WIDE: dict[str, Any] = {
    "name": "emails",
    "instance_ids": ["cin_a", "cin_b"],
    "fields": ["body", "subject"],
    "resources": ["e1", "e2"],
    "time_constraint": {"field": "sent", "since": "2026-01-01", "until": "2027-01-01"},
}

NARROWINGS: dict[str, dict[str, Any]] = {
    "fields": {"fields": ["subject"]},
    "resources": {"resources": ["e1"]},
    "instance_ids": {"instance_ids": ["cin_a"]},
    "since": {"time_constraint": {"field": "sent", "since": "2026-06-01", "until": "2027-01-01"}},
    "until": {"time_constraint": {"field": "sent", "since": "2026-01-01", "until": "2026-06-01"}},
    "time field": {"time_constraint": {"field": "received", "since": "2026-01-01"}},
    "all to none": {"fields": []},
}


def _built(terms: dict[str, Any]) -> _Grant:
    """The grant of `terms`, built with the constructors (not `from_dict`)."""
    time = terms.get("time_constraint")
    built: _Grant = Grant(
        "g",
        [
            StreamGrant(
                terms["name"],
                terms.get("instance_ids"),
                terms.get("fields"),  # a list: canonicalised to a frozenset
                None if time is None else TimeConstraint(**time),
                None if terms.get("resources") is None else set(terms["resources"]),
            )
        ],
    )
    return built


def _parsed(terms: dict[str, Any]) -> _Grant:
    return _Grant.from_dict({"grant_id": "g", "streams": [terms]})


def test_both_ways_of_building_give_one_value_and_one_fingerprint() -> None:
    built, parsed = _built(WIDE), _parsed(WIDE)
    assert built == parsed
    assert built.fingerprint("emails") == parsed.fingerprint("emails")
    # Equal stream grants hash alike (their hash is their canonical form's): one cache entry.
    assert hash(built.streams[0]) == hash(parsed.streams[0])
    assert len({built.streams[0], parsed.streams[0]}) == 1
    assert isinstance(built.streams, tuple)
    assert built.streams[0].fields == frozenset({"body", "subject"})
    assert built.streams[0].time_constraint == TimeConstraint(
        "sent", "2026-01-01T00:00:00.000000Z", "2027-01-01T00:00:00.000000Z"
    )


@pytest.mark.parametrize("narrowing", sorted(NARROWINGS))
@pytest.mark.parametrize("build", [_built, _parsed], ids=["constructor", "from_dict"])
def test_any_narrowing_changes_the_fingerprint(narrowing: str, build: Any) -> None:
    narrow = {**WIDE, **NARROWINGS[narrowing]}
    wide_fingerprints = {f(WIDE).fingerprint("emails") for f in (_built, _parsed)}
    assert build(narrow).fingerprint("emails") not in wide_fingerprints


@pytest.mark.parametrize(
    "build",
    [
        lambda: Grant("", ()),
        lambda: Grant("g", "emails"),
        lambda: Grant("g", [{"name": "emails"}]),
        lambda: Grant("g", [StreamGrant("a"), StreamGrant("a")]),
        lambda: Grant("g", (), expires_at="not a date"),
        lambda: Grant("g", (), status=5),
        lambda: Grant(5, ()),
        lambda: StreamGrant("a\x00"),
        lambda: StreamGrant("a", fields="body"),
        lambda: StreamGrant("a", fields=["\ud800"]),
        lambda: StreamGrant("a", resources=[1, 2]),
        lambda: StreamGrant("a", instance_ids={"x": 1}),
        lambda: StreamGrant("a", time_constraint="sent"),
        lambda: TimeConstraint(""),
        lambda: TimeConstraint("sent", since=float("nan")),
        lambda: TimeConstraint("sent", until=2**64),
    ],
)
def test_constructors_refuse_what_from_dict_refuses(build: Any) -> None:
    with pytest.raises(StoreError) as caught:
        build()
    assert caught.value.code == "invalid_grant"
    assert caught.value.http_status == 400


def test_constructed_expiry_is_an_aware_utc_instant() -> None:
    grant = Grant("g", (), expires_at=datetime(2030, 1, 1))
    assert grant.expires_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert Grant("g", (), expires_at="2030-01-01T01:00:00+01:00").expires_at == grant.expires_at


@pytest.mark.parametrize(
    "build",
    [
        lambda: Manifest("", (StreamSpec("s", ("id",), None, {}),), "{}"),
        lambda: Manifest("c", (), "{}"),
        lambda: Manifest("c", ("s",), "{}"),
        lambda: Manifest(
            "c", (StreamSpec("s", ("id",), None, {}), StreamSpec("s", ("id",), None, {})), "{}"
        ),
        lambda: Manifest("c" * 600, (StreamSpec("s", ("id",), None, {}),), "{}"),
        lambda: StreamSpec("a/b", ("id",), None, {}),
        lambda: StreamSpec("s", (), None, {}),
        lambda: StreamSpec("s", "id", None, {}),
        lambda: StreamSpec("s", ("id\x00",), None, {}),
        lambda: StreamSpec("s", ("id",), "\ud800", {}),
        lambda: StreamSpec("s", ("id",), None, {"body": "base64"}),
    ],
)
def test_manifests_check_themselves(build: Any) -> None:
    with pytest.raises(StoreError) as caught:
        build()
    assert caught.value.code == "invalid_manifest"


def test_a_fingerprint_is_computed_once_and_never_part_of_the_value() -> None:
    first, second = _parsed(WIDE), _parsed(WIDE)
    expected = first.fingerprint("emails")
    assert first.fingerprint("emails") is expected  # kept
    assert second == first  # whatever either has computed
    assert hash(second) == hash(first)
    assert "fingerprint" not in repr(first)
    assert _parsed(WIDE | NARROWINGS["fields"]).fingerprint("emails") != expected
    with pytest.raises(StoreError) as info:
        first.fingerprint("chats")
    assert info.value.code == "grant_stream_not_allowed"
