"""Test material: the real manifests, a small mailbox, grants, text generators, and the oracles and
hypothesis helpers the suites share."""

from __future__ import annotations

import itertools
import json
import random
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdpp_store import Grant

if TYPE_CHECKING:
    from hypothesis import settings

FIXTURES = Path(__file__).parent / "fixtures"
MAILBOX = "cin_mail"
OTHER_MAILBOX = "cin_other"


@cache
def _manifest_text(name: str) -> str:
    return (FIXTURES / "manifests" / f"{name}.json").read_text(encoding="utf-8")


def manifest(name: str) -> dict[str, Any]:
    """A fresh copy of a real PDPP manifest: `gmail`, `slack` or `chatgpt`."""
    loaded: dict[str, Any] = json.loads(_manifest_text(name))
    return loaded


def setup_mailbox(store: Any, *connections: str) -> str:
    """Register the gmail manifest and the given connections (default: `MAILBOX`)."""
    gmail = manifest("gmail")
    store.register_manifest(gmail)
    for connection_id in connections or (MAILBOX,):
        store.add_connection(connection_id, gmail["connector_id"])
    connector: str = gmail["connector_id"]
    return connector


def body(record_id: str, text: str, received_at: str = "2026-03-01T10:00:00Z") -> dict[str, Any]:
    """A gmail `message_bodies` record."""
    return {
        "id": record_id,
        "message_id": f"m-{record_id}",
        "message_received_at": received_at,
        "body_text": text,
        "body_html": None,
        "charset": "utf-8",
    }


def grant(*streams: dict[str, Any], grant_id: str = "g-test", **extra: Any) -> Grant:
    return Grant.from_dict({"grant_id": grant_id, "streams": list(streams), **extra})


def owner(stream: str = "message_bodies", connection_id: str = MAILBOX) -> Grant:
    return Grant.owner(connection_id, stream)


MIXED_ALPHABET = "abcdefghij ÉéüßΣσς名前😀🎉\u0301KİẞxyzABC,.\n"


def mixed_text(size: int, seed: int = 7) -> str:
    """Deterministic text of `size` code points mixing ASCII, accents, CJK, combining marks and
    astral characters."""
    rng = random.Random(seed)
    return "".join(rng.choice(MIXED_ALPHABET) for _ in range(size))


def big_text(size: int, mixed: bool) -> str:
    """A large deterministic text, built by repetition (fast) with a unique tail marker."""
    unit = "Dear Zoë, the invoice for März is attached 😀. " if mixed else "Dear Joe, the invoice. "
    tail = "UNIQUE-TAIL-MARKER"
    return (unit * (size // len(unit) + 1))[: size - len(tail)] + tail


# --- Helpers for the grant, projection, blob and error-order suites -------------------------------

RECORD_TABLES = (
    "records",
    "fields",
    "field_chunks",
    "field_values",
    "search_words",
    "search_vocabulary",
)
"""The tables that hold record data (a statement naming none of them reads no record row)."""


def ref_id(record_id: str, connection_id: str = MAILBOX, stream: str = "message_bodies") -> str:
    """The self-contained id `{connection}/{stream}:{record_id}`."""
    return f"{connection_id}/{stream}:{record_id}"


def attachment(
    record_id: str, blob_ref: dict[str, Any] | None, received_at: str = "2026-03-01T10:00:00Z"
) -> dict[str, Any]:
    """A gmail `attachments` record pointing at a blob (`BlobInfo.as_ref()`)."""
    return {
        "id": record_id,
        "message_id": f"m-{record_id}",
        "filename": f"{record_id}.bin",
        "part_index": "1",
        "message_received_at": received_at,
        "hydration_status": "hydrated",
        "blob_ref": blob_ref,
    }


class SqlLog:
    """Every SQL statement a store (any front) runs inside ``with SqlLog(store) as log:``;
    ``log.touching(*RECORD_TABLES)`` lists those that read record data. Statements run on
    SQLAlchemy (writes) are seen by its cursor events, the store's reads (run below it) by the
    runtime's observation hook (`pdpp_store._runtime.observing`)."""

    def __init__(self, store: Any) -> None:
        engine = store.engine
        self._engine = getattr(engine, "sync_engine", engine)  # an AsyncEngine's core fires events
        self.statements: list[str] = []
        self._observation: Any = None

    def _record(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.statements.append(statement)

    def executing(self, engine: Any, statement: str, _parameters: Any) -> None:
        if engine is self._engine:
            self.statements.append(statement)

    def fetched(self, *_: Any) -> None:
        pass

    def __enter__(self) -> SqlLog:
        from sqlalchemy import event

        from pdpp_store._runtime import observing

        event.listen(self._engine, "before_cursor_execute", self._record)
        self._observation = observing(self)
        self._observation.__enter__()
        return self

    def __exit__(self, *_: object) -> None:
        from sqlalchemy import event

        event.remove(self._engine, "before_cursor_execute", self._record)
        self._observation.__exit__(None, None, None)

    def touching(self, *tables: str) -> list[str]:
        """The statements that name any of `tables` as a whole word."""
        import re

        pattern = re.compile(r"\b(" + "|".join(map(re.escape, tables)) + r")\b", re.IGNORECASE)
        return [text for text in self.statements if pattern.search(text)]


# --- Helpers for the window, match, cursor and identity suites ------------------------------------

ENVELOPE_KEYS = (
    "object",
    "stream",
    "record_id",
    "connection_id",
    "field",
    "window",
    "next",
    "previous",
    "meta",
)
"""The keys of the field-window envelope (docs/contract.md §3, "Field windows"), in order (`next`
and `previous`, the continuations that read the neighbouring windows, are the library's
additions: docs/decisions.md, "Continuations")."""

WINDOW_KEYS = (
    "text",
    "total_chars",
    "start_chars",
    "end_chars",
    "limit_chars",
    "complete",
    "has_more",
    "match_start_chars",
    "match_end_chars",
    "next_offset_chars",
    "previous_offset_chars",
    "next_cursor",
    "previous_cursor",
    "next_match_cursor",
)
"""The keys of the field-window envelope's `window` object (contract §3), in order."""


def sha256_of(text: str) -> str:
    """The digest of a string (docs/contract.md §1, "Data model"): `sha256:` and the hex SHA-256 of
    its UTF-8 bytes."""
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical(value: Any) -> str:
    """The canonical JSON text a non-string field is windowed over (sorted keys, minified)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def expected_window(text: str, offset: int, limit: int) -> dict[str, Any]:
    """The oracle of contract §3's envelope arithmetic: the `window` keys that follow from the
    field's text, an offset and a limit, by Python slicing and the envelope math (match keys and
    cursors aside)."""
    total = len(text)
    start = min(offset, total)
    piece = text[start : start + limit]
    end = min(start + len(piece), total)
    has_more = end < total
    return {
        "text": piece,
        "total_chars": total,
        "start_chars": start,
        "end_chars": end,
        "limit_chars": limit,
        "complete": start == 0 and end >= total,
        "has_more": has_more,
        "next_offset_chars": end if has_more else None,
        "previous_offset_chars": max(0, start - limit) if start > 0 else None,
    }


def assert_window(envelope: dict[str, Any], text: str, offset: int, limit: int) -> dict[str, Any]:
    """Check an envelope's `window` against `expected_window` (every key of the object present,
    no other; cursors null exactly when their offsets are) and return the window."""
    window: dict[str, Any] = envelope["window"]
    assert set(window) == set(WINDOW_KEYS)
    expected = expected_window(text, offset, limit)
    assert {key: window[key] for key in expected} == expected, (offset, limit)
    assert (window["next_cursor"] is None) == (window["next_offset_chars"] is None)
    assert (window["previous_cursor"] is None) == (window["previous_offset_chars"] is None)
    return window


def assert_store_error(
    error: BaseException, code: str, status: int, param: str | None = None
) -> None:
    """`error` is a `StoreError` with this code and HTTP status (and `param`, when given)."""
    from pdpp_store import StoreError

    assert isinstance(error, StoreError), repr(error)
    assert (error.code, error.http_status) == (code, status), repr(error)
    if param is not None:
        assert error.param == param, (repr(error), error.param)


def unicode_texts(max_body: int = 3072) -> Any:
    """A hypothesis strategy: arbitrary Unicode (no surrogates, no NUL) of up to `max_body` + 40
    code points, so several 1024-code-point chunks occur. A drawn head, then a body drawn from a
    drawn alphabet (plus astral characters, combining marks or case-fold specials), which costs
    little of hypothesis's buffer however long the text."""
    from hypothesis import strategies as st

    chars = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
    spice = ("😀", "e\u0301", "\U0001f468\u200d\U0001f469", "\u03a3\u03c3\u03c2\u212a\u1e9e\u00df")

    @st.composite
    def texts(draw: st.DrawFn) -> str:
        head = draw(st.text(chars, max_size=40))
        alphabet = draw(st.text(chars, min_size=1, max_size=30)) + draw(st.sampled_from(spice))
        size = draw(st.integers(0, max_body))
        rng = draw(st.randoms(use_true_random=False))
        return head + "".join(rng.choice(alphabet) for _ in range(size))

    return texts()


def on_one_store() -> settings:
    """The hypothesis settings of a property whose examples all run on one store (the
    function-scoped `each_database` fixture): 40 examples, no deadline."""
    from hypothesis import HealthCheck, settings

    return settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )


_EXAMPLE_IDS = itertools.count()


def example_body(store: Any, text: str) -> str:
    """Store `text` as the body of a new record in `MAILBOX` and return the record's id: the store
    outlives a hypothesis example, so each example gets a record of its own."""
    record_id = f"p{next(_EXAMPLE_IDS)}"
    store.upsert_records(MAILBOX, "message_bodies", [body(record_id, text)])
    return record_id


def run_alembic(url: str, *args: str) -> None:
    """Run the project's Alembic command line on the database at `url` (e.g. `downgrade 0004`)."""
    import os
    import subprocess
    import sys

    from pdpp_store._runtime import sync_url

    subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url={sync_url(url)}", *args],
        cwd=Path(__file__).resolve().parents[1],
        check=True,
        capture_output=True,
        env={**os.environ},
    )
