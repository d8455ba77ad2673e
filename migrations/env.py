"""Alembic environment: one history for SQLite and Postgres.

`Store.open` passes its own connection in `config.attributes["connection"]`; the command line
passes a URL with `-x url=...` or `PDPP_STORE_URL`.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection, create_engine

from pdpp_store._sql.dialects import capabilities
from pdpp_store._sql.tables import metadata


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=capabilities(connection.dialect.name).alters_by_copy,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get("PDPP_STORE_URL")
    if not url:
        raise SystemExit("give the database URL with -x url=... or PDPP_STORE_URL")
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            _migrate(conn)
            conn.commit()
    finally:
        engine.dispose()


_run()
