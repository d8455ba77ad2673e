"""A boundary audit: everything the database hands to Python, and every statement sent to it.

    with BoundaryAudit(store.engine) as audit:       # an Engine or an AsyncEngine
        store.read_field_window(grant, ref, "body", offset_chars=0, limit_chars=64)
    assert audit.max_text_cell() <= 64
    assert not audit.saw("the secret")

How it sees. The store's reads run below SQLAlchemy, on the driver (`pdpp_store._runtime`,
Rule 6), through one execution point, `Statements`; the audit is one of its observers
(`_runtime.observing`): it gets each read statement with its parameters as the DBAPI gets them,
and every row the statement returned (a read fetches its whole answer, so no row stays in a
driver buffer). Everything else (writes, migrations, a test's own SQL on the engine) runs on
SQLAlchemy, seen by one mechanism for sqlite3, psycopg, aiosqlite and psycopg-async alike:
1. `before_cursor_execute` records each statement and its parameters exactly as they go to the
   DBAPI cursor (BEGIN, SAVEPOINT and executemany batches included).
2. `after_cursor_execute` replaces the execution context's cursor with a recording proxy. The
   `CursorResult` built next takes `context.cursor`, and every row SQLAlchemy hands out is pulled
   through that cursor's `fetchone`/`fetchmany`/`fetchall`; the proxy records each row on its
   way. Patching the cursor itself is impossible: sqlite3's cursor is a C type and the async
   adapters' cursors have `__slots__`. The async adapters buffer rows at execute time and serve
   them through the same three methods, so the proxy sees them at the same point.
3. Conservative about buffers: when such a cursor is closed with rows left unfetched that the
   driver already holds in this process (psycopg's client-side cursors keep the whole result;
   the async adapters buffer it at execute time), those rows are recorded too: they were handed
   to Python even if nobody looked at them. SQLite's own cursor steps lazily, and server-side
   cursors hold nothing yet, so theirs are not.
4. The one path that bypasses `context.cursor` is an INSERT .. RETURNING run as
   "insertmanyvalues" batches, whose rows SQLAlchemy fetches from its local cursor. The audit
   cannot see those rows, so it refuses to pass: leaving the block raises `AuditBlind`.
5. Hooks are engine-wide while the block runs (every connection of the engine, and every read
   of a store on it), and removed on exit, also when the block raises.

`saw` is case-insensitive under the store's own fold (`pdpp_store.fold`): the store keeps a
folded copy of text for matching, and handing out that copy leaks the text just as surely.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from typing import Any, Self

import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.connectors.asyncio import AsyncAdapt_dbapi_cursor
from sqlalchemy.engine.interfaces import ExecuteStyle
from sqlalchemy.ext.asyncio import AsyncEngine

from pdpp_store import fold
from pdpp_store._runtime import observing

__all__ = ["AuditBlind", "BoundaryAudit", "Execution"]

Execution = tuple[str, Any]
"""A statement as sent to the DBAPI, and its parameters (a tuple, a dict, or a list of them)."""


class AuditBlind(AssertionError):
    """Rows reached Python by a path the audit cannot see; a proof relying on it would lie."""


class _RecordingCursor:
    """A DBAPI cursor that records every row fetched through it; anything else passes through."""

    __slots__ = ("_audit", "_cursor")

    def __init__(self, cursor: Any, audit: BoundaryAudit) -> None:
        object.__setattr__(self, "_cursor", cursor)
        object.__setattr__(self, "_audit", audit)

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        if row is not None:
            self._audit._take((row,))
        return row

    def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
        rows = self._cursor.fetchmany(*args, **kwargs)
        self._audit._take(rows)
        return rows

    def fetchall(self) -> Any:
        rows = self._cursor.fetchall()
        self._audit._take(rows)
        return rows

    def close(self) -> None:
        if _holds_its_result(self._cursor):
            self._audit._take(self._cursor.fetchall())
        self._cursor.close()

    def __iter__(self) -> Iterator[Any]:
        for row in self._cursor:
            self._audit._take((row,))
            yield row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._cursor, name, value)


def _holds_its_result(cursor: Any) -> bool:
    """Whether the driver already holds the rest of the cursor's result in this process."""
    if isinstance(cursor, AsyncAdapt_dbapi_cursor):
        return not cursor.server_side
    return (
        isinstance(cursor, psycopg.Cursor)
        and not isinstance(cursor, psycopg.ServerCursor)
        and not cursor.closed
        and cursor.description is not None
    )


def _cell(value: object) -> object:
    return bytes(value) if isinstance(value, memoryview | bytearray) else value


def _size(value: object) -> int:
    return len(value) if isinstance(value, str | bytes) else 0


def _scalars(params: object) -> Iterator[object]:
    """Every scalar inside a DBAPI parameter structure (executemany lists included)."""
    if isinstance(params, Mapping):
        for value in params.values():
            yield from _scalars(value)
    elif isinstance(params, Sequence) and not isinstance(params, str | bytes | bytearray):
        for value in params:
            yield from _scalars(value)
    else:
        yield _cell(params)


class BoundaryAudit:
    """Records statements, parameters and returned cells of `engine` inside a `with` block."""

    def __init__(self, engine: Engine | AsyncEngine) -> None:
        self.engine: Engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
        self.executions: list[Execution] = []
        self.rows: list[tuple[object, ...]] = []
        self.values: list[object] = []
        self._blind: list[str] = []
        self._active = False
        self._observation = ExitStack()

    @property
    def statements(self) -> list[str]:
        return [statement for statement, _ in self.executions]

    # ------------------------------------------------------------------ hooks

    def __enter__(self) -> Self:
        if self._active:
            raise RuntimeError("a BoundaryAudit cannot be entered twice at once")
        event.listen(self.engine, "before_cursor_execute", self._before)
        event.listen(self.engine, "after_cursor_execute", self._after)
        self._observation.enter_context(observing(self))
        self._active = True
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)
        self._observation.close()
        self._active = False
        if self._blind and exc_type is None:
            raise AuditBlind(
                "rows of these statements bypassed the audit (INSERT .. RETURNING run as "
                f"insertmanyvalues): {self._blind}"
            )

    def _before(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        self.executions.append((statement, parameters))

    def _after(
        self, _conn: Any, cursor: Any, statement: str, _params: Any, context: Any, _many: Any
    ) -> None:
        if context is None:
            return
        if (
            context.execute_style is ExecuteStyle.INSERTMANYVALUES
            and context.compiled is not None
            and context.compiled.effective_returning
        ):
            self._blind.append(statement)
        if not isinstance(context.cursor, _RecordingCursor):
            context.cursor = _RecordingCursor(cursor, self)

    # The store's read path (`_runtime.Observer`): statements of this engine only.

    def executing(self, engine: Engine, statement: str, parameters: Any) -> None:
        if engine is self.engine:
            self.executions.append((statement, parameters))

    def fetched(self, engine: Engine, _statement: str, rows: Sequence[Sequence[Any]]) -> None:
        if engine is self.engine:
            self._take(rows)

    def _take(self, rows: Sequence[Any]) -> None:
        for row in rows:
            cells = tuple(_cell(value) for value in row)
            self.rows.append(cells)
            self.values.extend(cells)

    # ------------------------------------------------------------------ questions

    def chars_returned(self) -> int:
        """Code points of every str cell plus bytes of every bytes cell returned."""
        return sum(_size(value) for value in self.values)

    def max_text_cell(self) -> int:
        """The size of the largest str (code points) or bytes (bytes) cell returned; 0 if none."""
        return max((_size(value) for value in self.values), default=0)

    def parameter_values(self) -> list[object]:
        return [value for _, params in self.executions for value in _scalars(params)]

    def saw(self, substring: str) -> bool:
        """Whether `substring` occurs, case-folded, in any returned str or bytes cell (bytes as
        UTF-8), any statement text, or any str or bytes parameter."""
        needle = fold(substring)
        for value in (*self.values, *self.statements, *self.parameter_values()):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            if isinstance(text, str) and needle in fold(text):
                return True
        return False
