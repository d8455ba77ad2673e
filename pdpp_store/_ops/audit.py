"""The read audit (docs/contract.md §14): what each answered read under a grant recorded, and
the owner's operations on the record (list, prune).

    with audit_context("rest", request_id="req_…", client="agent-app"):
        store.search(grant, "invoice")     # one entry: who, what was asked, what was served

Rules:
1. Every operation the catalogue calls a read (every operation under a grant: reads, search,
   `query_records`, `aggregate`, discovery with `describe_grant`, blob reads) is audited, on
   both fronts, by construction: `audited` wraps each front's method of that name once, when
   the class is made (`_store._StoreCore.__init_subclass__`). A surface only says who is asking
   (`audit_context`: surface, request id, client); a call with none is the `library`'s.
2. An entry is recorded when the call ends: `ok`, or the `code` of the `StoreError` it raised
   (bad input, unknown stream or record, a refusal, a revoked grant, a busy store);
   `internal_error` for any other exception. A call cancelled before it was answered, and a
   request refused before it reached the store (a 401: no grant, a surface's own argument
   check), records nothing: nothing was read.
3. Never a field value. An entry names records by id, fields by path, and keeps the caller's
   own terms (`q`, filters, selectors, limits): what was asked, not what is stored. A cursor
   or a changes bookmark is opaque and may carry a value of the order field: only that one was
   given is kept (`<given>`); a field-window URI is kept as its parts, its cursor the same way.
   A term longer than `MAX_TERM_CHARS` is cut (`…` at its end).
4. Served ids: the first `MAX_RECORD_IDS` record ids of the answer, and how many it served.
5. Entries are written in batches by a background writer (`_runtime.audit`), at least once a
   second and when the store closes; reads never wait for them. A process that dies loses at
   most the entries of its last second.
6. A blob is readable only through records that reference it (docs/contract.md §5), so a blob
   read's entry names them: the records (first `MAX_RECORD_IDS`, in key order) through which
   the grant reached it, their stream and connection when they share one, and the paths of the
   fields that reference it. The operation notes them (`note_reach`) as it checks the reach.
7. A surface that answers one request with several calls of the store may record them as one
   entry (`OneAuditEntry`): a REST blob download is one entry whatever its length, with the range
   asked and the bytes served, and an outcome `aborted` when it ended before its last byte.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from pdpp_store._core.errors import BadRequest, StoreError
from pdpp_store._core.grants import Grant, normalize_instant
from pdpp_store._core.identity import (
    FIELD_WINDOW_URI_PREFIX,
    RecordRef,
    UnscopedRecordRef,
    parse_field_window_uri,
    parse_record_ref,
)
from pdpp_store._sql import audit as audit_sql
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import (
    AggregateResult,
    AuditEntry,
    BlobInfo,
    BlobRange,
    FieldInfo,
    FieldWindow,
    RecordCard,
    RecordPage,
    RecordRow,
    RecordView,
    SearchPage,
)

from .catalogue import Operation

__all__ = [
    "MAX_LIST",
    "MAX_RECORD_IDS",
    "MAX_TERM_CHARS",
    "REACHING",
    "SURFACES",
    "OneAuditEntry",
    "Reach",
    "Reader",
    "audit_context",
    "audited",
    "entry_row",
    "list_audit",
    "note_client",
    "note_reach",
    "prune_audit",
    "reach_of_call",
    "write_entries",
]

F = TypeVar("F", bound=Callable[..., Any])
Surface = Literal["library", "cli", "rest", "mcp"]
SURFACES: tuple[Surface, ...] = ("library", "cli", "rest", "mcp")
MAX_RECORD_IDS = 100
MAX_TERM_CHARS = 1000
MAX_LIST = 1000
GIVEN = "<given>"
INSTANT_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
"""`normalize_instant`'s fixed-width form, written straight from the clock (no parse per read)."""


@dataclass(slots=True)
class Reader:
    """Who is asking: the surface, the request's id and the client its token was issued to."""

    surface: Surface
    request_id: str | None = None
    client: str | None = None


_READER: ContextVar[Reader | None] = ContextVar("pdpp_store_audit_reader", default=None)
Reach = list[tuple[str, str, str, str]]
"""The records (connection, stream, record id, field path) a blob read reached its blob through."""
_REACH: ContextVar[Reach | None] = ContextVar("pdpp_store_audit_reach", default=None)
"""The list the `audited` call of a blob read sets for its operation to note into (rule 6)."""
_ONE: ContextVar[OneAuditEntry | None] = ContextVar("pdpp_store_audit_one", default=None)
REACHING = frozenset({"blob_info", "read_blob_range"})
"""The reads whose entry names the records that made their blob readable (rule 6)."""


def _optional_text(value: object, param: str) -> str | None:
    """A surface's request id or client, kept to 256 characters; not a string is refused."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest("invalid_request", f"{param} must be a string", param=param)
    return value[:256]


@contextmanager
def audit_context(
    surface: str, *, request_id: str | None = None, client: str | None = None
) -> Iterator[Reader]:
    """The reads inside this block are recorded as `surface`'s (one of `SURFACES`), of request
    `request_id` and client `client`; either left out is the enclosing block's, if any."""
    if surface not in SURFACES:
        raise BadRequest(
            "invalid_request", f"surface must be one of {', '.join(SURFACES)}", param="surface"
        )
    outer = _READER.get()
    reader = Reader(
        surface,  # checked above
        _optional_text(request_id, "request_id") or (outer.request_id if outer else None),
        _optional_text(client, "client") or (outer.client if outer else None),
    )
    token = _READER.set(reader)
    try:
        yield reader
    finally:
        _READER.reset(token)


def note_client(client: str | None) -> None:
    """Name the client of the enclosing `audit_context` (a server learns it with the token)."""
    reader = _READER.get()
    if reader is not None and isinstance(client, str) and client:
        reader.client = client[:256]


def reach_of_call() -> Reach | None:
    """Where the audited call being made takes the records its blob was reached through (rule
    6): called when the call makes its operation, in the caller's context (the operation may
    run in a connection's thread, which does not see the caller's context variables)."""
    return _REACH.get()


def note_reach(reach: Reach | None, rows: Iterable[Mapping[str, Any]]) -> None:
    """Note into `reach` (`reach_of_call()`'s) the records (`connection_id`, `stream`,
    `record_id`, and the `path` of the field) through which the grant reached the blob."""
    if reach is None:
        return
    for row in rows:
        connection, stream = row.get("connection_id"), row.get("stream")
        record, path = row.get("record_id"), row.get("path")
        if (
            isinstance(connection, str)
            and isinstance(stream, str)
            and isinstance(record, str)
            and isinstance(path, str)
        ):
            reach.append((connection, stream, record, path))


# ---------------------------------------------------------------- an entry


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TERM_CHARS else text[: MAX_TERM_CHARS - 1] + "…"


def _plain(value: object, depth: int = 0) -> Any:
    """`value` as JSON the audit can keep: what the caller gave, bounded."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):  # one past 64 bits is no id anyone has; its digits may be 10**6
        return value if value.bit_length() <= 64 else f"<integer of {value.bit_length()} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, RecordRef | UnscopedRecordRef):
        return value.id
    if depth >= 8:
        return "…"
    if isinstance(value, Mapping):
        return {_cut(str(key)): _plain(item, depth + 1) for key, item in list(value.items())[:100]}
    if isinstance(value, Sequence | set | frozenset) and not isinstance(value, bytes | bytearray):
        return [_plain(item, depth + 1) for item in list(value)[:100]]
    return f"<{type(value).__name__}>"


def _window_terms(uri: str) -> dict[str, Any]:
    try:
        window = parse_field_window_uri(uri)
    except StoreError:
        return {"uri": FIELD_WINDOW_URI_PREFIX + GIVEN}
    terms: dict[str, Any] = {
        "uri": FIELD_WINDOW_URI_PREFIX,
        "record": window.record.id,
        "field": _cut(window.field),
        "offset_chars": window.offset_chars,
        "limit_chars": window.limit_chars,
    }
    if window.cursor is not None:
        terms["cursor"] = GIVEN
    return terms


def _terms(asked: Mapping[str, object]) -> dict[str, Any]:
    """What was asked (rule 3), by argument name; the grant is the entry's own column."""
    terms: dict[str, Any] = {}
    for name, value in asked.items():
        if name == "grant" or value is None:
            continue
        if name in ("cursor", "next_cursor"):
            terms[name] = GIVEN
        elif name == "changes_since":
            terms[name] = value if value == "beginning" else GIVEN
        elif name == "uri" and isinstance(value, str) and value.startswith(FIELD_WINDOW_URI_PREFIX):
            terms.update(_window_terms(value))
        else:
            terms[name] = _plain(value)
    return terms


def _asked_record(asked: Mapping[str, object]) -> RecordRef | UnscopedRecordRef | None:
    record = asked.get("record")
    connection = asked.get("connection_id")
    try:
        if isinstance(record, RecordRef | UnscopedRecordRef | str):
            return parse_record_ref(
                record, connection_id=connection if isinstance(connection, str) else None
            )
    except StoreError:
        return None
    return None


@dataclass(slots=True)
class _Served:
    stream: str | None = None
    connection_id: str | None = None
    record_ids: list[str] | None = None
    record_count: int = 0
    fields: list[str] | None = None


Served = tuple[str, str, str]
"""A record served: (connection, stream, record id), read off the card as it is."""


def _one(values: Iterable[str]) -> str | None:
    found = set(values)
    return found.pop() if len(found) == 1 else None


def _refs(refs: Sequence[Served], fields: list[str]) -> _Served:
    return _Served(
        _one(ref[1] for ref in refs),
        _one(ref[0] for ref in refs),
        [f"{c}/{s}:{r}" for c, s, r in refs[:MAX_RECORD_IDS]],
        len(refs),
        fields,
    )


def _of(ref: RecordRef) -> Served:
    return (ref.connection_id, ref.stream, ref.record_id)


def _unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def _card_fields(card: RecordCard | None) -> list[str]:
    """The fields a record card shows (its title, time, actor ... slots)."""
    if card is None:
        return []
    slots = (card.title, card.time, card.actor, card.secondary, card.amount)
    return [slot.field for slot in slots if slot is not None]


def _reached(reach: Sequence[tuple[str, str, str, str]] | None) -> _Served:
    """A blob read's records: those it was reached through (rule 6), each once."""
    if not reach:
        return _Served()
    records = list(dict.fromkeys((c, s, r) for c, s, r, _ in reach))
    return _refs(records, _unique(path for *_, path in reach))


def _served(
    result: object,
    asked: Mapping[str, object],
    reach: Sequence[tuple[str, str, str, str]] | None = None,
) -> _Served:
    """What an answer served: its records, by id, and the paths of its fields (rule 4)."""
    if isinstance(result, FieldWindow):
        window = (result.connection_id, result.stream, result.record_id)
        return _refs([window], [result.field.path])
    if isinstance(result, RecordView):
        paths = [preview.info.path for preview in result.fields]
        return _refs([_of(result.ref)], _unique([*paths, *_card_fields(result.card)]))
    if isinstance(result, SearchPage):
        hits = [(hit.connection_id, hit.stream, hit.record_id) for hit in result.hits]
        paths = _unique(excerpt.field_path for hit in result.hits for excerpt in hit.excerpts)
        return _refs(hits, paths)
    if isinstance(result, RecordPage):
        rows = [_of(row.card.ref if isinstance(row, RecordRow) else row.ref) for row in result.rows]
        paths = _unique(
            path
            for row in result.rows
            if isinstance(row, RecordRow)
            for path in [*(preview.info.path for preview in row.fields), *_card_fields(row.card)]
        )
        served = _refs(rows, paths)
        served.stream = result.stream
        return served
    if isinstance(result, FieldInfo):
        record = _asked_record(asked)
        if isinstance(record, RecordRef):
            return _refs([_of(record)], [result.path])
        return _Served(fields=[result.path])
    if isinstance(result, BlobInfo | BlobRange):
        return _reached(reach)
    if isinstance(result, AggregateResult):
        named = (result.field, result.group_by, result.group_by_time)
        return _Served(stream=result.stream, fields=[path for path in named if path])
    return _Served()


_LIST = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_TERMS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode
_second: tuple[int, str] = (0, "")


def _now() -> str:
    """Now as `INSTANT_FORMAT` writes it; the second's text is made once per second."""
    global _second  # noqa: PLW0603 (a cache of one value; a race rebuilds the same text)
    now = time.time()
    whole = int(now)
    if _second[0] != whole:
        _second = (whole, datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{int((now - whole) * 1_000_000):06d}Z"


def entry_row(
    operation: Operation,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    outcome: object,
    reader: Reader | None,
    *,
    reach: Sequence[tuple[str, str, str, str]] | None = None,
) -> dict[str, Any]:
    """The `read_audit` row of one call of `operation` (positional `args` after the store, in
    the catalogue's order, and `kwargs`) that answered `outcome` (its result, or the exception
    it raised), asked by `reader` (None: the library); `reach`, a blob read's records (rule 6)."""
    names = [argument.name for argument in operation.arguments]
    asked: dict[str, object] = dict(zip(names, args, strict=False))
    asked.update(kwargs)
    grant = asked.get("grant")
    if isinstance(outcome, BaseException):
        code = outcome.code if isinstance(outcome, StoreError) else "internal_error"
        served = _Served()
    else:
        code = "ok"
        served = _served(outcome, asked, reach)
    stream = served.stream or _text(asked.get("stream"))
    connection = served.connection_id or _text(asked.get("connection_id"))
    if stream is None or connection is None:  # not read off the answer: the record asked
        record = _asked_record(asked)
        stream = stream or (record.stream if record else None)
        connection = connection or (record.connection_id if isinstance(record, RecordRef) else None)
    return {
        "at": _now(),
        "request_id": reader.request_id if reader else None,
        "grant_id": grant.grant_id if isinstance(grant, Grant) else _grant_id_of(grant),
        "client": reader.client if reader else None,
        "surface": reader.surface if reader else "library",
        "operation": operation.name,
        "stream": stream,
        "connection_id": connection,
        "record_ids": _LIST(served.record_ids or []),
        "record_count": served.record_count,
        "fields": _LIST(served.fields or []),
        "outcome": code,
        "terms": _TERMS(_terms(asked)),
    }


def _text(value: object) -> str | None:
    return _cut(value) if isinstance(value, str) and value else None


def _grant_id_of(grant: object) -> str | None:
    """The id of a grant given as its JSON (the library takes one), when it names one."""
    if isinstance(grant, Mapping):
        return _text(grant.get("grant_id"))
    return None


def _record(
    store: Any,
    operation: Operation,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    outcome: object,
    *,
    reach: Reach | None,
) -> None:
    row = entry_row(operation, args, kwargs, outcome, _READER.get(), reach=reach)
    one = _ONE.get()
    if one is None:
        store._audit_entry(row)
    else:
        one.add(store, row)


def audited(operation: Operation, method: F) -> F:
    """`method` (a front's method of a read `operation`), recording one entry per call in its
    store's audit (`self._audit_entry`), when the store audits (rules 1 and 2); inside a
    `OneAuditEntry.counting` block the entry is that request's to merge (rule 7)."""
    reaching = operation.name in REACHING

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def read_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self._auditing is None:
                return await method(self, *args, **kwargs)
            reach: Reach | None = [] if reaching else None
            token = _REACH.set(reach) if reaching else None
            try:
                result = await method(self, *args, **kwargs)
            except Exception as error:
                _record(self, operation, args, kwargs, error, reach=reach)
                raise
            finally:
                if token is not None:
                    _REACH.reset(token)
            _record(self, operation, args, kwargs, result, reach=reach)
            return result

        return read_async  # type: ignore[return-value]

    @functools.wraps(method)
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._auditing is None:
            return method(self, *args, **kwargs)
        reach: Reach | None = [] if reaching else None
        token = _REACH.set(reach) if reaching else None
        try:
            result = method(self, *args, **kwargs)
        except Exception as error:
            _record(self, operation, args, kwargs, error, reach=reach)
            raise
        finally:
            if token is not None:
                _REACH.reset(token)
        _record(self, operation, args, kwargs, result, reach=reach)
        return result

    return read  # type: ignore[return-value]


class OneAuditEntry:
    """One request's audited calls as one entry (rule 7): a REST blob download reads its blob's
    headers, then its bytes 64 KiB at a time, and the owner sees one read of the range asked.

        one = OneAuditEntry({"blob_id": blob_id, "range": range_header})  # the terms asked
        with one.counting():
            info = await store.blob_info(grant, blob_id)
        ...                                  # each range read inside `one.counting()` too
        one.close({"served_bytes": n})       # writes the one entry (once; later calls do nothing)

    The entry is the calls' own, merged: the first call's time, request and grant; the last
    call's operation; the records and fields of all (each once, the first `MAX_RECORD_IDS`); the
    first refusal's code, unless `close` names the outcome; the terms `close` is given."""

    __slots__ = ("_asked", "_closed", "_rows", "_store")

    def __init__(self, asked: Mapping[str, object] | None = None) -> None:
        self._asked = dict(asked or {})
        self._rows: list[dict[str, Any]] = []
        self._store: Any = None
        self._closed = False

    @contextmanager
    def counting(self) -> Iterator[None]:
        """The audited calls inside this block (no `await` of anything else, no `yield` of a
        generator: the block is one call's) are this entry's."""
        token = _ONE.set(self)
        try:
            yield
        finally:
            _ONE.reset(token)

    def add(self, store: Any, row: dict[str, Any]) -> None:
        if self._closed:  # a call after the answer was written: its own entry, not lost
            store._audit_entry(row)
            return
        self._store = store
        self._rows.append(row)

    def close(self, terms: Mapping[str, object] | None = None, outcome: str | None = None) -> None:
        """Write the merged entry with the terms `asked` (given when it was made) and `terms`
        (what the surface adds of the answer), and `outcome` (None: the calls' own)."""
        if self._closed:
            return
        self._closed = True
        rows, self._rows = self._rows, []
        if not rows:
            return
        merged = dict(rows[0])
        merged["operation"] = rows[-1]["operation"]
        records: dict[str, None] = {}
        fields: dict[str, None] = {}
        for row in rows:
            records.update(dict.fromkeys(json.loads(row["record_ids"])))
            fields.update(dict.fromkeys(json.loads(row["fields"])))
            if row["outcome"] != "ok" and merged["outcome"] == "ok":
                merged["outcome"] = row["outcome"]
            for column in ("stream", "connection_id"):
                if merged[column] != row[column]:
                    merged[column] = None
        merged["record_ids"] = _LIST(list(records)[:MAX_RECORD_IDS])
        merged["record_count"] = max(len(records), *(row["record_count"] for row in rows))
        merged["fields"] = _LIST(list(fields))
        if outcome is not None:
            merged["outcome"] = outcome
        merged["terms"] = _TERMS(_terms({**self._asked, **(terms or {})}))
        self._store._audit_entry(merged)


# ---------------------------------------------------------------- the owner's operations


def _instant(value: object, param: str) -> str | None:
    if value is None:
        return None
    instant = normalize_instant(value) if isinstance(value, str) else None
    if instant is None:
        raise BadRequest(
            "invalid_request", f"{param} must be an ISO-8601 date or date-time", param=param
        )
    return instant


def _count(value: object, param: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(
            "invalid_request", f"{param} must be an integer from {low} to {high}", param=param
        )
    return value


def _grant_filter(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        raise BadRequest("invalid_request", "grant_id must be a non-empty string", param="grant_id")
    return value


def list_audit(
    grant_id: object = None,
    since: object = None,
    until: object = None,
    limit: object = 100,
    after_id: object = 0,
) -> Op[list[AuditEntry]]:
    """The entries after `after_id`, oldest first, at most `limit` (1..`MAX_LIST`), of one
    grant and from `since` (inclusive) to `until` (exclusive) when given."""
    statement = audit_sql.list_entries(
        grant_id=_grant_filter(grant_id),
        since=_instant(since, "since"),
        until=_instant(until, "until"),
        after_id=_count(after_id, "after_id", 0, 2**62),
        limit=_count(limit, "limit", 1, MAX_LIST),
    )
    rows = (yield statement) or []
    return [audit_sql.entry_of(row) for row in rows]


def write_entries(entries: Sequence[Mapping[str, Any]]) -> Op[None]:
    """One batch of entries, as the background writer hands them over (rule 5)."""
    yield audit_sql.insert_entries(entries)


def prune_audit(grace: timedelta) -> Op[int]:
    """Delete the entries older than `grace` (checked by the front); returns how many."""
    before = normalize_instant((datetime.now(UTC) - grace).isoformat())
    assert before is not None
    rows = (yield audit_sql.count_before(before)) or []
    yield audit_sql.prune_before(before)
    return int(rows[0]["n"]) if rows else 0
