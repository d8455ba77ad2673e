"""P0 gate, proof 1: no read hands Python, a result, an error or a log a byte the grant does not
authorize (docs/contract.md §2 "Grants", §5 "Projection, previews and binary data", §7
"Errors"), on every backend and front.

The dataset (`DATASET`, built here, deterministic) gives everything a grant can exclude a canary
of its own, a unique token such as ``cAnARy0042xT`` written in mixed case and repeated every few
hundred code points through long text (so any leaked slice of more than a few hundred code points
holds a whole canary): fields of visible records (granted or not; text, JSON, field *names*),
whole streams, records of another connection, records outside `resources`, records before
`since`, at or after `until`, or whose time value is missing, null, numeric, malformed or empty,
soft-deleted records, binary-only fields (base64, NUL strings: never in a field read, contract §5,
even when granted; the store keeps them as blobs too, so a NUL string's bytes are readable through
the blob reads exactly when its field is), and blobs (canary bytes inside, canary MIME type)
referenced only by an ungranted field, an invisible record, another connection, a text mention, or
nothing.

Rules:
1. What a grant authorizes is computed by the `authorized` oracle below: a direct reading of
   contract §2 and §5 over the dataset's own description (including an explicit table of each time
   value's instant), never by asking the library.
2. `check` runs one operation under `BoundaryAudit` and pytest's log capture (every logger at
   DEBUG, SQLAlchemy's statement and row logging included), then asserts, in this order:
   a. no unauthorized canary is in any cell the database returned, or in the result;
   b. none is in the error raised (message, `to_dict()`, traceback) or in the logs, apart from
      canaries the request itself carried (a field name, a needle, the grant's own lists);
   c. the outcome is the oracle's: the exact error code, or a result equal to the Python slice,
      record projection or blob bytes the oracle computes;
   d. every canary the oracle's expected output holds did cross the boundary (so the check can
      fail in both directions).
   Leaks are reported first and as "unauthorized canary", so `test_gate_bites` can tell a leak
   from any other failure.
3. The hypothesis test draws a grant and a few operations per example over every public read
   (offset, match and cursor windows, records, field descriptions, both resource URIs, blob
   metadata and ranges), including requests that must fail and cursors minted under other
   grants or for other fields; the dataset is loaded once per test function.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import random
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal, TypeAlias

import aiosqlite
import pytest
from _data import MAILBOX, MIXED_ALPHABET, OTHER_MAILBOX, canonical, manifest
from _fronts import StoreFront
from audit import BoundaryAudit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdpp_store import FieldWindowRef, Grant, RecordRef, StoreError
from pdpp_store._runtime.audit import AsyncAuditWriter, SyncAuditWriter

# ================================================================ the dataset

A, B, GHOST = MAILBOX, OTHER_MAILBOX, "cin_ghost"
MB, AT, MS = "message_bodies", "attachments", "messages"
STREAMS = (MB, AT, MS)
BOGUS_STREAM = "bogus_stream"
CONSENT = {MB: "message_received_at", AT: "message_received_at", MS: "received_at"}
PREVIEW_CHARS = 1024
MAX_LIMIT = 16384
CLAMPED = {"code": "limit_clamped", "param": "limit_chars"}
OCTET_STREAM = "application/octet-stream"

Key: TypeAlias = tuple[str, str, str]
"""A record: (connection, stream, record id)."""


def _utc(year: int, month: int, day: int, *time: int) -> datetime:
    hour, minute, second, micro = (*time, 0, 0, 0, 0)[:4]
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


_MISSING = object()
TIMES: dict[str, tuple[object, datetime | None]] = {
    # name: (the stored value, the instant contract §2 gives it: None fails closed)
    "t_before": ("2025-12-31T23:59:59Z", _utc(2025, 12, 31, 23, 59, 59)),
    "t_since": ("2026-01-01T00:00:00Z", _utc(2026, 1, 1)),
    "t_since_tz": ("2026-01-01T01:00:00+01:00", _utc(2026, 1, 1)),
    "t_mid": ("2026-02-15T12:30:00Z", _utc(2026, 2, 15, 12, 30)),
    "t_mid_after": ("2026-02-15T12:30:00.000001Z", _utc(2026, 2, 15, 12, 30, 0, 1)),
    "t_last": ("2026-02-28T23:59:59.999999Z", _utc(2026, 2, 28, 23, 59, 59, 999999)),
    "t_until": ("2026-03-01T00:00:00Z", _utc(2026, 3, 1)),
    "t_date": ("2026-06-01", _utc(2026, 6, 1)),  # a date: no bound lies within a day of it
    "t_naive": ("2026-04-10T08:00:00", _utc(2026, 4, 10, 8)),  # no offset: likewise
    "missing": (_MISSING, None),
    "null": (None, None),
    "number": (1767225600, None),
    "malformed": ("2026-13-45T99:00:00Z", None),
    "words": ("yesterday", None),
    "empty": ("", None),
}
BOUNDS: tuple[tuple[str, datetime], ...] = (
    ("2020-01-01", _utc(2020, 1, 1)),
    ("2026-01-01T00:00:00Z", _utc(2026, 1, 1)),
    ("2026-02-15T13:30:00+01:00", _utc(2026, 2, 15, 12, 30)),
    ("2026-03-01T00:00:00Z", _utc(2026, 3, 1)),
    ("2027-01-01T00:00:00Z", _utc(2027, 1, 1)),
)
BOUND_INSTANTS = dict(BOUNDS)
NOT_A_TIME_FIELD = {MB: "charset", AT: "filename", MS: "subject"}
"""Fields a time constraint may name whose values are never ISO-8601 (so nothing is visible)."""

SecretKind = Literal["text", "name", "binary", "blob", "digest"]


@dataclass(frozen=True, slots=True)
class Secret:
    """Where a canary lives. `text`: a text-like field's value; `name`: a field's name;
    `binary`: a binary-only field's value (never in a field read, contract §5; readable as blob
    bytes when the store keeps it as blob `blob`); `blob`: a blob's bytes or MIME type; `digest`:
    the hex SHA-256 of a field's value (its `digest`, readable when the field is)."""

    canary: str
    kind: SecretKind
    record: Key | None = None
    field: str | None = None
    blob: str | None = None

    def where(self) -> str:
        if self.blob is not None:
            return f"{self.canary} ({self.kind} of blob {self.blob!r})"
        return f"{self.canary} ({self.kind} of {self.record} field {self.field!r})"


@dataclass(frozen=True, slots=True)
class Blob:
    key: str
    data: bytes
    mime_type: str
    derived: bool = False
    """Stored by the store itself from a binary-only string (decoded base64, or the UTF-8 of a
    NUL string), not by `put_blob`."""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blob_id(self) -> str:
        return f"blob_sha256_{self.sha256}"

    def as_ref(self) -> dict[str, Any]:
        return {
            "blob_id": self.blob_id,
            "mime_type": self.mime_type,
            "size_bytes": len(self.data),
            "sha256": self.sha256,
        }


@dataclass(frozen=True, slots=True)
class Rec:
    connection: str
    stream: str
    record_id: str
    data: Mapping[str, Any]
    instant: datetime | None
    binary: frozenset[str] = frozenset()
    blobs: Mapping[str, str] = field(default_factory=dict)
    deleted: bool = False

    @property
    def key(self) -> Key:
        return (self.connection, self.stream, self.record_id)

    def text(self, path: str) -> str:
        """What a window of a text-like field is cut from: the string, or canonical JSON."""
        value = self.data[path]
        return value if isinstance(value, str) else canonical(value)


@dataclass(frozen=True, slots=True)
class Dataset:
    records: Mapping[Key, Rec]
    blobs: Mapping[str, Blob]
    secrets: tuple[Secret, ...]

    @property
    def canaries(self) -> dict[str, Secret]:
        return {secret.canary: secret for secret in self.secrets}

    def fields_of(self, stream: str) -> list[str]:
        names = {path for rec in self.records.values() if rec.stream == stream for path in rec.data}
        return sorted(names)

    def ids_of(self, stream: str) -> list[str]:
        return sorted({rec.record_id for rec in self.records.values() if rec.stream == stream})


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.secrets: list[Secret] = []
        self.records: dict[Key, Rec] = {}
        self.blobs: dict[str, Blob] = {}

    def token(self, kind: SecretKind) -> str:
        """A fresh canary: fixed width, so none is part of another; its letters in mixed case."""
        word = f"canary{len(self.secrets):04d}x{kind[0]}"
        return "".join(c.upper() if self.rng.random() < 0.5 else c for c in word)

    def canary(self, kind: SecretKind, **where: Any) -> str:
        token = self.token(kind)
        self.secrets.append(Secret(token, kind, **where))
        return token

    def filler(self, size: int) -> str:
        return "".join(self.rng.choice(MIXED_ALPHABET) for _ in range(size))

    def short(self, canary: str) -> str:
        return f"{self.filler(6)} {canary} {self.filler(6)}"

    def long(self, canary: str, size: int, anchor: int) -> str:
        """`size` code points of mixed text with `canary` every 90..260 code points, one of them
        at `anchor` (1019: across the first chunk boundary)."""
        chars = list(self.filler(size))
        step = self.rng.randint(90, 260)
        for position in range(anchor % step, size - len(canary), step):
            chars[position : position + len(canary)] = canary
        return "".join(chars)

    def blob(self, key: str) -> Blob:
        mime = f"application/x-{self.canary('blob', blob=key)}"
        data_canary = self.canary("blob", blob=key).encode()
        data = b"".join(
            b"%PDF-" + data_canary + bytes([self.rng.randrange(256) for _ in range(80)])
            for _ in range(30)
        )
        self.blobs[key] = Blob(key, data, mime)
        return self.blobs[key]

    def add(
        self,
        key: Key,
        time: str,
        data: dict[str, Any],
        *,
        binary: Iterable[str] = (),
        blobs: Mapping[str, str] | None = None,
        deleted: bool = False,
    ) -> None:
        value, instant = TIMES[time]
        if value is not _MISSING:
            data[CONSENT[key[1]]] = value
        rec = Rec(*key, data, instant, frozenset(binary), dict(blobs or {}), deleted=deleted)
        self.records[key] = rec
        # A field's digest is as private as its size: readable exactly when the field is. Only
        # fields holding a canary are unique, so only their digests can serve as canaries.
        holding = {
            s.field
            for s in self.secrets
            if s.record == key and s.kind != "name" and s.field is not None
        }
        for path in sorted(holding):
            digest = hashlib.sha256(rec.text(path).encode()).hexdigest()
            self.secrets.append(Secret(digest, "digest", record=key, field=path))

    def body(self, key: Key, time: str, *, binary: bool = False, **extra: Any) -> None:
        def text(path: str) -> str:
            return self.canary("text", record=key, field=path)

        data: dict[str, Any] = {
            "id": key[2],
            "message_id": self.short(text("message_id")),
            "body_text": self.long(text("body_text"), 2600 + self.rng.randrange(300), 1019),
            "body_html": self.long(text("body_html"), 480, self.rng.randrange(480)),
            "charset": self.short(text("charset")),
            "content_languages": ["en", text("content_languages"), "fr"],
        }
        token = self.token("name")
        name = f"x_{token}"  # a field whose very name is a secret
        self.secrets.append(Secret(token, "name", record=key, field=name))
        data[name] = self.short(text(name))
        blobs = {}
        if binary:
            # Binary-only strings are kept as blobs too: the NUL string's UTF-8 (canary and
            # all) is readable as blob bytes through the field; the base64 text's canary is in
            # no blob (its decoded bytes are other bytes), so it is never readable at all.
            core = "Zm9vYmFy+/9A" * 6
            data["raw_b64"] = core + self.canary("binary", record=key, field="raw_b64") + core
            nul_key = f"{'/'.join(key)}#nul_note"
            data["nul_note"] = "nul\x00 " + self.short(
                self.canary("binary", record=key, field="nul_note", blob=nul_key)
            )
            for path, blob_key, payload in (
                ("raw_b64", f"{'/'.join(key)}#raw_b64", base64.b64decode(data["raw_b64"])),
                ("nul_note", nul_key, data["nul_note"].encode()),
            ):
                self.blobs[blob_key] = Blob(blob_key, payload, OCTET_STREAM, derived=True)
                blobs[path] = blob_key
        for path, blob in extra.items():
            data[path] = blob.as_ref()
            blobs[path] = blob.key
        kinds = ("raw_b64", "nul_note", *extra) if binary else tuple(extra)
        self.add(key, time, data, binary=kinds, blobs=blobs)

    def attachment(
        self, key: Key, time: str, blob: Blob | None, *, deleted: bool = False, note: str = ""
    ) -> None:
        data: dict[str, Any] = {
            "id": key[2],
            "message_id": self.short(self.canary("text", record=key, field="message_id")),
            "filename": self.short(self.canary("text", record=key, field="filename")) + ".pdf",
            "part_index": "1",
            "hydration_status": "hydrated",
            "blob_ref": blob.as_ref() if blob else None,
        }
        if note:
            data["note"] = note
        self.add(
            key,
            time,
            data,
            binary=("blob_ref",) if blob else (),
            blobs={"blob_ref": blob.key} if blob else {},
            deleted=deleted,
        )

    def message(self, key: Key, time: str) -> None:
        data = {
            "id": key[2],
            "thread_id": self.short(self.canary("text", record=key, field="thread_id")),
            "subject": self.short(self.canary("text", record=key, field="subject")),
            "snippet": self.long(self.canary("text", record=key, field="snippet"), 1500, 700),
        }
        self.add(key, time, data)


def build_dataset(seed: int = 20260301) -> Dataset:
    build = _Builder(seed)
    blobs = {
        key: build.blob(key)
        for key in ("shown", "late", "deleted", "other", "thumb", "badtime", "text", "orphan")
    }
    for number, time in enumerate(TIMES):
        key = (A, MB, f"b{number:02d}")
        if number == 3:
            build.body(key, time, binary=True, thumb_ref=blobs["thumb"])
        else:
            build.body(key, time, binary=number == 1)
    build.body((A, MB, "bdel"), "t_mid")
    build.body((B, MB, "b03"), "t_mid", binary=True)
    build.body((B, MB, "b01"), "t_since")
    build.body((B, MB, "bB1"), "words")
    build.attachment((A, AT, "a_in"), "t_mid", blobs["shown"])
    build.attachment((A, AT, "a_late"), "t_date", blobs["late"])
    build.attachment((A, AT, "a_del"), "t_mid", blobs["deleted"])
    build.attachment((A, AT, "a_badtime"), "words", blobs["badtime"])
    build.attachment((A, AT, "a_text"), "t_mid", None, note=blobs["text"].blob_id)
    build.attachment((B, AT, "a_in"), "t_mid", blobs["other"])
    build.message((A, MS, "m1"), "t_mid")
    build.message((A, MS, "m2"), "t_before")
    build.message((B, MS, "m1"), "t_mid")
    records = dict(build.records)
    for deleted in ((A, MB, "bdel"), (A, AT, "a_del")):
        rec = records[deleted]
        records[deleted] = Rec(*rec.key, rec.data, rec.instant, rec.binary, rec.blobs, deleted=True)
    return Dataset(records, build.blobs, tuple(build.secrets))


DATASET = build_dataset()


def load(store: StoreFront, ds: Dataset = DATASET) -> None:
    """Ingest `ds`; check that what the store made of it is what the oracle assumes."""
    gmail = manifest("gmail")
    store.register_manifest(gmail)
    for connection_id in (A, B):
        store.add_connection(connection_id, gmail["connector_id"])
    for blob in ds.blobs.values():
        if not blob.derived:
            assert store.put_blob(blob.data, blob.mime_type).blob_id == blob.blob_id
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in ds.records.values():
        groups.setdefault((rec.connection, rec.stream), []).append(dict(rec.data))
    for (connection_id, stream), items in groups.items():
        store.upsert_records(connection_id, stream, items)
    for rec in ds.records.values():
        if rec.deleted:
            store.delete_record(*rec.key)
    owner = Grant.from_dict(OWNER)
    for rec in ds.records.values():
        if not rec.deleted:
            for path in rec.data:
                info = store.describe_field(owner, RecordRef(*rec.key), path)
                assert info.text_like == (path not in rec.binary), (rec.key, path)
                if path in rec.blobs:
                    blob = ds.blobs[rec.blobs[path]]
                    assert info.blob_id == blob.blob_id, (rec.key, path)
                    assert store.blob_info(owner, blob.blob_id).size_bytes == len(blob.data)


# ================================================================ the oracle (contract §2, §5)

GrantDict: TypeAlias = dict[str, Any]
StreamGrantDict: TypeAlias = dict[str, Any]
USABLE_STATUSES = (None, "active")
PAST, FUTURE = "2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z"
OWNER: GrantDict = {"grant_id": "g-owner", "streams": [{"name": s} for s in STREAMS]}


def refusal(grant: GrantDict) -> frozenset[str]:
    """The codes an unusable grant may be refused with (both, when it is both revoked and past
    its expiry: contract §2 does not order them); empty when the grant is usable."""
    codes = set()
    if grant.get("status") not in USABLE_STATUSES:
        codes.add("grant_expired" if grant["status"] == "expired" else "grant_revoked")
    if grant.get("expires_at") == PAST:
        codes.add("grant_expired")
    return frozenset(codes)


def stream_grant(grant: GrantDict, stream: str) -> StreamGrantDict | None:
    return next((s for s in grant["streams"] if s["name"] == stream), None)


def covers(sg: StreamGrantDict, connection_id: str) -> bool:
    ids = sg.get("instance_ids")
    return ids is None or connection_id in ids


def allows(sg: StreamGrantDict, path: str) -> bool:
    granted = sg.get("fields")
    return granted is None or path in granted


def visible(sg: StreamGrantDict, rec: Rec) -> bool:
    """Contract §2: not deleted, connection in `instance_ids`, id in `resources`, and the time value
    of the constraint's field an ISO-8601 instant in [since, until); anything else fails closed."""
    if rec.deleted or not covers(sg, rec.connection):
        return False
    resources = sg.get("resources")
    if resources is not None and rec.record_id not in resources:
        return False
    constraint = sg.get("time_constraint")
    if constraint is None:
        return True
    instant = rec.instant if constraint["field"] == CONSENT[rec.stream] else None
    if instant is None:
        return False
    since, until = constraint.get("since"), constraint.get("until")
    if since is not None and instant < BOUND_INSTANTS[since]:
        return False
    return until is None or instant < BOUND_INSTANTS[until]


def readable(grant: GrantDict, rec: Rec, path: str) -> bool:
    sg = stream_grant(grant, rec.stream)
    return not refusal(grant) and sg is not None and visible(sg, rec) and allows(sg, path)


def blob_visible(grant: GrantDict, ds: Dataset, blob_key: str) -> bool:
    """Contract §5: through a visible record whose granted field references the blob."""
    return any(
        readable(grant, rec, path)
        for rec in ds.records.values()
        for path, key in rec.blobs.items()
        if key == blob_key
    )


def authorized(
    grant: GrantDict, ds: Dataset = DATASET, *, through_blobs: bool = False
) -> frozenset[str]:
    """The canaries `grant` lets a reader see. Binary-only values never through a field read
    (contract §5: metadata only); through a blob read (`through_blobs`) when the store keeps them as
    a blob that the grant reaches."""
    allowed = set()
    for secret in ds.secrets:
        if secret.kind in ("blob", "binary") and secret.blob is not None:
            reaches = secret.kind == "blob" or through_blobs
            if reaches and blob_visible(grant, ds, secret.blob):
                allowed.add(secret.canary)
        elif secret.kind != "binary":
            assert secret.record is not None
            assert secret.field is not None
            if readable(grant, ds.records[secret.record], secret.field):
                allowed.add(secret.canary)
    return frozenset(allowed)


def forbidden(grant: GrantDict, ds: Dataset = DATASET, *, through_blobs: bool = False) -> list[str]:
    allowed = authorized(grant, ds, through_blobs=through_blobs)
    return [secret.canary for secret in ds.secrets if secret.canary not in allowed]


@cache
def fold(text: str) -> str:
    """Contract §3's documented fold, per code point (the test's own copy of the definition)."""
    out = []
    for char in text:
        folded = char.casefold()
        if len(folded) != 1:
            folded = char.lower()
            if len(folded) != 1:
                folded = char
        out.append(folded)
    return "".join(out)


# ================================================================ operations


@dataclass(frozen=True, slots=True)
class CursorOrigin:
    """Where a cursor came from: the grant it was minted under, its record and field."""

    grant: GrantDict
    target: Key
    field: str
    offset: int
    limit: int


Form = Literal["ref", "id", "legacy", "unscoped", "uri"]


def _record_arg(target: Key, form: Form) -> tuple[Any, dict[str, Any]]:
    connection_id, stream, record_id = target
    if form == "ref":
        return RecordRef(*target), {}
    if form == "id":
        return f"{connection_id}/{stream}:{record_id}", {}
    if form == "legacy":
        return f"{stream}:{record_id}", {"connection_id": connection_id}
    return f"{stream}:{record_id}", {}


@dataclass(frozen=True, slots=True)
class Window:
    target: Key
    field: str
    selector: Mapping[str, Any]
    form: Form = "ref"
    bad_selector: bool = False
    origin: CursorOrigin | None = None

    def run(self, store: StoreFront, grant: Grant) -> Any:
        if self.form == "uri":
            ref = FieldWindowRef(RecordRef(*self.target), self.field, **self.selector)
            return store.read_resource(grant, ref.uri)
        record, extra = _record_arg(self.target, self.form)
        return store.read_field_window(grant, record, self.field, **extra, **self.selector)

    def sent(self) -> str:
        return f"{self.target}\x00{self.field}\x00{self.selector.get('q', '')}"


@dataclass(frozen=True, slots=True)
class Record:
    target: Key
    form: Form = "ref"

    def run(self, store: StoreFront, grant: Grant) -> Any:
        if self.form == "uri":
            return store.read_resource(grant, RecordRef(*self.target).uri)
        record, extra = _record_arg(self.target, self.form)
        return store.read_record(grant, record, **extra)

    def sent(self) -> str:
        return str(self.target)


@dataclass(frozen=True, slots=True)
class Describe:
    target: Key
    field: str
    form: Form = "ref"

    def run(self, store: StoreFront, grant: Grant) -> Any:
        record, extra = _record_arg(self.target, self.form)
        return store.describe_field(grant, record, self.field, **extra)

    def sent(self) -> str:
        return f"{self.target}\x00{self.field}"


@dataclass(frozen=True, slots=True)
class BlobMeta:
    blob_id: str

    def run(self, store: StoreFront, grant: Grant) -> Any:
        return store.blob_info(grant, self.blob_id)

    def sent(self) -> str:
        return self.blob_id


@dataclass(frozen=True, slots=True)
class BlobBytes:
    blob_id: str
    offset: int
    length: int

    def run(self, store: StoreFront, grant: Grant) -> Any:
        return store.read_blob_range(grant, self.blob_id, self.offset, self.length)

    def sent(self) -> str:
        return self.blob_id


Operation: TypeAlias = Window | Record | Describe | BlobMeta | BlobBytes


# ================================================================ expected outcomes


@dataclass(frozen=True, slots=True)
class Expected:
    codes: frozenset[str] = frozenset()
    """Error codes any of which is right; empty: the operation succeeds."""
    verify: Callable[[Any], None] | None = None
    shows: str = ""
    """Text the result holds: every canary in it must have crossed the boundary."""


def _fails(*codes: str) -> Expected:
    return Expected(frozenset(codes))


def _steps_to_connection(
    grant: GrantDict, target: Key, form: Form, bad_selector: bool = False
) -> Expected | tuple[StreamGrantDict, Key]:
    """Contract §7's steps 1 to 5: stream declared, selector, grant usable, stream granted,
    connection."""
    connection_id, stream, record_id = target
    if stream not in STREAMS:
        return _fails("stream_not_declared")
    if bad_selector:
        return _fails("invalid_window")
    if codes := refusal(grant):
        return Expected(codes)
    sg = stream_grant(grant, stream)
    if sg is None:
        return _fails("grant_stream_not_allowed")
    if form == "unscoped":  # the connection comes from the grant: none, several, or one
        ids = sg.get("instance_ids")
        if ids is not None and not ids:
            return _fails("connection_not_found")
        if ids is None or len(ids) != 1:
            return _fails("ambiguous_connection")
        connection_id = ids[0]
    if not covers(sg, connection_id) or connection_id not in (A, B):
        return _fails("connection_not_found")
    return sg, (connection_id, stream, record_id)


def fingerprint(grant: GrantDict, stream: str) -> tuple[Any, ...]:
    """What a cursor binds of a grant (contract §4): its id and its terms for the stream, normalized
    (lists as sets, time bounds as instants); status and expiry are not terms."""
    sg = stream_grant(grant, stream) or {}

    def terms(key: str) -> tuple[str, ...] | None:
        return None if sg.get(key) is None else tuple(sorted(sg[key]))

    constraint = sg.get("time_constraint")
    time = (
        None
        if constraint is None
        else tuple(
            BOUND_INSTANTS.get(constraint.get(end)) if end != "field" else constraint[end]
            for end in ("field", "since", "until")
        )
    )
    return (grant["grant_id"], terms("instance_ids"), terms("fields"), terms("resources"), time)


def _visible_record(ds: Dataset, sg: StreamGrantDict, key: Key) -> Rec | None:
    rec = ds.records.get(key)
    return rec if rec is not None and visible(sg, rec) else None


def expect_window(grant: GrantDict, op: Window, ds: Dataset = DATASET) -> Expected:
    steps = _steps_to_connection(grant, op.target, op.form, op.bad_selector)
    if isinstance(steps, Expected):
        return steps
    sg, key = steps
    if not allows(sg, op.field):
        return _fails("field_not_granted")
    selector = dict(op.selector)
    origin = op.origin
    if "cursor" in selector and not (
        origin is not None
        and fingerprint(origin.grant, key[1]) == fingerprint(grant, key[1])
        and origin.target == key
        and origin.field == op.field
    ):
        return _fails("invalid_cursor")
    rec = _visible_record(ds, sg, key)
    if rec is None:
        return _fails("not_found")
    if op.field not in rec.data:
        return _fails("field_not_found")
    if op.field in rec.binary:
        return _fails("field_not_text")
    text = rec.text(op.field)
    limit = selector.get("limit_chars")
    warnings = [CLAMPED] if limit is not None and limit > MAX_LIMIT else []
    match: tuple[int, int] | None = None
    if "q" in selector:
        q = selector["q"]
        found = fold(text).find(fold(q))
        if found < 0:
            return _fails("query_not_found")
        start = max(0, found - selector.get("before_chars", 2048))
        wanted = (
            limit
            if limit is not None
            else (found - start) + len(q) + selector.get("after_chars", 2048)
        )
        if wanted > MAX_LIMIT:
            warnings = [CLAMPED]
        limit, match = min(wanted, MAX_LIMIT), (found, found + len(q))
    elif "cursor" in selector:
        assert origin is not None
        start, limit = origin.offset, min(limit or origin.limit, MAX_LIMIT)
    else:
        start = min(selector.get("offset_chars", 0), len(text))
        limit = min(limit or 4096, MAX_LIMIT)
    start = min(start, len(text))
    piece = text[start : start + limit]

    def verify(window: Any) -> None:
        got = (
            window.text,
            window.start_chars,
            window.total_chars,
            window.limit_chars,
            (window.match_start_chars, window.match_end_chars) if match else None,
            list(window.warnings),
            (window.connection_id, window.stream, window.record_id, window.field.path),
        )
        assert got == (piece, start, len(text), limit, match, warnings, (*key, op.field))

    return Expected(verify=verify, shows=piece)


def expect_record(grant: GrantDict, op: Record, ds: Dataset = DATASET) -> Expected:
    steps = _steps_to_connection(grant, op.target, op.form)
    if isinstance(steps, Expected):
        return steps
    sg, key = steps
    rec = _visible_record(ds, sg, key)
    if rec is None:
        return _fails("not_found")
    granted = {path for path in rec.data if allows(sg, path)}
    data: dict[str, Any] = {}
    shown = []
    for path in sorted(granted - rec.binary):
        value, text = rec.data[path], rec.text(path)
        shown += [path, text[:PREVIEW_CHARS]]
        if isinstance(value, str):
            data[path] = value[:PREVIEW_CHARS]
        elif len(text) <= PREVIEW_CHARS:
            data[path] = value
    shown += sorted(granted & rec.binary)

    def verify(view: Any) -> None:
        assert {item.info.path for item in view.fields} == granted
        assert view.to_dict()["data"] == data
        assert view.ref == RecordRef(*key)

    return Expected(verify=verify, shows="\x00".join(shown))


def expect_describe(grant: GrantDict, op: Describe, ds: Dataset = DATASET) -> Expected:
    steps = _steps_to_connection(grant, op.target, op.form)
    if isinstance(steps, Expected):
        return steps
    sg, key = steps
    if not allows(sg, op.field):
        return _fails("field_not_granted")
    rec = _visible_record(ds, sg, key)
    if rec is None:
        return _fails("not_found")
    if op.field not in rec.data:
        return _fails("field_not_found")
    text = rec.text(op.field)
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def verify(info: Any) -> None:
        got = (info.path, info.text_like, info.size_chars, info.digest)
        assert got == (op.field, op.field not in rec.binary, len(text), digest)

    return Expected(verify=verify, shows=op.field)


def expect_blob(grant: GrantDict, op: BlobMeta | BlobBytes, ds: Dataset = DATASET) -> Expected:
    if isinstance(op, BlobBytes) and not (op.offset >= 0 and 1 <= op.length <= 1 << 20):
        return _fails("invalid_request")
    if not op.blob_id.startswith("blob_sha256_"):
        return _fails("blob_not_found")
    if codes := refusal(grant):
        return Expected(codes)
    blob = next((b for b in ds.blobs.values() if b.blob_id == op.blob_id), None)
    if blob is None or not blob_visible(grant, ds, blob.key):
        return _fails("blob_not_found")
    meta = (blob.blob_id, blob.sha256, blob.mime_type, len(blob.data))
    if isinstance(op, BlobMeta):

        def verify_meta(info: Any) -> None:
            assert (info.blob_id, info.sha256, info.mime_type, info.size_bytes) == meta

        return Expected(verify=verify_meta, shows=blob.mime_type)
    start = min(op.offset, len(blob.data))
    data = blob.data[start : start + op.length]

    def verify_range(got: Any) -> None:
        assert (got.offset_bytes, got.data) == (start, data)
        assert (got.blob.blob_id, got.blob.mime_type) == meta[0::2]

    return Expected(verify=verify_range, shows=_text(data) + "\x00" + blob.mime_type)


def expect(grant: GrantDict, op: Operation, ds: Dataset = DATASET) -> Expected:
    if isinstance(op, Window):
        return expect_window(grant, op, ds)
    if isinstance(op, Record):
        return expect_record(grant, op, ds)
    if isinstance(op, Describe):
        return expect_describe(grant, op, ds)
    return expect_blob(grant, op, ds)


# ================================================================ the check


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def _crossed_text(rows: Iterable[tuple[object, ...]]) -> str:
    """Every cell that crossed, lower-cased and joined without separators, and then each column
    on its own, joined down the rows: a canary cut across two chunk rows crossed all the same,
    even with the rows' other columns (the field's metadata) between its pieces."""
    rows = list(rows)
    width = max((len(row) for row in rows), default=0)
    by_row = "".join(_text(value) for row in rows for value in row)
    by_column = ("".join(_text(row[i]) for row in rows if i < len(row)) for i in range(width))
    return "\x00".join([by_row, *by_column]).lower()


def _speech(error: StoreError | None, logs: str) -> str:
    """Everything said about the operation besides its result: the error and the logs."""
    said = [logs]
    if error is not None:
        said += [
            str(error),
            repr(error),
            json.dumps(error.to_dict(), default=str, ensure_ascii=False),
            "".join(traceback.format_exception(error)),
        ]
    return "\x00".join(said).lower()


def _where(ds: Dataset, canaries: Iterable[str]) -> str:
    table = ds.canaries
    return "; ".join(table[canary].where() for canary in canaries)


async def _written_and_logged(writer: AsyncAuditWriter) -> None:
    await writer.flush()
    own = writer._engine
    if own is not None:  # one connection: this call runs after the batch's, on its thread
        async with own.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")


def _settle(store: StoreFront) -> None:
    """Let aiosqlite's worker threads finish logging. Each logs the call it ran (its SQL and
    parameters) just after handing back the result, so the last line of one operation can land
    in the next one's capture, where the canaries its request carried look like a leak. A no-op
    call on each kept read connection runs only after those lines (one thread per connection,
    calls in order). The read audit's writer is background work too: the entries of earlier
    operations (under other grants) are written, and its connection's thread has logged them,
    before the next capture starts."""
    wrapped = getattr(store, "wrapped", None)
    writer = getattr(wrapped, "_audit_writer", None)
    if isinstance(writer, AsyncAuditWriter):
        store._loop.run_until_complete(_written_and_logged(writer))  # type: ignore[union-attr]
    elif isinstance(writer, SyncAuditWriter):
        writer.flush()
    readers = getattr(wrapped, "_readers", None)  # the kept connections
    if readers is None:
        return
    for held in list(readers._idle):
        if isinstance(held.driver, aiosqlite.Connection):
            store._loop.run_until_complete(held.driver.execute_fetchall("SELECT 1"))  # type: ignore[union-attr]


def check(
    store: StoreFront,
    grant_dict: GrantDict,
    op: Operation,
    caplog: pytest.LogCaptureFixture,
    ds: Dataset = DATASET,
) -> Any:
    """Run `op` under `grant_dict` and assert Rule 2 of the module; return the result (or the
    `StoreError`)."""
    grant = Grant.from_dict(grant_dict)
    secret = forbidden(grant_dict, ds, through_blobs=isinstance(op, BlobMeta | BlobBytes))
    _settle(store)
    caplog.clear()
    result: Any = None
    error: StoreError | None = None
    with BoundaryAudit(store.engine) as audit:
        try:
            result = op.run(store, grant)
        except StoreError as exc:
            error = exc
    _settle(store)
    what = f"{op!r} under {grant_dict!r}"
    cells = _crossed_text(audit.rows)
    crossed = [canary for canary in secret if canary.lower() in cells]
    assert not crossed, f"unauthorized canary crossed into Python: {_where(ds, crossed)}; {what}"
    returned = (
        repr(result).lower()
        + json.dumps(
            result.to_dict() if hasattr(result, "to_dict") else None, ensure_ascii=False
        ).lower()
    )
    handed = [canary for canary in secret if canary.lower() in returned]
    assert not handed, f"unauthorized canary in the result: {_where(ds, handed)}; {what}"
    sent = (op.sent() + json.dumps(grant_dict)).lower()
    speech = _speech(error, caplog.text)
    said = [c for c in secret if c.lower() in speech and c.lower() not in sent]
    assert not said, f"unauthorized canary in an error or log: {_where(ds, said)}; {what}"

    expected = expect(grant_dict, op, ds)
    if expected.codes:
        assert error is not None, f"expected {set(expected.codes)}, got {result!r}; {what}"
        assert error.code in expected.codes, f"expected {set(expected.codes)}: {error!r}; {what}"
        return error
    assert error is None, f"expected success, got {error!r}; {what}"
    assert expected.verify is not None
    expected.verify(result)
    shows = expected.shows.lower()
    missing = [c for c in ds.canaries if c.lower() in shows and c.lower() not in cells]
    assert not missing, f"authorized canaries did not cross: {_where(ds, missing)}; {what}"
    return result


def check_cursor(
    store: StoreFront,
    grant_dict: GrantDict,
    minted: Window,
    minted_under: GrantDict,
    caplog: pytest.LogCaptureFixture,
    *,
    use: tuple[Key, str] | None = None,
    form: Form = "ref",
    backwards: bool = False,
    limit: int | None = None,
    ds: Dataset = DATASET,
) -> Any:
    """Mint a cursor with `minted` under `minted_under` (checked), then read with it under
    `grant_dict` (checked), on `use` (default: the same record and field)."""
    window = check(store, minted_under, minted, caplog, ds)
    if isinstance(window, StoreError):
        return window
    cursor = window.previous_cursor if backwards else window.next_cursor
    if cursor is None:
        return window
    start = window.previous_offset_chars if backwards else window.next_offset_chars
    origin_key = (window.connection_id, window.stream, window.record_id)
    origin = CursorOrigin(minted_under, origin_key, minted.field, start, window.limit_chars)
    target, path = use or (origin_key, minted.field)
    selector: dict[str, Any] = {"cursor": cursor}
    if limit is not None:
        selector["limit_chars"] = limit
    return check(store, grant_dict, Window(target, path, selector, form, origin=origin), caplog, ds)


def capture_everything(caplog: pytest.LogCaptureFixture) -> None:
    """Every logger at DEBUG, SQLAlchemy's (statements, parameters, rows) and the store's read
    path's (`pdpp_store.sql`: statements, rows) included.

    Call it before the store's first read: SQLAlchemy decides when a connection is made whether
    it logs, and the sync store keeps its read connection between reads."""
    caplog.set_level(logging.DEBUG)
    loggers = ("sqlalchemy", "sqlalchemy.engine", "sqlalchemy.pool", "aiosqlite", "psycopg")
    for name in (*loggers, "pdpp_store.sql"):
        caplog.set_level(logging.DEBUG, logger=name)


# ================================================================ fixed probes


def _sg(name: str, **terms: Any) -> StreamGrantDict:
    return {"name": name, **terms}


def _grant(*streams: StreamGrantDict, grant_id: str = "g-probe", **extra: Any) -> GrantDict:
    return {"grant_id": grant_id, "streams": list(streams), **extra}


def _canary(ds: Dataset, key: Key | None, path: str | None = None, blob: str | None = None) -> str:
    for secret in ds.secrets:
        where = (secret.record, secret.field, secret.blob)
        if where == (key, path, blob) and secret.kind != "digest":
            return secret.canary
    raise LookupError((key, path, blob))


def _name_field(ds: Dataset, key: Key) -> str:
    return next(path for path in ds.records[key].data if path.startswith("x_"))


@dataclass(frozen=True, slots=True)
class Probe:
    grant: GrantDict
    op: Operation
    exposes: tuple[str, ...] = ()
    """Canaries outside the grant that the operation would expose if its check were missing."""


def probes(ds: Dataset = DATASET) -> dict[str, Probe]:
    """One named probe per exclusion (and a few authorized reads), each a fixed operation."""
    b01, b03, b04, bdel = (A, MB, "b01"), (A, MB, "b03"), (A, MB, "b04"), (A, MB, "bdel")
    narrow = _sg(MB, fields=["id", "body_text", "message_received_at"])
    in_window = {"field": CONSENT[MB], "since": BOUNDS[1][0], "until": BOUNDS[3][0]}
    timed = _grant(_sg(MB, time_constraint=in_window))
    attachments_a = _grant(_sg(AT, instance_ids=[A]))
    blob_id = {key: blob.blob_id for key, blob in ds.blobs.items()}

    def nul_blob(key: Key) -> str:
        return blob_id[ds.records[key].blobs["nul_note"]]

    body_canary = _canary(ds, b03, "body_text")
    out: dict[str, Probe] = {
        # authorized reads: the converse (the check sees what is granted)
        "granted-record": Probe(OWNER, Record(b03)),
        "granted-match-across-chunks": Probe(
            OWNER, Window(b03, "body_text", {"q": body_canary.swapcase(), "before_chars": 5})
        ),
        "granted-window-uri": Probe(
            _grant(narrow), Window(b03, "body_text", {"offset_chars": 1000}, "uri")
        ),
        "granted-blob": Probe(attachments_a, BlobBytes(blob_id["shown"], 0, 4096)),
        # fields
        "ungranted-field-window": Probe(
            _grant(narrow),
            Window(b03, "charset", {"limit_chars": 64}),
            (_canary(ds, b03, "charset"),),
        ),
        "ungranted-field-match": Probe(
            _grant(narrow),
            Window(b03, "body_html", {"q": _canary(ds, b03, "body_html")}),
            (_canary(ds, b03, "body_html"),),
        ),
        "ungranted-named-field": Probe(
            _grant(narrow),
            Window(b03, _name_field(ds, b03), {}),
            (_canary(ds, b03, _name_field(ds, b03)),),
        ),
        "projected-record": Probe(_grant(narrow), Record(b03)),
        "binary-field": Probe(OWNER, Window(b03, "raw_b64", {})),
        # streams, connections
        "ungranted-stream": Probe(
            _grant(_sg(MB)), Record((A, MS, "m1")), (_canary(ds, (A, MS, "m1"), "subject"),)
        ),
        "other-connection": Probe(
            _grant(_sg(MB, instance_ids=[A])),
            Record((B, MB, "b03")),
            (_canary(ds, (B, MB, "b03"), "charset"),),
        ),
        "other-connection-unscoped": Probe(
            _grant(_sg(MB, instance_ids=[A])), Record((B, MB, "bB1"), "unscoped")
        ),
        # resources
        "outside-resources-record": Probe(
            _grant(_sg(MB, resources=["b03"])), Record(b04), (_canary(ds, b04, "charset"),)
        ),
        "outside-resources-window": Probe(
            _grant(_sg(MB, resources=["b03"])),
            Window(b04, "body_text", {"offset_chars": 900, "limit_chars": 300}),
            (_canary(ds, b04, "body_text"),),
        ),
        "outside-resources-match": Probe(
            _grant(_sg(MB, resources=["b03"])),
            Window(b04, "body_text", {"q": _canary(ds, b04, "body_text")}),
            (_canary(ds, b04, "body_text"),),
        ),
        "outside-resources-uri": Probe(
            _grant(_sg(MB, resources=["b03"])), Record(b04, "uri"), (_canary(ds, b04, "charset"),)
        ),
        # soft deletion
        "deleted-record": Probe(OWNER, Record(bdel), (_canary(ds, bdel, "charset"),)),
        "deleted-blob": Probe(
            OWNER, BlobMeta(blob_id["deleted"]), (_canary(ds, None, None, "deleted"),)
        ),
        # blobs
        "blob-other-connection": Probe(
            attachments_a,
            BlobBytes(blob_id["other"], 0, 4096),
            (_canary(ds, None, None, "other"),),
        ),
        "blob-of-ungranted-field": Probe(
            _grant(narrow), BlobMeta(blob_id["thumb"]), (_canary(ds, None, None, "thumb"),)
        ),
        "blob-named-in-text": Probe(
            OWNER, BlobBytes(blob_id["text"], 0, 4096), (_canary(ds, None, None, "text"),)
        ),
        "blob-unreferenced": Probe(
            OWNER, BlobMeta(blob_id["orphan"]), (_canary(ds, None, None, "orphan"),)
        ),
        "nul-blob-granted": Probe(OWNER, BlobBytes(nul_blob(b03), 0, 4096)),
        "nul-blob-ungranted-field": Probe(
            _grant(narrow),
            BlobBytes(nul_blob(b03), 0, 4096),
            (_canary(ds, b03, "nul_note", f"{'/'.join(b03)}#nul_note"),),
        ),
        "nul-blob-outside-resources": Probe(
            _grant(_sg(MB, resources=["b03"])),
            BlobBytes(nul_blob(b01), 0, 4096),
            (_canary(ds, b01, "nul_note", f"{'/'.join(b01)}#nul_note"),),
        ),
        "blob-outside-time": Probe(
            _grant(_sg(AT, time_constraint={"field": CONSENT[AT], "since": BOUNDS[0][0]})),
            BlobMeta(blob_id["badtime"]),
            (_canary(ds, None, None, "badtime"),),
        ),
        # grants no longer usable
        "expired-grant": Probe(_grant(_sg(MB), expires_at=PAST), Record(b03)),
        "revoked-grant": Probe(_grant(_sg(MB), status="revoked"), BlobMeta(blob_id["thumb"])),
    }
    for time in ("t_before", "t_until", "missing", "null", "number", "malformed", "words", "empty"):
        key = (A, MB, f"b{list(TIMES).index(time):02d}")
        out[f"time-{time}"] = Probe(timed, Record(key), (_canary(ds, key, "charset"),))
    return out


def check_probe(
    store: StoreFront, probe: Probe, caplog: pytest.LogCaptureFixture, ds: Dataset = DATASET
) -> Any:
    """A probe is meaningful (what it exposes is outside its grant) and passes `check`."""
    through_blobs = isinstance(probe.op, BlobMeta | BlobBytes)
    outside = set(forbidden(probe.grant, ds, through_blobs=through_blobs))
    assert set(probe.exposes) <= outside, "a probe must aim at canaries its grant excludes"
    return check(store, probe.grant, probe.op, caplog, ds)


# ================================================================ tests


@pytest.fixture
def loaded(store: StoreFront, caplog: pytest.LogCaptureFixture) -> StoreFront:
    capture_everything(caplog)  # before the first read: see `capture_everything`
    load(store)
    return store


def test_the_oracle_excludes_what_section_2_excludes() -> None:
    """The oracle itself, on hand-picked cases (no database)."""
    ds = DATASET
    everything = authorized(OWNER, ds)
    kinds = {secret.kind for secret in ds.secrets if secret.canary not in everything}
    # deleted records, binary fields, blobs
    assert kinds == {"binary", "text", "name", "blob", "digest"}
    window = {"field": CONSENT[MB], "since": BOUNDS[1][0], "until": BOUNDS[3][0]}
    timed = _grant(_sg(MB, time_constraint=window))
    seen = {
        time: readable(timed, ds.records[(A, MB, f"b{n:02d}")], "charset")
        for n, time in enumerate(TIMES)
    }
    assert {time for time, shown in seen.items() if shown} == {
        "t_since",
        "t_since_tz",
        "t_mid",
        "t_mid_after",
        "t_last",
    }
    assert authorized(_grant(_sg(MB), status="revoked"), ds) == frozenset()
    assert not blob_visible(_grant(_sg(MB, fields=["id"])), ds, "thumb")
    assert blob_visible(_grant(_sg(MB, fields=["thumb_ref"])), ds, "thumb")


def test_every_exclusion_holds_on_fixed_probes(
    loaded: StoreFront, caplog: pytest.LogCaptureFixture
) -> None:
    for probe in probes().values():
        check_probe(loaded, probe, caplog)
    # Cursors: minted under the owner, replayed under a grant that excludes the record; minted
    # for a granted field, replayed on an ungranted one; and a genuine next page.
    b03, b04 = (A, MB, "b03"), (A, MB, "b04")
    narrow = _grant(_sg(MB, resources=["b03"], fields=["body_text"]))
    first = Window(b04, "body_text", {"limit_chars": 500})
    error = check_cursor(loaded, narrow, first, OWNER, caplog)
    assert error.code == "invalid_cursor"
    own = Window(b03, "body_text", {"limit_chars": 500})
    error = check_cursor(loaded, narrow, own, narrow, caplog, use=(b04, "body_text"))
    assert error.code == "invalid_cursor"
    page = check_cursor(loaded, narrow, own, narrow, caplog, form="uri", limit=700)
    assert page.start_chars == 500
    # The log check is not vacuous: the read path's statement and row logging is captured.
    assert "SELECT" in caplog.text
    assert "Row (" in caplog.text
    #  The grant a cursor binds is its id and terms (contract §4): the same ones in another object
    # (with a status) carry the cursor; the same id with other terms does not.
    same = check_cursor(loaded, narrow, own, {**narrow, "status": "active"}, caplog)
    assert same.start_chars == 500
    wider = _grant(_sg(MB, resources=["b03", "b04"], fields=["body_text"]))
    error = check_cursor(loaded, narrow, own, wider, caplog)
    assert error.code == "invalid_cursor"


MAX_EXAMPLES = int(os.environ.get("PDPP_GATE_EXAMPLES", "200"))
"""Examples per front: the four fronts together take well under a minute on two loaded cores.
Set `PDPP_GATE_EXAMPLES` for a deeper run."""


def _case_mix(text: str, mask: int) -> str:
    return "".join(c.swapcase() if mask >> (i % 60) & 1 else c for i, c in enumerate(text))


@st.composite
def stream_grants(draw: st.DrawFn, name: str, ds: Dataset = DATASET) -> StreamGrantDict:
    sg: StreamGrantDict = {"name": name}
    if draw(st.integers(0, 2)) == 0:
        connections = st.sampled_from([A, A, B, GHOST])
        sg["instance_ids"] = draw(st.lists(connections, unique=True, max_size=3))
    if draw(st.booleans()):
        own = [*ds.fields_of(name), "no_such_field"]
        sg["fields"] = draw(st.lists(st.sampled_from(own), unique=True, max_size=8))
    if draw(st.integers(0, 2)) == 0:
        ids = [*ds.ids_of(name), "nope"]
        sg["resources"] = draw(st.lists(st.sampled_from(ids), unique=True, max_size=6))
    if draw(st.integers(0, 2)) == 0:
        bound = st.none() | st.sampled_from([text for text, _ in BOUNDS])
        constraint = {
            "field": draw(st.sampled_from([CONSENT[name]] * 4 + [NOT_A_TIME_FIELD[name]]))
        }
        for end in ("since", "until"):
            if (value := draw(bound)) is not None:
                constraint[end] = value
        sg["time_constraint"] = constraint
    return sg


@st.composite
def grants(draw: st.DrawFn, grant_id: str) -> GrantDict:
    names = draw(st.lists(st.sampled_from(STREAMS), unique=True, min_size=1))
    grant: GrantDict = {"grant_id": grant_id, "streams": [draw(stream_grants(n)) for n in names]}
    status = draw(st.sampled_from([None] * 16 + ["active", "revoked", "expired"]))
    if status is not None:
        grant["status"] = status
    expires = draw(st.sampled_from([None] * 16 + [FUTURE, FUTURE, PAST]))
    if expires is not None:
        grant["expires_at"] = expires
    return grant


TARGET_KEYS: list[Key] = [
    *DATASET.records,
    (A, MB, "nope"),
    (GHOST, MB, "b03"),
    (A, BOGUS_STREAM, "b03"),
]


@st.composite
def targets(draw: st.DrawFn, grant: GrantDict | None = None) -> tuple[Key, str]:
    """A record and a field: mostly a real record of a stream the grant covers, and mostly one
    of its own fields the grant covers, so that reads succeed as often as they fail."""
    granted = [] if grant is None else [sg["name"] for sg in grant["streams"]]
    likely = [key for key in DATASET.records if key[1] in granted]
    pool = likely if likely and draw(st.integers(0, 3)) > 0 else TARGET_KEYS
    key = draw(st.sampled_from(pool))
    rec = DATASET.records.get(key)
    own = list(rec.data) if rec else ["body_text"]
    sg = stream_grant(grant, key[1]) if grant is not None else None
    allowed = [path for path in own if sg is None or allows(sg, path)]
    choice = draw(st.integers(0, 9))
    if choice < 5 and allowed:
        return key, draw(st.sampled_from(allowed))
    if choice < 8:
        return key, draw(st.sampled_from(own))
    stream_fields = DATASET.fields_of(key[1]) if key[1] in STREAMS else ["body_text"]
    return key, draw(st.sampled_from([*stream_fields, "no_such_field"]))


@st.composite
def needles(draw: st.DrawFn, key: Key, path: str) -> str:
    """Mostly something the field holds (a slice of it, its own canary in another case), else a
    canary of anything, part of one, or text found nowhere."""
    rec = DATASET.records.get(key)
    readable_text = rec is not None and path in rec.data and path not in rec.binary
    choice = draw(st.integers(0, 6))
    if choice <= 1 and rec is not None and readable_text:
        text = rec.text(path)
        start = draw(st.integers(0, max(0, len(text) - 1)))
        return text[start : start + draw(st.integers(1, 40))] or "x"
    own = [s.canary for s in DATASET.secrets if s.record == key and s.field == path]
    if choice == 2 and own:
        return _case_mix(own[0], draw(st.integers(0, 2**60)))
    if choice == 3:
        return draw(st.sampled_from(["é", "the", "ΣΑ", "😀", "zzzz-not-there"]))
    canary = draw(st.sampled_from(list(DATASET.canaries)))
    if choice == 4:
        first = draw(st.integers(0, len(canary) - 2))
        return canary[first : draw(st.integers(first + 1, len(canary)))]
    return _case_mix(canary, draw(st.integers(0, 2**60)))


BAD_SELECTORS: list[dict[str, Any]] = [
    {"limit_chars": 0},
    {"offset_chars": -1},
    {"q": ""},
    {"q": "x", "offset_chars": 3},
    {"before_chars": 10},
    {"q": "x", "after_chars": 8193},
    {"cursor": "not-a-cursor", "q": "x"},
]


@st.composite
def selectors(draw: st.DrawFn, key: Key, path: str) -> tuple[dict[str, Any], bool]:
    kind = draw(st.sampled_from(["offset", "offset", "match", "match", "garbage-cursor", "bad"]))
    limit = draw(st.none() | st.integers(1, 5000) | st.just(20000))
    selector: dict[str, Any] = {}
    if kind == "bad":
        return dict(draw(st.sampled_from(BAD_SELECTORS))), True
    if kind == "garbage-cursor":
        selector["cursor"] = draw(st.sampled_from(["not-a-cursor", "AAAA", "x" * 80]))
    elif kind == "offset":
        offset = draw(st.none() | st.integers(0, 3500))
        if offset is not None:
            selector["offset_chars"] = offset
    else:
        selector["q"] = draw(needles(key, path))
        for end in ("before_chars", "after_chars"):
            if (context := draw(st.none() | st.integers(0, 8192))) is not None:
                selector[end] = context
    if limit is not None:
        selector["limit_chars"] = limit
    return selector, False


MINTED_UNDER = ["same", "same", "owner", "other", "same-id"]
FORMS: list[Form] = ["ref", "ref", "ref", "id", "legacy", "unscoped", "uri"]


@given(data=st.data())
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_property_no_read_exposes_what_the_grant_excludes(
    loaded: StoreFront, caplog: pytest.LogCaptureFixture, data: st.DataObject
) -> None:
    grant = data.draw(grants("g-1"), label="grant")
    blob_ids = [blob.blob_id for blob in DATASET.blobs.values()]
    blob_ids += ["blob_sha256_" + "0" * 64, "not-a-blob-id"]
    for _ in range(data.draw(st.integers(1, 6), label="operations")):
        kind = data.draw(
            st.sampled_from(["window", "window", "cursor", "record", "describe", "blob"]),
            label="kind",
        )
        key, path = data.draw(targets(grant), label="target")
        if kind == "window":
            selector, bad = data.draw(selectors(key, path), label="selector")
            uri_ok = not bad and "q" not in selector and key[1] != BOGUS_STREAM
            form = data.draw(st.sampled_from(FORMS if uri_ok else FORMS[:-1]), label="form")
            check(loaded, grant, Window(key, path, selector, form, bad), caplog)
        elif kind == "cursor":
            under = data.draw(st.sampled_from(MINTED_UNDER), label="minted under")
            if under == "same":
                minted_under = grant
            elif under == "owner":
                minted_under = OWNER
            else:  # another grant: another id, or the same id with terms of its own
                grant_id = "g-1" if under == "same-id" else "g-other"
                minted_under = data.draw(grants(grant_id), label="minting grant")
            offset = data.draw(st.integers(0, 3000), label="offset")
            size = data.draw(st.integers(1, 3000), label="limit")
            minted = Window(key, path, {"offset_chars": offset, "limit_chars": size})
            elsewhere = data.draw(st.none() | targets(grant), label="used on")
            check_cursor(
                loaded,
                grant,
                minted,
                minted_under,
                caplog,
                use=elsewhere,
                form=data.draw(st.sampled_from(["ref", "id", "uri"]), label="form"),
                backwards=data.draw(st.booleans(), label="backwards"),
                limit=data.draw(st.none() | st.integers(1, 4000), label="new limit"),
            )
        elif kind == "record":
            form = data.draw(st.sampled_from(FORMS), label="form")
            check(loaded, grant, Record(key, form), caplog)
        elif kind == "describe":
            form = data.draw(st.sampled_from(FORMS[:-1]), label="form")
            check(loaded, grant, Describe(key, path, form), caplog)
        else:
            rec = DATASET.records.get(key)
            own = [DATASET.blobs[b].blob_id for b in rec.blobs.values()] if rec else []
            blob_id = data.draw(st.sampled_from(own or blob_ids) | st.sampled_from(blob_ids))
            if data.draw(st.booleans(), label="bytes"):
                offset = data.draw(st.integers(-1, 3000), label="offset")
                length = data.draw(st.integers(0, 5000), label="length")
                check(loaded, grant, BlobBytes(blob_id, offset, length), caplog)
            else:
                check(loaded, grant, BlobMeta(blob_id), caplog)
