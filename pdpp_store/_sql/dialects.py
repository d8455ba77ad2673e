"""Everything the store knows about its two databases, in one place.

The rest of the package asks `Capabilities` questions instead of comparing dialect names:
statement builders take the dialect's capabilities as an argument (`_sql.requests.Builder`), the
drivers read how to open, begin and read from them, and the schema takes its key type from here.
Spelling that differs but means the same is written here once, in the construct or type that
owns it, so the builders use one name for it:

- functions compiled per dialect (`@compiles`): `strpos`, `greatest`, `least` (SQLite's
  `instr`, `max`, `min`), and `id_set`, the names of one list parameter as a subquery;
- `IdList`, the type of that parameter (a text array where lists bind as arrays, else JSON);
- `insert_ignoring`, the dialect's `INSERT .. ON CONFLICT DO NOTHING` construct;
- `bound_rows`, rows bound as one JSON parameter, read back as a table;
- `exact_number`, a number parameter as the exact value of a NUMERIC column, and
  `exact_numeric`, the same for a bound value in a SQLAlchemy statement.

Rules:
1. A difference between the databases is written here as a capability (a fact about what the
   database does or runs well), never as `if dialect == ...` elsewhere.
2. A capability names the behaviour, not the database: a third database would be one more
   `Capabilities` value (and its spellings below), not edits across the package.
3. Only this module names a dialect: `@compiles(..., name)` and the per-dialect spellings
   keyed by `Capabilities.name`. Other modules may hold SQL that only one database runs (the
   SQLite search index's side table, Postgres' statistics views) when a capability guards it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import cache, lru_cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Insert,
    Integer,
    Numeric,
    Subquery,
    Text,
    bindparam,
    cast,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import GenericFunction
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine

__all__ = [
    "MAX_SQL_INT",
    "POSTGRESQL",
    "SQLITE",
    "BoundColumns",
    "Capabilities",
    "IdList",
    "bound_rows",
    "capabilities",
    "exact_number",
    "exact_numeric",
    "greatest",
    "id_set",
    "insert_adding",
    "insert_ignoring",
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
    sums_exactly: bool
    """`sum` over a NUMERIC column is exact whatever its values (Postgres). Elsewhere (SQLite)
    it sums integers in 64 bits, failing on overflow, and any other number as a double, so an
    exact sum is built from parts (`_sql.aggregates`)."""
    binds_arrays: bool
    """A Python list binds as one array parameter (Postgres `text[]`); elsewhere an `IdList`
    is bound as one JSON text and read back with the database's JSON functions (SQLite)."""
    copies_rows: bool
    """Many rows go into a table cheapest through the driver's copy protocol (Postgres
    `COPY ... FROM STDIN`, `requests.DriverCopy`): no statement per row, nothing to expand on
    the server. Elsewhere they go as an executemany (SQLite: in process, the cheapest)."""


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
    sums_exactly=False,
    binds_arrays=False,
    copies_rows=False,
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
    sums_exactly=True,
    binds_arrays=True,
    copies_rows=True,
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


class id_set(GenericFunction[str]):
    """The names of an `IdList` parameter as a one-column subquery, for `column IN (...)`."""

    type = Text()
    inherit_cache = True


@compiles(id_set, "sqlite")
def _id_set_sqlite(element: id_set, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(SELECT value FROM json_each({compiler.process(element.clauses, **kw)}))"


@compiles(id_set, "postgresql")
def _id_set_postgresql(element: id_set, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(SELECT unnest({compiler.process(element.clauses, **kw)}))"


# ---------------------------------------------------------------- one type, bound per dialect


class IdList(TypeDecorator[list[str]]):
    """A list of names bound as one parameter, whatever its length: a text array where lists
    bind as arrays (`Capabilities.binds_arrays`: Postgres), else a JSON array (SQLite). (An
    expanding IN list binds one parameter per name, and a grant's `resources` may name more than
    a database accepts: 65,535 on Postgres, 32,766 on SQLite.)"""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if capabilities(dialect.name).binds_arrays:
            return dialect.type_descriptor(ARRAY(Text()))
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: list[str] | None, dialect: Dialect) -> Any:
        if value is None or _BY_NAME[dialect.name].binds_arrays:
            return value
        return _json_list(tuple(value))


@lru_cache(maxsize=1024)
def _json_list(names: tuple[str, ...]) -> str:
    """A grant's list as JSON, once per distinct list (a grant's lists come back on each read)."""
    return json.dumps(names)


# ---------------------------------------------------------------- constructs chosen per dialect


@cache
def insert_ignoring(table: Any, caps: Capabilities) -> Insert:
    """An INSERT into `table` that skips rows whose key is already there (`ON CONFLICT DO
    NOTHING`), in the dialect's own construct (the clause is not in SQLAlchemy's generic one).
    Cached: a driver compiles a statement once per statement object."""
    statement: Insert = _INSERTS[caps.name](table).on_conflict_do_nothing()
    return statement


def insert_adding(table: Any, caps: Capabilities, rows: Any, added: str) -> Insert:
    """An INSERT into `table` of the rows `rows` selects (columns named as `table`'s, in its
    order), which adds a row's `added` to the stored row's where its key is already there
    (`ON CONFLICT DO UPDATE`), in the dialect's own construct."""
    names = [column.name for column in table.columns]
    statement = _INSERTS[caps.name](table).from_select(names, rows)
    key = [column.name for column in table.primary_key.columns]
    adding: Insert = statement.on_conflict_do_update(
        index_elements=key,
        set_={added: table.c[added] + statement.excluded[added]},
    )
    return adding


_INSERTS: dict[str, Callable[[Any], Any]] = {
    SQLITE.name: sqlite_insert,
    POSTGRESQL.name: postgresql_insert,
}


BoundColumns = tuple[tuple[str, bool], ...]
"""The columns of a table of bound rows: (name, is a key column (text) or an integer)."""


def bound_rows(caps: Capabilities, name: str, columns: BoundColumns) -> Subquery:
    """The rows bound as JSON in parameter `name` (one JSON array of arrays), as a table of
    `columns`, to be joined by equality (which every planner turns into key lookups; a row-value
    `IN` list was seen to be scanned). One parameter whatever the number of rows, so one
    statement to plan: bound as a `UNION` of one `SELECT` per row, Postgres spent 10-15 ms
    planning a page. Key columns come in the key columns' own collation, or Postgres cannot use
    their indexes for the join."""
    return _BOUND_ROWS[caps.name](name, columns)


def _bound_rows_sqlite(name: str, columns: BoundColumns) -> Subquery:
    rows = bindparam(name, type_=Text())
    elements = func.json_each(rows).table_valued("value").alias(f"{name}_rows")

    def item(number: int, key: bool) -> ColumnElement[Any]:
        return func.json_extract(elements.c.value, literal_column(f"'$[{number}]'"))

    return select(
        *(item(number, key).label(column) for number, (column, key) in enumerate(columns))
    ).subquery(f"{name}_table")


def _bound_rows_postgresql(name: str, columns: BoundColumns) -> Subquery:
    rows = bindparam(name, type_=Text())
    elements = (
        func.jsonb_array_elements(cast(rows, JSONB)).table_valued("value").alias(f"{name}_rows")
    )

    def item(number: int, key: bool) -> ColumnElement[Any]:
        value = elements.c.value.op("->>")(literal_column(str(number)))
        return value.collate("C") if key else cast(value, Integer)

    return select(
        *(item(number, key).label(column) for number, (column, key) in enumerate(columns))
    ).subquery(f"{name}_table")


_BOUND_ROWS: dict[str, Callable[[str, BoundColumns], Subquery]] = {
    SQLITE.name: _bound_rows_sqlite,
    POSTGRESQL.name: _bound_rows_postgresql,
}


def exact_number(marker: str, caps: Capabilities) -> str:
    """A positional parameter holding a Python int or float, as the exact NUMERIC value of that
    number. Postgres converts a double to NUMERIC with 15 significant digits, so the double goes
    through its text, which since Postgres 12 is the shortest that reads back as the same double
    (`extra_float_digits` 1, the default); an int is exact either way. SQLite stores the driver's
    int or float as it is (its own text-to-real conversion is not always exact)."""
    if caps.name == "postgresql":
        return f"CAST(CAST({marker} AS TEXT) AS NUMERIC)"
    return marker


class ExactNumber(TypeDecorator[Any]):
    """A number bound as the exact value `exact_number` stores (`field_values.num`): on a
    database that converts a double to NUMERIC through 15 significant digits (Postgres), a
    float binds as the decimal of its shortest text (Python's `repr`, the same digits Postgres
    writes for a double since version 12), an int as itself; elsewhere (SQLite) the int or float
    binds as it is and compares as the stored one does."""

    impl = Numeric
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == POSTGRESQL.name:
            return dialect.type_descriptor(Numeric())
        return dialect.type_descriptor(NullType())  # no processing: SQLite's Numeric rounds

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if isinstance(value, float) and dialect.name == POSTGRESQL.name:
            return Decimal(repr(value))
        return value


def exact_numeric(value: int | float) -> ColumnElement[Any]:
    """`value` as a bound parameter compared exactly with `field_values.num` (`ExactNumber`)."""
    return bindparam(None, value, type_=ExactNumber(), unique=True)
