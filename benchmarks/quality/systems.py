"""The systems the quality benchmark compares, each answering a query with record ids in order.

- `StoreSearch`: pdpp-store's `search` (its default order) over the gmail `messages` and
  `message_bodies` streams, under an all-fields grant of the mailbox's connection.
- `Fts5Reference`: the PDPP reference's design on SQLite: one FTS5 row per record (stream,
  record id, the stream's lexical fields), tokenizer `unicode61`, `ORDER BY bm25(...)`,
  `LIMIT 200` candidates.
- `TsvectorReference`: the reference's design on Postgres: a `simple` `tsvector` of the same
  fields per record under a GIN index, `ORDER BY ts_rank_cd(...) DESC`, `LIMIT 200`.

A query reaches the references as its terms ANDed: a bare word as a one-token query, a quoted
phrase as a phrase query (FTS5 `"a b"`, Postgres `phraseto_tsquery`), the way the reference
translates an agent's `q`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import Any, Protocol

import psycopg

from pdpp_store import Grant, Store

__all__ = ["CANDIDATES", "STREAMS", "Fts5Reference", "StoreSearch", "System", "TsvectorReference"]

CANDIDATES = 200
STREAMS = ("messages", "message_bodies")
LEXICAL = {
    "messages": ("subject", "from_name", "from_email", "snippet"),
    "message_bodies": ("body_text",),
}
_TERM = re.compile(r'"([^"]*)"|(\S+)')


class System(Protocol):
    name: str

    def ranked(self, q: str, limit: int) -> list[str]:
        """The record ids of the first `limit` answers to `q`, best first."""


def terms(q: str) -> list[tuple[str, bool]]:
    """`q`'s terms as (text, is_phrase), split as the store splits them."""
    found = [
        (m.group(1), True) if m.group(1) is not None else (m.group(2), False)
        for m in _TERM.finditer(q)
    ]
    return [(text, phrase) for text, phrase in found if text.strip()]


class StoreSearch:
    def __init__(self, name: str, store: Store, connection_id: str) -> None:
        self.name = name
        self.store = store
        self.grant = Grant.owner(connection_id, *STREAMS)

    def ranked(self, q: str, limit: int) -> list[str]:
        page = self.store.search(self.grant, q, streams=list(STREAMS), limit=limit)
        return [hit.record_id for hit in page.hits]


def _row_text(stream: str, record: dict[str, Any]) -> list[str]:
    return [str(record.get(field) or "") for field in LEXICAL[stream]]


class Fts5Reference:
    name = "reference design, SQLite FTS5 bm25 (unicode61)"

    def __init__(self, path: str, records: dict[str, list[dict[str, Any]]]) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("DROP TABLE IF EXISTS ref")
        self.db.execute(
            "CREATE VIRTUAL TABLE ref USING fts5(stream UNINDEXED, record_id UNINDEXED, "
            "subject, from_name, from_email, snippet, body_text, tokenize='unicode61')"
        )
        for stream, rows in records.items():
            for record in rows:
                values = dict(zip(LEXICAL[stream], _row_text(stream, record), strict=True))
                self.db.execute(
                    "INSERT INTO ref VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        stream,
                        record["id"],
                        *(values.get(f, "") for f in (*LEXICAL["messages"], "body_text")),
                    ),
                )
        self.db.commit()

    def ranked(self, q: str, limit: int) -> list[str]:
        match = " ".join('"' + text.replace('"', '""') + '"' for text, _ in terms(q))
        rows = self.db.execute(
            "SELECT record_id FROM ref WHERE ref MATCH ? ORDER BY bm25(ref), rowid LIMIT ?",
            (match, CANDIDATES),
        ).fetchall()
        return [str(row[0]) for row in rows[:limit]]


class TsvectorReference:
    name = "reference design, Postgres ts_rank_cd (simple tsvector, GIN)"

    def __init__(self, conninfo: str, records: dict[str, list[dict[str, Any]]]) -> None:
        self.db = psycopg.connect(conninfo, autocommit=True)
        self.db.execute("DROP TABLE IF EXISTS ref")
        self.db.execute("CREATE TABLE ref (stream text, record_id text, doc tsvector)")
        with self.db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO ref VALUES (%s, %s, to_tsvector('simple', %s))",
                [
                    (stream, record["id"], " ".join(_row_text(stream, record)).replace("\x00", ""))
                    for stream, rows in records.items()
                    for record in rows
                ],
            )
        self.db.execute("CREATE INDEX ref_doc ON ref USING gin (doc)")
        self.db.execute("ANALYZE ref")

    def ranked(self, q: str, limit: int) -> list[str]:
        parts: list[str] = []
        params: list[str] = []
        for text, phrase in terms(q):
            parts.append(f"{'phraseto_tsquery' if phrase else 'plainto_tsquery'}('simple', %s)")
            params.append(text)
        query = " && ".join(parts)
        rows = self.db.execute(
            f"SELECT record_id FROM ref, ({'SELECT ' + query}) AS q(tq) WHERE doc @@ tq "
            "ORDER BY ts_rank_cd(doc, tq) DESC, record_id LIMIT %s",
            (*params, CANDIDATES),
        ).fetchall()
        return [str(row[0]) for row in rows[:limit]]

    def close(self) -> None:
        self.db.close()


def first_rank(ranked: Sequence[str], target: str) -> int | None:
    """The 1-based rank of `target` among `ranked`, or None."""
    for n, record_id in enumerate(ranked, 1):
        if record_id == target:
            return n
    return None


__all__ += ["first_rank", "terms"]
