"""pdpp_store: grant-enforced, bounded reads of personal-data records of any size.

The public surface; everything else lives in private modules. See README.md and docs/.
"""

from ._cursor import CursorCodec, CursorKey
from ._errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    StoreError,
    Unavailable,
    Unprocessable,
)
from ._fields import FieldInfo, FieldKind
from ._folding import fold
from ._grants import Grant, StreamGrant, TimeConstraint
from ._identity import FieldWindowRef, RecordRef, UnscopedRecordRef, parse_record_ref
from ._ingest import BlobInfo, UpsertResult
from ._reads import BlobRange, FieldPreview, RecordView
from ._store import AsyncStore, Store
from ._window import FieldWindow

__all__ = [
    "AsyncStore",
    "BadRequest",
    "BlobInfo",
    "BlobRange",
    "Conflict",
    "CursorCodec",
    "CursorKey",
    "FieldInfo",
    "FieldKind",
    "FieldPreview",
    "FieldWindow",
    "FieldWindowRef",
    "Forbidden",
    "Grant",
    "NotFound",
    "RecordRef",
    "RecordView",
    "Store",
    "StoreError",
    "StreamGrant",
    "TimeConstraint",
    "Unavailable",
    "Unprocessable",
    "UnscopedRecordRef",
    "UpsertResult",
    "fold",
    "parse_record_ref",
]
