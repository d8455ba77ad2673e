"""`query_records` (docs/contract.md §11.2) as an operation driven by `_runtime` (no I/O here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pdpp_store._core.grants import Grant
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import RecordPage

from .reads import ReadContext

__all__ = ["query_records"]


def query_records(
    ctx: ReadContext,
    grant: Grant,
    stream: str,
    *,
    connection_id: str | None = None,
    filter: Mapping[str, Any] | str | None = None,
    order: str = "desc",
    fields: Sequence[str] | None = None,
    limit: int = 25,
    cursor: str | None = None,
    count: str = "none",
    changes_since: str | None = None,
) -> Op[RecordPage]:
    raise NotImplementedError("query_records is being built")
    yield  # pragma: no cover - makes this a generator
