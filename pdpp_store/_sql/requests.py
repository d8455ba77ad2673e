"""What an operation asks of a driver, and what it gets back: the protocol between `_ops` and
`_runtime`, with no I/O of its own.

    Execute(statement, params)  -> the rows (mappings by column label) if it returns rows,
                                   else None
    COMMIT                      -> commit what was done so far and begin again (batch ingestion)

A statement is a SQLAlchemy `Executable`, or `DriverSQL`: SQL in the driver's own paramstyle
with positional rows, for the bulk inserts of ingestion (see `DriverSQL`), or `DriverCopy`:
positional rows streamed into a table through the driver's copy protocol (Postgres).

Rules:
1. Rows are read by column label, never by position: every statement labels what it selects,
   and the function that decodes a statement's rows sits next to the statement.
2. A statement that a dialect spells differently is given as a `Builder` of the dialect's
   `Capabilities` (`_sql.dialects`); the driver calls it with its own. Builders are cached, so
   this costs one dictionary lookup per execution.
3. An `Execute` is made whole by the `_sql` builder that returns it (statement, parameters,
   `when`, `bounded`); operations yield it as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.sql.base import Executable

from .dialects import Capabilities

__all__ = [
    "COMMIT",
    "Builder",
    "Commit",
    "DriverCopy",
    "DriverSQL",
    "Execute",
    "Op",
    "Request",
    "Row",
    "Rows",
    "Statement",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DriverSQL:
    """A statement in the driver's own paramstyle (`?` for sqlite3, `%s` for psycopg), run with
    positional rows by `exec_driver_sql`: an executemany without SQLAlchemy's compiled, per-row
    parameter processing, which costs more than the driver itself for rows of short values. It
    still passes through the engine's events, so the boundary audit sees it like any other."""

    sql: str


@dataclass(frozen=True, slots=True)
class DriverCopy:
    """Positional rows (an `Execute`'s `rows`, in `columns` order) streamed into `table` through
    the driver's copy protocol (`COPY ... FROM STDIN`, where `Capabilities.copies_rows`), on
    the write's own connection, in its transaction: no statement per row and no document for
    the server to expand, the rows read as they are sent (they may be produced lazily). The
    engine's cursor events do not see it (no cursor executes it); it is logged as reads are."""

    table: str
    columns: tuple[str, ...]

    @property
    def sql(self) -> str:
        return f"COPY {self.table} ({', '.join(self.columns)}) FROM STDIN"


Statement = Executable | DriverSQL | DriverCopy
Builder = Callable[[Capabilities], Statement]


@dataclass(frozen=True, slots=True)
class Execute:
    statement: Statement | Builder
    params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    when: Callable[[Capabilities], bool] | None = None
    """Run only where this holds of the dialect's capabilities (e.g. filling SQLite's search
    index); elsewhere the reply is None, without a round trip."""
    rows: Iterable[Sequence[Any]] | None = None
    """The positional rows of a `DriverSQL` statement (its parameters) or of a `DriverCopy`;
    read once, when the statement runs (not at all where `when` does not hold)."""
    bounded: bool = False
    """The statement's cost is bounded by a small constant whatever the data: index lookups and
    at most a few chunk rows (a window of at most `MAX_LIMIT_CHARS`, a budgeted projection, a
    catalogue or metadata lookup). An async read on SQLite runs such a statement on the event
    loop, and any other (one that may scan: a match, a search, a blob range) in its
    connection's thread (`_runtime.AsyncReaders`). Set where the statement is built; the
    default is the safe one."""

    def runs_on(self, capabilities: Capabilities) -> bool:
        return self.when is None or self.when(capabilities)

    def prepared(self, capabilities: Capabilities) -> Statement:
        """What the driver runs on a database of these capabilities."""
        if isinstance(self.statement, Executable | DriverSQL | DriverCopy):
            return self.statement
        return self.statement(capabilities)

    def statement_for(self, capabilities: Capabilities) -> Executable:
        """The SQLAlchemy statement (for callers that execute it themselves)."""
        statement = self.prepared(capabilities)
        if isinstance(statement, DriverSQL | DriverCopy):
            raise TypeError("a DriverSQL or DriverCopy statement runs on the driver's rows")
        return statement


class Commit:
    __slots__ = ()


COMMIT = Commit()

Request = Execute | Commit
Row = Mapping[str, Any]
Rows = Sequence[Row]
Op = Generator[Request, Rows | None, T]
"""An operation: yields requests, receives each one's answer, returns its result."""
