"""What every surface shows: the evidence cards and the one way to say "how to read more".

Every operation of the store returns a card from this package; each card has one `to_dict()`
(its JSON rendering, the same on every surface) and a published JSON Schema (`CARD.JSON_SCHEMA`,
draft 2020-12) that the tests validate every `to_dict()` against; `json_schemas()` gives them
all by card name, with the error envelope's as `Error`. A `Continuation` names the library
operation that reads more, with its arguments and the resource URI of the same read; surfaces
render it (a tool call for MCP, a link for REST, a command line for the CLI).

Rules:
1. Nothing here knows a surface, and nothing here touches a database: this package imports the
   pure core and nothing else of the store (a test walks the imports).
2. A card is a frozen value (`UpsertResult`, a running count, aside) built by the operations; its
   derived keys are computed from its fields, never stored beside them.
3. A new card joins `CARDS`, which `json_schemas()` and the tests read.
"""

from __future__ import annotations

from typing import Any

from .aggregate import AggregateGroup, AggregateResult
from .audit import AuditEntry
from .blob import BlobInfo, BlobRange
from .card import CardSlot, RecordCard
from .continuation import Continuation
from .error import ERROR_SCHEMA
from .field import FieldInfo
from .grant_schema import FieldSchema, GrantSchema, StreamOrder, StreamSchema
from .page import PageOrder, RecordPage, RecordRow, RecordTombstone
from .record import FieldPreview, RecordView
from .search import MatchExcerpt, SearchHit, SearchPage
from .stored_grant import StoredGrant
from .upsert import UpsertResult
from .window import FieldWindow

__all__ = [
    "CARDS",
    "ERROR_SCHEMA",
    "AggregateGroup",
    "AggregateResult",
    "AuditEntry",
    "BlobInfo",
    "BlobRange",
    "CardSlot",
    "Continuation",
    "FieldInfo",
    "FieldPreview",
    "FieldSchema",
    "FieldWindow",
    "GrantSchema",
    "MatchExcerpt",
    "PageOrder",
    "RecordCard",
    "RecordPage",
    "RecordRow",
    "RecordTombstone",
    "RecordView",
    "SearchHit",
    "SearchPage",
    "StoredGrant",
    "StreamOrder",
    "StreamSchema",
    "UpsertResult",
    "json_schemas",
]

CARDS: tuple[type[Any], ...] = (
    Continuation,
    FieldInfo,
    FieldWindow,
    FieldPreview,
    RecordView,
    CardSlot,
    RecordCard,
    BlobInfo,
    BlobRange,
    UpsertResult,
    MatchExcerpt,
    SearchHit,
    SearchPage,
    FieldSchema,
    StreamOrder,
    StreamSchema,
    GrantSchema,
    PageOrder,
    RecordRow,
    RecordTombstone,
    RecordPage,
    AggregateGroup,
    AggregateResult,
    StoredGrant,
    AuditEntry,
)
"""Every card class; each has `to_dict()` and `JSON_SCHEMA`."""


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every card's JSON Schema by card name, and the error envelope's as `Error` (copies)."""
    import copy

    schemas = {card.__name__: copy.deepcopy(card.JSON_SCHEMA) for card in CARDS}
    schemas["Error"] = copy.deepcopy(ERROR_SCHEMA)
    return schemas
