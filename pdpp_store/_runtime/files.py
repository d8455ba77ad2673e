"""The SQLite file under a store's reads: whether it is still the one the store opened, and
whether it was written since the readers last looked.

SQLite in WAL mode keeps each connection's page cache for as long as the WAL index says nothing
was committed; a file overwritten in place (or with its WAL and index) does not say so, and a
connection kept between reads would go on answering from what it cached, while a fresh one
meets the damage: some reads would answer, others `storage_unavailable`. So every read looks at
the file first (one `stat`, about a microsecond).

Rules:
1. The path naming another file, or none (replaced by a rename, removed), is
   `storage_unavailable` for every read, as a dropped database is on Postgres: the store keeps
   no connection to a file it did not open.
2. The file written since the last read looked (its modification time or size changed: a
   checkpoint, or an overwrite) makes the readers let go of every connection they keep, and
   invalidate the pool, so the read runs on a fresh connection that reads the file anew
   (`readers`); once the file is no longer a database, every read then meets that.
3. A SQLite error that says the file cannot be read as the database (`errors.file_unusable`)
   lets go of every kept connection too (`connections.dropped`), so a damaged WAL or index,
   which leaves the file itself untouched, fails every read alike.
"""

from __future__ import annotations

import os
from typing import Any

from pdpp_store._core.errors import StoreError, Unavailable

from .errors import RETRY_HINT

__all__ = ["DatabaseFile", "database_file"]


def _replaced() -> StoreError:
    return Unavailable(
        "storage_unavailable",
        "the database is unavailable (its file was replaced or removed)",
        details=dict(RETRY_HINT),
    )


class DatabaseFile:
    """The file a SQLite store opened: its identity (device, inode), and its modification time
    and size as the last read found them."""

    __slots__ = ("_identity", "_path", "_seen")

    def __init__(self, path: str) -> None:
        self._path = os.path.abspath(path)
        found = os.stat(self._path)
        self._identity = (found.st_dev, found.st_ino)
        self._seen = (found.st_mtime_ns, found.st_size)

    def written(self) -> bool:
        """Whether the file was written since the last call (Rule 2); `storage_unavailable` if
        the path no longer names the file the store opened (Rule 1)."""
        try:
            found = os.stat(self._path)
        except OSError as exc:
            raise _replaced() from exc
        if (found.st_dev, found.st_ino) != self._identity:
            raise _replaced()
        seen = (found.st_mtime_ns, found.st_size)
        if seen == self._seen:
            return False
        self._seen = seen
        return True


def database_file(engine: Any) -> DatabaseFile | None:
    """The file under `engine` (a sync `Engine`) where it is SQLite, else None."""
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    assert database is not None  # `sync_url` refuses a SQLite URL without a file
    return DatabaseFile(database)
