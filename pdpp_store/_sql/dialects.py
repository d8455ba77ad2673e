"""Everything the store knows about its two databases, in one place.

The rest of the package asks `Capabilities` questions instead of comparing dialect names:
statement builders take the dialect's capabilities as an argument (`_sql.requests.Builder`), the
drivers read how to open, begin and read from them, and the schema takes its key type from here.
Spelling that differs but means the same (SQLite's `instr`, `max`, `min` for `strpos`,
`greatest`, `least`) is a construct compiled per dialect (`@compiles`), so the builders use one
name for it.

Rules:
1. A difference between the databases is written here as a capability (a fact about what the
   database does or runs well), never as `if dialect == ...` elsewhere.
2. A capability names the behaviour, not the database: a third database would be one more
   `Capabilities` value, not edits across the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, Text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import GenericFunction
from sqlalchemy.types import TypeEngine

__all__ = [
    "MAX_SQL_INT",
    "POSTGRESQL",
    "SQLITE",
    "Capabilities",
    "capabilities",
    "greatest",
    "key_text",
    "least",
    "strpos",
]

MAX_SQL_INT = 2**31 - 1
"""The largest integer every database's string functions take (Postgres `substr` and `strpos`
are 32-bit), so the largest offset or length a statement may carry."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    name: str
    """SQLAlchemy's name of the dialect (the key of `capabilities`)."""
    sync_driver: str
    async_driver: str
    streams_window_functions: bool
    """A window function (`lead() OVER (ORDER BY key)`) over an index scan is streamed, so a
    `LIMIT 1` on top of it stops at the first row (Postgres). SQLite materialises the window
    first, which would read every chunk of a field."""
    autocommit_reads: bool
    """Reads run with the driver in autocommit: each statement its own snapshot, no BEGIN and
    COMMIT round trips (Postgres). SQLite reads run in its implicit per-statement transactions,
    which the store arranges itself (`begins_itself`)."""
    begins_itself: bool
    """The driver's own transaction handling is switched off and the store emits `BEGIN
    IMMEDIATE` for writes (SQLite: a read-then-write operation is one serialised transaction)."""
    byte_order_collation: str | None
    """The collation that makes text compare byte-wise (Postgres "C"); None where that is
    already the default (SQLite's BINARY)."""
    file_based: bool
    """The database is a file named by the URL (SQLite): an in-memory one would be a different,
    empty database on each connection, so it is refused."""
    plans_by_statistics: bool
    """The planner needs current statistics to use an index for keyed lookups, and where
    autovacuum is off or behind the store analyses record tables itself (Postgres)."""
    alters_by_copy: bool
    """`ALTER TABLE` cannot drop or change a column, so migrations rebuild the table (Alembic's
    batch mode: SQLite)."""
    runs_in_process: bool
    """The database engine runs inside this process (SQLite): its work holds the interpreter
    between statements, so reads on more than a few connections at once only queue for it (an
    async front keeps `IN_PROCESS_READERS` read connections, not one per concurrent task)."""
    positional_marker: str
    """The driver's placeholder for a positional parameter (`_sql.requests.DriverSQL`)."""
    search_index_is_side_table: bool
    """The search index (migration 0005) is a side table that the store's writes fill and that
    is asked with `MATCH` (SQLite: FTS5 `trigram`). Otherwise it is an expression index on
    `field_chunks` that the database maintains and that answers `LIKE` (Postgres: `pg_trgm`
    GIN)."""


SQLITE = Capabilities(
    name="sqlite",
    sync_driver="sqlite",
    async_driver="sqlite+aiosqlite",
    streams_window_functions=False,
    autocommit_reads=False,
    begins_itself=True,
    byte_order_collation=None,
    file_based=True,
    alters_by_copy=True,
    plans_by_statistics=False,
    runs_in_process=True,
    positional_marker="?",
    search_index_is_side_table=True,
)

POSTGRESQL = Capabilities(
    name="postgresql",
    sync_driver="postgresql+psycopg",
    async_driver="postgresql+psycopg",
    streams_window_functions=True,
    autocommit_reads=True,
    begins_itself=False,
    byte_order_collation="C",
    file_based=False,
    alters_by_copy=False,
    plans_by_statistics=True,
    runs_in_process=False,
    positional_marker="%s",
    search_index_is_side_table=False,
)

_BY_NAME = {caps.name: caps for caps in (SQLITE, POSTGRESQL)}


def capabilities(name: str) -> Capabilities:
    """The capabilities of a dialect by SQLAlchemy's name (`engine.dialect.name`). A dialect the
    store was not written for is refused, never guessed at."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"pdpp_store does not support the {name!r} dialect") from None


def key_text() -> TypeEngine[str]:
    """Text compared byte-wise on every backend (the type of every key column)."""
    text: TypeEngine[str] = Text()
    for caps in _BY_NAME.values():
        if caps.byte_order_collation is not None:
            text = text.with_variant(Text(collation=caps.byte_order_collation), caps.name)
    return text


# ---------------------------------------------------------------- one name, spelled per dialect


class strpos(GenericFunction[int]):
    """1-based position of the second argument in the first, 0 when absent; code points."""

    type = Integer()
    inherit_cache = True


class greatest(GenericFunction[int]):
    type = Integer()
    inherit_cache = True


class least(GenericFunction[int]):
    type = Integer()
    inherit_cache = True


@compiles(strpos, "sqlite")
def _strpos_sqlite(element: strpos, compiler: SQLCompiler, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)})"


@compiles(greatest, "sqlite")
def _greatest_sqlite(element: greatest, compiler: SQLCompiler, **kw: Any) -> str:
    return f"max({compiler.process(element.clauses, **kw)})"


@compiles(least, "sqlite")
def _least_sqlite(element: least, compiler: SQLCompiler, **kw: Any) -> str:
    return f"min({compiler.process(element.clauses, **kw)})"
