"""PDPP grants as validated values (docs/contract.md §2). Pure: no I/O.

Rules:
1. A `Grant` that exists is well formed: `Grant.from_dict` refuses anything else with
   `invalid_grant`, naming the offending key.
2. Absent means "all" for `fields`, `resources` and `instance_ids` (an owner grant); `[]` means
   none. The time constraint's bounds are normalised to UTC instants once, here, so the SQL layer
   compares fixed-width strings.
3. Each stream may appear once in a grant; two stream grants for one stream would make "which
   fields are granted" ambiguous, so that is `invalid_grant` rather than a silent union.
4. This module answers questions that need no row: is the grant usable now, is the stream granted,
   does it cover this connection, is this field granted. Record visibility (connections,
   resources, time) is turned into SQL by `_sql.visible_records`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeGuard

from .errors import BadRequest, Forbidden
from .identity import is_unicode

__all__ = ["Grant", "StreamGrant", "TimeConstraint", "as_grant", "normalize_instant"]

_USABLE_STATUSES = frozenset({"active", "approved", "granted"})
_MAX_INSTANT_CHARS = 64


def normalize_instant(value: object) -> str | None:
    """An ISO-8601 date or date-time string as a fixed-width UTC instant, else None.

    Naive values are taken as UTC; a date alone is its midnight. Anything that is not a string
    (numbers included) or does not parse gives None, which the read path treats as "outside
    every time constraint" (fail closed).
    """
    if not isinstance(value, str) or not value or len(value) > _MAX_INSTANT_CHARS:
        return None
    if not value[:4].isdigit():  # every form `fromisoformat` reads opens with a 4-digit year:
        return None  # most strings are refused here, without raising (ingestion calls this)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        parsed = parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ").rjust(27, "0")


def _invalid(message: str, param: str) -> BadRequest:
    return BadRequest("invalid_grant", message, param=param)


def _is_name(value: object) -> TypeGuard[str]:
    """A non-empty string a database can hold and compare: valid Unicode, no NUL."""
    return isinstance(value, str) and bool(value) and "\x00" not in value and is_unicode(value)


def _str_list(value: object, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(_is_name(v) for v in value):
        raise _invalid(f"grant {param} must be a list of non-empty strings", param)
    return tuple(value)


def _names(value: object, param: str) -> tuple[str, ...]:
    """Any collection of names given to a constructor (a list, tuple, set or frozenset), checked;
    a single string is refused rather than read as a list of characters."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(
        value, list | tuple | set | frozenset
    ):
        raise _invalid(f"grant {param} must be a list of non-empty strings", param)
    items = tuple(value)
    if not all(_is_name(v) for v in items):
        raise _invalid(f"grant {param} must be a list of non-empty strings", param)
    return items


def _instant(value: object, param: str) -> str | None:
    """A bound given to a constructor: None, an ISO-8601 string or a `datetime`, normalised."""
    if value is None:
        return None
    if isinstance(value, datetime):
        value = value.isoformat()
    instant = normalize_instant(value)
    if instant is None:
        raise _invalid(f"{param} must be an ISO-8601 date-time", param)
    return instant


@dataclass(frozen=True, slots=True)
class TimeConstraint:
    """`since` inclusive, `until` exclusive, both normalised to fixed-width UTC instants when
    constructed (Rule 2), however the value is built."""

    field: str
    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        if not _is_name(self.field):
            raise _invalid("time_constraint.field must be a non-empty string", "time_constraint")
        object.__setattr__(self, "since", _instant(self.since, "time_constraint.since"))
        object.__setattr__(self, "until", _instant(self.until, "time_constraint.until"))

    @classmethod
    def from_dict(cls, data: object, param: str) -> TimeConstraint:
        if not isinstance(data, Mapping):
            raise _invalid(f"{param} must be an object", param)
        name = data.get("field")
        if not _is_name(name):
            raise _invalid(f"{param}.field must be a non-empty string", f"{param}.field")
        bounds: dict[str, str | None] = {}
        for key in ("since", "until"):
            raw = data.get(key)
            bounds[key] = None if raw is None else normalize_instant(raw)
            if raw is not None and bounds[key] is None:
                raise _invalid(f"{param}.{key} must be an ISO-8601 date-time", f"{param}.{key}")
        return cls(name, bounds["since"], bounds["until"])

    def to_dict(self) -> dict[str, str]:
        """The JSON `from_dict` reads back to an equal constraint (bounds as normalised)."""
        out = {"field": self.field}
        if self.since is not None:
            out["since"] = self.since
        if self.until is not None:
            out["until"] = self.until
        return out


@dataclass(frozen=True, slots=True)
class StreamGrant:
    """One stream's terms. Constructed directly or by `from_dict`, it is checked and put in one
    canonical form (tuples and frozensets of names), and `canonical` (what the grant's
    fingerprint hashes) is derived from every term, so two stream grants that differ in any
    term never share a fingerprint."""

    name: str
    instance_ids: tuple[str, ...] | None = None
    fields: frozenset[str] | None = None
    time_constraint: TimeConstraint | None = None
    resources: frozenset[str] | None = None
    canonical: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not _is_name(self.name):
            raise _invalid("a stream grant's name must be a non-empty string", "streams")
        if self.instance_ids is not None:
            object.__setattr__(self, "instance_ids", _names(self.instance_ids, "instance_ids"))
        for key in ("fields", "resources"):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, frozenset(_names(value, key)))
        time_constraint = self.time_constraint
        if isinstance(time_constraint, Mapping):
            time_constraint = TimeConstraint.from_dict(time_constraint, "time_constraint")
            object.__setattr__(self, "time_constraint", time_constraint)
        elif time_constraint is not None and not isinstance(time_constraint, TimeConstraint):
            raise _invalid("time_constraint must be a TimeConstraint", "time_constraint")
        instance_ids, fields, resources = self.instance_ids, self.fields, self.resources
        canonical = json.dumps(
            {
                "name": self.name,
                "instance_ids": sorted(instance_ids) if instance_ids is not None else None,
                "fields": sorted(fields) if fields is not None else None,
                "resources": sorted(resources) if resources is not None else None,
                "time_constraint": None
                if time_constraint is None
                else [time_constraint.field, time_constraint.since, time_constraint.until],
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        object.__setattr__(self, "canonical", canonical)

    @classmethod
    def from_dict(cls, data: object, param: str) -> StreamGrant:
        if not isinstance(data, Mapping):
            raise _invalid(f"{param} must be an object", param)
        name = data.get("name")
        if not _is_name(name):
            raise _invalid(f"{param}.name must be a non-empty string", f"{param}.name")

        def optional_list(key: str) -> tuple[str, ...] | None:
            raw = data.get(key)
            return None if raw is None else _str_list(raw, f"{param}.{key}")

        instance_ids = optional_list("instance_ids")
        fields = optional_list("fields")
        resources = optional_list("resources")
        raw_time = data.get("time_constraint")
        time_constraint = (
            None
            if raw_time is None
            else TimeConstraint.from_dict(raw_time, f"{param}.time_constraint")
        )
        return cls(
            name=name,
            instance_ids=instance_ids,
            fields=None if fields is None else frozenset(fields),
            time_constraint=time_constraint,
            resources=None if resources is None else frozenset(resources),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON `from_dict` reads back to an equal stream grant (absent terms left out,
        sets sorted)."""
        out: dict[str, Any] = {"name": self.name}
        if self.instance_ids is not None:
            out["instance_ids"] = list(self.instance_ids)
        if self.fields is not None:
            out["fields"] = sorted(self.fields)
        if self.time_constraint is not None:
            out["time_constraint"] = self.time_constraint.to_dict()
        if self.resources is not None:
            out["resources"] = sorted(self.resources)
        return out

    def __hash__(self) -> int:
        # Equal stream grants have the same canonical form, whose string keeps its hash: the
        # statement caches hash the grant on every read, without rehashing each term.
        return hash(self.canonical)

    def covers_connection(self, connection_id: str) -> bool:
        return self.instance_ids is None or connection_id in self.instance_ids

    def allows_field(self, path: str) -> bool:
        return self.fields is None or path in self.fields


@dataclass(frozen=True, slots=True)
class Grant:
    """A grant. However it is built (`from_dict` or the constructor) it is checked when
    constructed (Rule 1): `streams` becomes a tuple of `StreamGrant`s with distinct names,
    `expires_at` an aware UTC `datetime` (an ISO-8601 string is accepted too)."""

    grant_id: str
    streams: tuple[StreamGrant, ...]
    expires_at: datetime | None = None
    status: str | None = None
    stored: bool = field(default=False, compare=False, repr=False)
    """Obtained from the store (`Store.add_grant`, `list_grants`, a server's token naming it by
    id): every read under it first asks the store whether it was revoked. A grant the caller
    builds is judged by its own terms alone (and costs no lookup)."""
    _fingerprints: dict[str, bytes] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    """Fingerprints computed so far, by stream (a pure function of the grant's terms)."""

    def __post_init__(self) -> None:
        if not _is_name(self.grant_id):
            raise _invalid("grant_id must be a non-empty string", "grant_id")
        if isinstance(self.streams, str | bytes | Mapping) or not isinstance(
            self.streams, list | tuple
        ):
            raise _invalid("grant streams must be a list of StreamGrant", "streams")
        streams = tuple(self.streams)
        if not all(isinstance(item, StreamGrant) for item in streams):
            raise _invalid("grant streams must be a list of StreamGrant", "streams")
        seen: set[str] = set()
        for item in streams:
            if item.name in seen:
                raise _invalid(
                    f"stream {item.name!r} appears more than once in the grant", "streams"
                )
            seen.add(item.name)
        object.__setattr__(self, "streams", streams)
        if self.status is not None and not (
            isinstance(self.status, str) and is_unicode(self.status)
        ):
            raise _invalid("grant status must be a string", "status")
        if self.expires_at is not None:
            instant = _instant(self.expires_at, "expires_at")
            assert instant is not None
            object.__setattr__(self, "expires_at", datetime.fromisoformat(instant))

    @classmethod
    def from_dict(cls, data: object) -> Grant:
        if not isinstance(data, Mapping):
            raise _invalid("a grant must be a JSON object", "grant")
        grant_id = data.get("grant_id")
        if not _is_name(grant_id):
            raise _invalid("grant_id must be a non-empty string", "grant_id")
        raw_streams = data.get("streams")
        if not isinstance(raw_streams, list):
            raise _invalid("grant streams must be a list", "streams")
        streams = tuple(
            StreamGrant.from_dict(item, f"streams[{i}]") for i, item in enumerate(raw_streams)
        )
        status = data.get("status")
        if status is not None and not isinstance(status, str):
            raise _invalid("grant status must be a string", "status")
        expires_at = data.get("expires_at")
        if expires_at is not None and normalize_instant(expires_at) is None:
            raise _invalid("expires_at must be an ISO-8601 date-time", "expires_at")
        return cls(grant_id, streams, expires_at, status)

    def to_dict(self) -> dict[str, Any]:
        """The grant's JSON (docs/contract.md §2), which `from_dict` reads back to an equal
        grant: what the store keeps of a grant (`Store.add_grant`)."""
        out: dict[str, Any] = {
            "grant_id": self.grant_id,
            "streams": [stream.to_dict() for stream in self.streams],
        }
        if self.expires_at is not None:
            out["expires_at"] = normalize_instant(self.expires_at.isoformat())
        if self.status is not None:
            out["status"] = self.status
        return out

    @classmethod
    def owner(cls, connection_id: str, *stream_names: str) -> Grant:
        """An all-fields grant over the named streams of one connection (the data's owner)."""
        return cls.from_dict(
            {
                "grant_id": f"owner:{connection_id}",
                "streams": [{"name": s, "instance_ids": [connection_id]} for s in stream_names],
            }
        )

    def ensure_usable(self, now: datetime | None = None) -> None:
        if self.status is not None and self.status not in _USABLE_STATUSES:
            if self.status == "expired":
                raise Forbidden("grant_expired", f"grant {self.grant_id!r} has expired")
            raise Forbidden(
                "grant_revoked", f"grant {self.grant_id!r} is not active (status {self.status!r})"
            )
        if self.expires_at is not None and self.expires_at <= (now or datetime.now(UTC)):
            raise Forbidden("grant_expired", f"grant {self.grant_id!r} has expired")

    def stream(self, name: str) -> StreamGrant:
        for stream_grant in self.streams:
            if stream_grant.name == name:
                return stream_grant
        raise Forbidden(
            "grant_stream_not_allowed",
            f"the grant does not cover stream {name!r}",
            param="stream",
        )

    def covers(self, stream: str, connection_id: str) -> bool:
        """Whether the grant has a stream grant for `stream` that covers `connection_id`."""
        for stream_grant in self.streams:
            if stream_grant.name == stream:
                return stream_grant.covers_connection(connection_id)
        return False

    def fingerprint(self, stream: str) -> bytes:
        """Binds cursors to this grant's identity and every term of its stream grant
        (docs/contract.md §4):
        a grant narrowed in any term, however constructed, has another fingerprint. Expiry and
        status are not bound: every read checks them anyway. Computed once per stream."""
        found = self._fingerprints.get(stream)
        if found is None:
            terms = self.stream(stream).canonical
            found = hashlib.sha256(f"{self.grant_id}\x00{terms}".encode()).digest()[:16]
            self._fingerprints[stream] = found
        return found


def as_grant(value: object) -> Grant:
    """The grant a store method was given: a `Grant`, or its JSON (a mapping, read with
    `Grant.from_dict`); anything else is `invalid_grant`."""
    if isinstance(value, Grant):
        return value
    if isinstance(value, Mapping):
        return Grant.from_dict(value)
    raise _invalid(f"grant must be a Grant or its JSON object, not {type(value).__name__}", "grant")
