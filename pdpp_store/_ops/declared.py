"""What the catalogue says a grant may read: the connections that declare its streams, and their
connectors' parsed manifests. Shared by the reads that ask it first (search, `query_records`,
`aggregate`, discovery, a record's card); it reads the catalogue, never a record.

Rules:
1. A manifest is parsed once per registration: `cache` (the store's `ReadContext.manifests`)
   keeps each connector's parsed manifest with the registration time it was parsed at, and only
   a connector registered since is read and parsed again, all of them in one statement.
2. A connection counts for a stream when it declares the stream and the grant covers it.
"""

from __future__ import annotations

from typing import Any, Protocol

from pdpp_store._core.grants import Grant
from pdpp_store._core.manifest import Manifest
from pdpp_store._sql import catalogue as catalogue_sql
from pdpp_store._sql.requests import Op

__all__ = ["ManifestCache", "declaring", "parsed_manifests"]

ManifestCache = dict[str, tuple[Any, Manifest]]
"""Connector id -> (registration time, parsed manifest)."""


class _Context(Protocol):
    @property
    def manifests(self) -> ManifestCache: ...


def parsed_manifests(cache: ManifestCache, stamps: dict[str, Any]) -> Op[dict[str, Manifest]]:
    """The parsed manifest of each connector in `stamps` (connector id -> registration time),
    parsed again only when re-registered (rule 1)."""
    stale = [cid for cid, stamp in stamps.items() if cache.get(cid, (None,))[0] != stamp]
    if stale:
        for connector_id, stamp, document in catalogue_sql.stored_manifests(
            (yield catalogue_sql.manifest_documents(sorted(stale))) or []
        ):
            cache[connector_id] = (stamp, Manifest.from_json(document))
    return {cid: cache[cid][1] for cid in stamps if cid in cache}


def declaring(
    ctx: _Context, grant: Grant, names: list[str], connection_id: str | None
) -> Op[list[tuple[str, str, Manifest]]]:
    """(connection_id, stream, manifest) for every covered connection declaring a stream of
    `names` (rule 2), `connection_id` alone when given."""
    rows = (yield catalogue_sql.stream_connections(names, connection_id)) or []
    covered = [
        row
        for row in catalogue_sql.declaring_connections(rows)
        if grant.stream(row.stream).covers_connection(row.connection_id)
    ]
    found = yield from parsed_manifests(
        ctx.manifests, {row.connector_id: row.registered_at for row in covered}
    )
    return [
        (row.connection_id, row.stream, found[row.connector_id])
        for row in covered
        if row.connector_id in found
    ]
