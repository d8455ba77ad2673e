"""Migration: bringing a database to the schema this library needs, with Alembic.

Rules:
1. Migration is serialised: a Postgres advisory lock, a SQLite `BEGIN IMMEDIATE`; whoever gets
   it second finds the database at head and does nothing.
2. A database at a revision this library does not know (a newer library wrote it), or one that
   may not be migrated (`upgrade=False`), is `storage_unavailable`, naming both revisions.
3. The migrations ship inside the wheel (`pdpp_store/_alembic`); in a checkout they are the
   repository's `migrations/`.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, text

from pdpp_store._core.errors import Unavailable

from .engines import WRITE_OPTION

__all__ = ["migrate"]

_MIGRATION_LOCK = 0x7064_7070_6D69_6772  # "pdppmigr": the advisory lock that serialises migration


def _script_location() -> str:
    packaged = Path(__file__).parent.with_name("_alembic")  # beside `_runtime/`
    if packaged.is_dir():
        return str(packaged)
    return str(Path(__file__).resolve().parents[2] / "migrations")


def _current_revision(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def migrate(connection: Connection, *, upgrade: bool = True) -> None:
    """Bring the database behind `connection` to the newest revision (Rule 1); the caller
    commits. With `upgrade=False`, only check that it is there: a database that is not is
    `storage_unavailable`, naming the command that migrates it."""
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    config = Config()
    config.set_main_option("script_location", _script_location())
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    current = _current_revision(connection)
    if current == head:
        return
    known = current is None or any(rev.revision == current for rev in script.walk_revisions())
    if not upgrade or not known:
        raise Unavailable(
            "storage_unavailable",
            f"the database schema is at revision {current!r}, this library needs {head!r}"
            + (": run `pdpp-store migrate`" if known else " (a newer library wrote it)"),
            details={"schema_revision": current, "required_revision": head},
        )
    if connection.in_transaction():
        connection.rollback()
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
    else:
        connection.execution_options(**{WRITE_OPTION: True})
        connection.execute(text("SELECT 1"))  # begins the write transaction: BEGIN IMMEDIATE
    if _current_revision(connection) == head:
        return  # another opener migrated it while this one waited for the lock
    config.attributes["connection"] = connection
    try:
        command.upgrade(config, "head")
    except CommandError as exc:
        raise Unavailable("storage_unavailable", f"cannot migrate the database: {exc}") from exc
