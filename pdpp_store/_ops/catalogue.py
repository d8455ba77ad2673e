"""The catalogue of operations: what the store can do, as data.

Each `Operation` says its name, whether it reads or writes, its arguments (name, type, required
or optional, in call order after the store itself) and the evidence card it returns. Each
entry is also a name of this module (`READ_RECORD`, ...): a front method hands its entry to
`_store`'s `_run` with the operation's generator, and `_run` runs it as a read or in a write
transaction as the entry's `kind` says, with no lookup by name. The tests
hold `Store`, `AsyncStore` and the command line to this list: every operation exists in all
three, with these names and these arguments, so the surfaces cannot drift apart.

Rules:
1. A new operation is added here first; until `Store`, `AsyncStore` and the CLI all have it, the
   catalogue test fails.
2. Argument types are a small vocabulary that surfaces map to their own (a JSON Schema type, a
   query parameter, a command-line option): `grant`, `record`, `field`, `string`, `integer`,
   `object`, `records` (an iterable of objects), `strings` (a list of strings), `bytes`.
3. The selector arguments of `read_field_window` come from `_core.selector`, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pdpp_store._core.selector import SELECTOR_ARGS

__all__ = [
    "ADD_CONNECTION",
    "ADD_GRANT",
    "AGGREGATE",
    "BLOB_INFO",
    "CATALOGUE",
    "DELETE_RECORD",
    "DESCRIBE_FIELD",
    "DESCRIBE_GRANT",
    "LIST_AUDIT",
    "LIST_GRANTS",
    "PRUNE_AUDIT",
    "PUT_BLOB",
    "QUERY_RECORDS",
    "READ_BLOB_RANGE",
    "READ_FIELD_WINDOW",
    "READ_RECORD",
    "READ_RESOURCE",
    "REGISTER_MANIFEST",
    "RETIRE_CURSOR_KEYS",
    "REVOKE_GRANT",
    "ROTATE_CURSOR_KEY",
    "SEARCH",
    "UPSERT_RECORDS",
    "Argument",
    "Operation",
    "operation",
]

ArgumentType = Literal[
    "grant", "record", "field", "string", "integer", "object", "records", "strings", "bytes"
]


@dataclass(frozen=True, slots=True)
class Argument:
    name: str
    type: ArgumentType
    required: bool = True


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    kind: Literal["read", "write"]
    arguments: tuple[Argument, ...]
    returns: tuple[str, ...]
    """The names of the evidence cards it may return (none: it returns nothing)."""

    @property
    def writes(self) -> bool:
        return self.kind == "write"


def _required(name: str, kind: ArgumentType) -> Argument:
    return Argument(name, kind)


def _optional(name: str, kind: ArgumentType) -> Argument:
    return Argument(name, kind, required=False)


_GRANT = _required("grant", "grant")
_RECORD = _required("record", "record")
_CONNECTION = _optional("connection_id", "string")
_SELECTOR = tuple(
    _optional(name, "integer" if arg.type is int else "string")
    for name, arg in SELECTOR_ARGS.items()
)

REGISTER_MANIFEST = Operation("register_manifest", "write", (_required("manifest", "object"),), ())
ADD_CONNECTION = Operation(
    "add_connection",
    "write",
    (_required("connection_id", "string"), _required("connector_id", "string")),
    (),
)
UPSERT_RECORDS = Operation(
    "upsert_records",
    "write",
    (
        _required("connection_id", "string"),
        _required("stream", "string"),
        _required("records", "records"),
    ),
    ("UpsertResult",),
)
DELETE_RECORD = Operation(
    "delete_record",
    "write",
    (
        _required("connection_id", "string"),
        _required("stream", "string"),
        _required("record_id", "string"),
    ),
    (),
)
PUT_BLOB = Operation(
    "put_blob",
    "write",
    (_required("data", "bytes"), _required("mime_type", "string")),
    ("BlobInfo",),
)
ROTATE_CURSOR_KEY = Operation("rotate_cursor_key", "write", (), ())
RETIRE_CURSOR_KEYS = Operation(
    "retire_cursor_keys", "write", (_required("older_than", "integer"),), ()
)
READ_FIELD_WINDOW = Operation(
    "read_field_window",
    "read",
    (_GRANT, _RECORD, _required("field", "field"), _CONNECTION, *_SELECTOR),
    ("FieldWindow",),
)
READ_RECORD = Operation(
    "read_record",
    "read",
    (
        _GRANT,
        _RECORD,
        _CONNECTION,
        _optional("after_field", "string"),
        _optional("fields", "strings"),
    ),
    ("RecordView",),
)
DESCRIBE_FIELD = Operation(
    "describe_field",
    "read",
    (_GRANT, _RECORD, _required("field", "field"), _CONNECTION),
    ("FieldInfo",),
)
READ_RESOURCE = Operation(
    "read_resource",
    "read",
    (_GRANT, _required("uri", "string")),
    ("RecordView", "FieldWindow"),
)
BLOB_INFO = Operation("blob_info", "read", (_GRANT, _required("blob_id", "string")), ("BlobInfo",))
READ_BLOB_RANGE = Operation(
    "read_blob_range",
    "read",
    (
        _GRANT,
        _required("blob_id", "string"),
        _optional("offset_bytes", "integer"),
        _optional("length_bytes", "integer"),
    ),
    ("BlobRange",),
)
AGGREGATE = Operation(
    "aggregate",
    "read",
    (
        _GRANT,
        _required("stream", "string"),
        _optional("metric", "string"),
        _optional("field", "string"),
        _optional("group_by", "string"),
        _optional("group_by_time", "string"),
        _optional("granularity", "string"),
        _optional("time_zone", "string"),
        _optional("filter", "object"),
        _CONNECTION,
        _optional("limit", "integer"),
    ),
    ("AggregateResult",),
)
SEARCH = Operation(
    "search",
    "read",
    (
        _GRANT,
        _required("q", "string"),
        _optional("streams", "strings"),
        _CONNECTION,
        _optional("filter", "object"),
        _optional("order", "string"),
        _optional("limit", "integer"),
        _optional("cursor", "string"),
        _optional("count", "string"),
    ),
    ("SearchPage",),
)
DESCRIBE_GRANT = Operation(
    "describe_grant",
    "read",
    (
        _GRANT,
        _optional("stream", "string"),
        _optional("limit", "integer"),
        _optional("after", "string"),
    ),
    ("GrantSchema",),
)
QUERY_RECORDS = Operation(
    "query_records",
    "read",
    (
        _GRANT,
        _required("stream", "string"),
        _CONNECTION,
        _optional("filter", "object"),
        _optional("order", "string"),
        _optional("fields", "strings"),
        _optional("limit", "integer"),
        _optional("cursor", "string"),
        _optional("count", "string"),
        _optional("changes_since", "string"),
    ),
    ("RecordPage",),
)
# The owner's grants (docs/contract.md §14): `grant` here is the grant to keep, an object, not
# the caller's authority. Listing is the owner's, under no grant, so it is not a read (every read
# is under a grant, and served to agents): like the other owner operations it runs in its own
# transaction and is the library's and the command line's only.
ADD_GRANT = Operation("add_grant", "write", (_required("grant", "object"),), ("StoredGrant",))
REVOKE_GRANT = Operation(
    "revoke_grant", "write", (_required("grant_id", "string"),), ("StoredGrant",)
)
LIST_GRANTS = Operation(
    "list_grants", "write", (_optional("grant_id", "string"),), ("StoredGrant",)
)
# The read audit (docs/contract.md §14): the owner's record of what was read under each grant.
# Like the grants, the owner's only (the library and the command line), under no grant.
LIST_AUDIT = Operation(
    "list_audit",
    "write",
    (
        _optional("grant_id", "string"),
        _optional("since", "string"),
        _optional("until", "string"),
        _optional("limit", "integer"),
        _optional("after_id", "integer"),
    ),
    ("AuditEntry",),
)
PRUNE_AUDIT = Operation("prune_audit", "write", (_required("older_than", "integer"),), ())

CATALOGUE: dict[str, Operation] = {
    op.name: op
    for op in (
        REGISTER_MANIFEST,
        ADD_CONNECTION,
        UPSERT_RECORDS,
        DELETE_RECORD,
        PUT_BLOB,
        ROTATE_CURSOR_KEY,
        RETIRE_CURSOR_KEYS,
        READ_FIELD_WINDOW,
        READ_RECORD,
        DESCRIBE_FIELD,
        READ_RESOURCE,
        BLOB_INFO,
        READ_BLOB_RANGE,
        AGGREGATE,
        SEARCH,
        DESCRIBE_GRANT,
        QUERY_RECORDS,
        ADD_GRANT,
        REVOKE_GRANT,
        LIST_GRANTS,
        LIST_AUDIT,
        PRUNE_AUDIT,
    )
}
"""Every operation of the store by name, in the order the docs list them."""


def operation(name: str) -> Operation:
    return CATALOGUE[name]
