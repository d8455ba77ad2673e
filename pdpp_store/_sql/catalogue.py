"""The catalogue's read statements: what connections and streams exist, and the manifests
that declare them. Catalogue lookups never read a record.

The statements that change the catalogue (a manifest registered, a connection added) are
`writes`'; the manifest a write consults for the search index is `index`'s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Select, bindparam, literal, select

from pdpp_store._core.manifest import FieldHint, StreamSpec

from .requests import Execute, Rows
from .tables import connections, manifests, streams

__all__ = [
    "DeclaringConnection",
    "connection_exists",
    "connector_of",
    "declaring_connections",
    "manifest_documents",
    "stored_manifests",
    "stream_connections",
    "stream_declared_anywhere",
    "stream_spec",
    "stream_spec_of",
]


def stream_spec(connection_id: str, stream: str) -> Execute:
    """The stream's stored spec as `connection_id`'s manifest declares it (`stream_spec_of`),
    with the connector's id and the manifest's registration time (which parsed manifest it is)."""
    return Execute(_stream_spec(), {"r_conn": connection_id, "r_stream": stream}, bounded=True)


@cache
def _stream_spec() -> Select[Any]:
    return (
        select(
            streams.c.primary_key,
            streams.c.consent_time_field,
            streams.c.hints,
            connections.c.connector_id,
            manifests.c.registered_at,
        )
        .select_from(
            connections.join(streams, streams.c.connector_id == connections.c.connector_id).join(
                manifests, manifests.c.connector_id == connections.c.connector_id, isouter=True
            )
        )
        .where(
            connections.c.connection_id == bindparam("r_conn"),
            streams.c.stream == bindparam("r_stream"),
        )
    )


def stream_spec_of(stream: str, rows: Rows) -> StreamSpec | None:
    """The spec of `stream_spec`'s row, or None when the connection does not declare it."""
    if not rows:
        return None
    row = rows[0]
    hints = json.loads(row["hints"])
    return StreamSpec(
        stream,
        tuple(json.loads(row["primary_key"])),
        row["consent_time_field"],
        {name: FieldHint.from_json(hint) for name, hint in hints.items()},
    )


def connection_exists(connection_id: str) -> Execute:
    return Execute(_connection_exists(), {"r_conn": connection_id}, bounded=True)


@cache
def _connection_exists() -> Select[Any]:
    return select(connections.c.connector_id).where(
        connections.c.connection_id == bindparam("r_conn")
    )


def connector_of(rows: Rows) -> str | None:
    """The connector of `connection_exists`'s row, or None when there is no such connection."""
    return str(rows[0]["connector_id"]) if rows else None


def stream_declared_anywhere(stream: str) -> Execute:
    # Not bounded: `streams` is keyed by (connector_id, stream), so this scans every declared
    # stream (the catalogue's size), for a caller-chosen name on an error path.
    return Execute(_stream_declared_anywhere(), {"r_stream": stream})


@cache
def _stream_declared_anywhere() -> Select[Any]:
    return (
        select(literal(1).label("declared"))
        .where(streams.c.stream == bindparam("r_stream"))
        .limit(1)
    )


def stream_connections(names: Sequence[str], connection_id: str | None) -> Execute:
    """(connection_id, connector_id, stream, registered_at) of every connection whose
    manifest declares one of `names` (only `connection_id`'s when given)."""
    params: dict[str, Any] = {"s_names": list(names)}
    if connection_id is not None:
        params["s_conn"] = connection_id
    return Execute(_stream_connections(connection_id is not None), params)


@cache
def _stream_connections(one: bool) -> Select[Any]:
    query = (
        select(
            connections.c.connection_id,
            connections.c.connector_id,
            streams.c.stream,
            manifests.c.registered_at,
        )
        .select_from(
            connections.join(streams, streams.c.connector_id == connections.c.connector_id).join(
                manifests, manifests.c.connector_id == connections.c.connector_id
            )
        )
        .where(streams.c.stream.in_(bindparam("s_names", expanding=True)))
        .order_by(connections.c.connection_id, streams.c.stream)
    )
    if one:
        query = query.where(connections.c.connection_id == bindparam("s_conn"))
    return query


@dataclass(frozen=True, slots=True)
class DeclaringConnection:
    connection_id: str
    connector_id: str
    stream: str
    registered_at: Any
    """When the connector's manifest was registered: the stamp of a parsed manifest."""


def declaring_connections(rows: Rows) -> list[DeclaringConnection]:
    """`stream_connections`' answer."""
    return [
        DeclaringConnection(
            row["connection_id"], row["connector_id"], row["stream"], row["registered_at"]
        )
        for row in rows
    ]


def manifest_documents(connector_ids: Sequence[str]) -> Execute:
    return Execute(
        select(manifests.c.connector_id, manifests.c.registered_at, manifests.c.document).where(
            manifests.c.connector_id.in_(bindparam("s_connectors", expanding=True))
        ),
        {"s_connectors": list(connector_ids)},
    )


def stored_manifests(rows: Rows) -> list[tuple[str, Any, str]]:
    """`manifest_documents`' answer: (connector id, registration stamp, manifest JSON)."""
    return [(row["connector_id"], row["registered_at"], row["document"]) for row in rows]
