"""Running operations: the only package that talks to a database connection.

Every operation of the store is written once, as a generator (`Op`) that yields requests and
receives their answers, with no I/O of its own (see `_ops`; the requests are `_sql.requests`').
Thin drivers run them: writes on SQLAlchemy (`run_sync` on an `Engine`, `run_async` on an
`AsyncEngine`), reads below SQLAlchemy on the driver of a kept connection (`HeldReader`,
`AsyncReaders`). A statement that depends on the dialect is built here, from the engine's
`Capabilities` (`_sql.dialects`), and every row is answered as a mapping by column label.

    errors.py        database errors as `StoreError`s: `translate_db_error`, and `translating`,
                     the one context manager every boundary below uses
    engines.py       URLs, engine options and pool bounds, SQLite's pragmas, BEGIN where the
                     store begins itself, `opening` (the errors of opening a store)
    migration.py     `migrate`, serialised between openers
    files.py         SQLite: whether the file under the reads is still the one opened, or written
    connections.py   giving back, discarding and letting go of connections (shielded when async)
    transactions.py  write transactions on SQLAlchemy: `run_sync`, `run_async`
    executor.py      the read executor: plans, the one execution point of reads (`Statements`),
                     observers, and the loops that run a read's statements on each front
    slots.py         the read slots of an `AsyncStore`
    readers.py       the reader pools: `HeldReader` (sync), `AsyncReaders` (async)

Rules (numbered as before the split, as other modules cite them; each module states its own
in detail, and imports only modules listed above it in the table, so there is no circle):
1. One operation runs on one connection. A write runs in one transaction (or one per `COMMIT`);
   if it raises, everything since the last commit is rolled back. A read runs in none
   (`transactions`).
2. Database errors are translated to `StoreError` in one place, `errors.translating`, by SQLSTATE
   (Postgres) or SQLite result code, never by message or class-name text, around the whole life
   of a connection: checkout, execute, commit and release.
3. Writes run in one transaction each (where the store begins itself, SQLite, `BEGIN IMMEDIATE`);
   reads run without an explicit transaction (`engines`).
4. A cancelled async operation never hands its connection back to the pool: it is discarded in
   a shielded cleanup (`connections`).
5. Migration is serialised: a Postgres advisory lock, a SQLite `BEGIN IMMEDIATE` (`migration`).
6. Reads run below SQLAlchemy, on the DBAPI connection of a held connection, each statement
   compiled once into a `Plan`; every read statement passes through `Statements.send` and
   `Statements.received`, the one execution point of reads, where `observing` lets an observer
   see each statement, its parameters and every row (`executor`). Writes and migrations stay on
   SQLAlchemy, whose cursor events show them.
7. Read connections are kept between reads; an error that says the database dropped a
   connection lets go of every kept one, so only the read that met it fails (`readers`). On
   SQLite each read first looks at the file (`files`): replaced, every read is
   `storage_unavailable`; written, the kept connections are let go of.
"""

from .engines import (
    DEFAULT_BUSY_TIMEOUT_S,
    IN_PROCESS_READERS,
    MAX_BUSY_TIMEOUT_S,
    READER_SLOTS,
    WRITER_SLOTS,
    async_url,
    check_busy_timeout,
    configure_sqlite,
    engine_options,
    install_hooks,
    opening,
    sync_url,
)
from .errors import RETRY_AFTER_S, busy, translate_db_error, translating
from .executor import Observer, Plan, Statements, observing
from .migration import _script_location, migrate
from .readers import AsyncReaders, HeldReader
from .slots import _Slots
from .transactions import run_async, run_sync

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "IN_PROCESS_READERS",
    "MAX_BUSY_TIMEOUT_S",
    "READER_SLOTS",
    "RETRY_AFTER_S",
    "WRITER_SLOTS",
    "AsyncReaders",
    "HeldReader",
    "Observer",
    "Plan",
    "Statements",
    "_Slots",
    "_script_location",
    "async_url",
    "busy",
    "check_busy_timeout",
    "configure_sqlite",
    "engine_options",
    "install_hooks",
    "migrate",
    "observing",
    "opening",
    "run_async",
    "run_sync",
    "sync_url",
    "translate_db_error",
    "translating",
]
