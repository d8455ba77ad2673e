"""PDPP grants as validated values (§2 of the contract). Pure: no I/O.

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
from typing import TypeGuard

from .errors import BadRequest, Forbidden
from .identity import is_unicode

__all__ = ["Grant", "StreamGrant", "TimeConstraint", "normalize_instant"]

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


@dataclass(frozen=True, slots=True)
class TimeConstraint:
    field: str
    since: str | None = None
    until: str | None = None

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


@dataclass(frozen=True, slots=True)
class StreamGrant:
    name: str
    instance_ids: tuple[str, ...] | None = None
    fields: frozenset[str] | None = None
    time_constraint: TimeConstraint | None = None
    resources: frozenset[str] | None = None
    canonical: str = field(default="", compare=False, repr=False)

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
        canonical = json.dumps(
            {
                "name": name,
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
        return cls(
            name=name,
            instance_ids=instance_ids,
            fields=None if fields is None else frozenset(fields),
            time_constraint=time_constraint,
            resources=None if resources is None else frozenset(resources),
            canonical=canonical,
        )

    def covers_connection(self, connection_id: str) -> bool:
        return self.instance_ids is None or connection_id in self.instance_ids

    def allows_field(self, path: str) -> bool:
        return self.fields is None or path in self.fields


@dataclass(frozen=True, slots=True)
class Grant:
    grant_id: str
    streams: tuple[StreamGrant, ...]
    expires_at: datetime | None = None
    status: str | None = None

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
        names = [s.name for s in streams]
        for name in names:
            if names.count(name) > 1:
                raise _invalid(f"stream {name!r} appears more than once in the grant", "streams")
        status = data.get("status")
        if status is not None and not isinstance(status, str):
            raise _invalid("grant status must be a string", "status")
        expires_at = None
        if data.get("expires_at") is not None:
            instant = normalize_instant(data["expires_at"])
            if instant is None:
                raise _invalid("expires_at must be an ISO-8601 date-time", "expires_at")
            expires_at = datetime.fromisoformat(instant)
        return cls(grant_id, streams, expires_at, status)

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
        moment = now or datetime.now(UTC)
        if self.expires_at is not None and self.expires_at <= moment:
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

    def fingerprint(self, stream: str) -> bytes:
        """Binds cursors to this grant's identity and its terms for one stream."""
        terms = self.stream(stream).canonical
        return hashlib.sha256(f"{self.grant_id}\x00{terms}".encode()).digest()[:16]
