"""pdpp_store: grant-enforced, bounded reads of personal-data records of any size.

The public surface; everything else lives in private modules. The evidence cards every
operation returns are also in `pdpp_store.evidence` (with their JSON Schemas). `CATALOGUE` is
the store's operations as data (name, read or write, arguments, cards), which the surfaces
derive from and are tested against. A test pins `__all__`. See README.md and docs/.
"""

from ._core.cursor import CursorCodec, CursorKey
from ._core.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    StoreError,
    Unavailable,
    Unprocessable,
)
from ._core.fields import FieldKind
from ._core.folding import fold
from ._core.grants import Grant, StreamGrant, TimeConstraint
from ._core.identity import (
    FieldWindowRef,
    RecordRef,
    UnscopedRecordRef,
    parse_field_window_uri,
    parse_record_ref,
)
from ._core.selector import SELECTOR_ARGS, SelectorArg, SelectorArgs
from ._core.tokens import load_tokens, read_tokens_json, tokens_from_dict
from ._ops.audit import OneAuditEntry, audit_context, note_client
from ._ops.catalogue import CATALOGUE
from ._store import AsyncStore, Store
from .evidence import (
    AggregateGroup,
    AggregateResult,
    AuditEntry,
    BlobInfo,
    BlobRange,
    Continuation,
    FieldInfo,
    FieldPreview,
    FieldSchema,
    FieldWindow,
    GrantSchema,
    MatchExcerpt,
    PageOrder,
    RecordPage,
    RecordRow,
    RecordTombstone,
    RecordView,
    SearchHit,
    SearchPage,
    StoredGrant,
    StreamSchema,
    UpsertResult,
)

__all__ = [
    "CATALOGUE",
    "SELECTOR_ARGS",
    "AggregateGroup",
    "AggregateResult",
    "AsyncStore",
    "AuditEntry",
    "BadRequest",
    "BlobInfo",
    "BlobRange",
    "Conflict",
    "Continuation",
    "CursorCodec",
    "CursorKey",
    "FieldInfo",
    "FieldKind",
    "FieldPreview",
    "FieldSchema",
    "FieldWindow",
    "FieldWindowRef",
    "Forbidden",
    "Grant",
    "GrantSchema",
    "MatchExcerpt",
    "NotFound",
    "OneAuditEntry",
    "PageOrder",
    "RecordPage",
    "RecordRef",
    "RecordRow",
    "RecordTombstone",
    "RecordView",
    "SearchHit",
    "SearchPage",
    "SelectorArg",
    "SelectorArgs",
    "Store",
    "StoreError",
    "StoredGrant",
    "StreamGrant",
    "StreamSchema",
    "TimeConstraint",
    "Unavailable",
    "Unprocessable",
    "UnscopedRecordRef",
    "UpsertResult",
    "audit_context",
    "fold",
    "load_tokens",
    "note_client",
    "parse_field_window_uri",
    "parse_record_ref",
    "read_tokens_json",
    "tokens_from_dict",
]
