"""P0 gate, proof 3: the proofs bite. Each test installs a deliberately broken variant of the
library with `monkeypatch` and shows that the very checks of the gate (`check_bounded` of
`test_gate_bounded`, `check_probe` of `test_gate_canaries`) pass on the real library and FAIL,
for the right reason, on the broken one:

    (a) the statements that cut windows also select the whole field      check_bounded
    (b) grant visibility removed from every statement (`true()`)         check_probe: resources,
                                                                         time, deletion, blobs of
                                                                         other connections
    (c) the field-granted check removed (`allows_field` always True)     check_probe: fields
    (d) the blob visibility check removed                                check_probe: blobs
    (e) a result of an earlier request kept and logged, or appended to   check_probe: logs and
        a later error                                                    errors

Run on the sync store of each database (the fronts share every statement). Statement builders
in `_sql` are cached, so every cache is cleared before a variant is installed and after it is
removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from _bites import breakable_monkeypatch, clear_statement_caches
from sqlalchemy import Engine, Select, func, literal, literal_column, select, true
from test_gate_bounded import (
    FIELD,
    GRANT,
    RECORD,
    check_bounded,
    load_big,
    window_text,
)
from test_gate_canaries import (
    OWNER,
    A,
    Record,
    capture_everything,
    check,
    check_probe,
    load,
    probes,
)

from pdpp_store import Store, StoreError, StreamGrant
from pdpp_store._ops.catalogue import Operation
from pdpp_store._runtime import observing
from pdpp_store._sql import blobs as blob_sql
from pdpp_store._sql import match as match_sql
from pdpp_store._sql import reads as read_sql
from pdpp_store._sql import visibility as sql
from pdpp_store._sql.tables import field_chunks, fields

LEAK = "unauthorized canary"


@pytest.fixture
def breakable(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """`monkeypatch`, with the statement caches cleared around the broken variant's life."""
    yield from breakable_monkeypatch(monkeypatch)


@pytest.fixture
def sync_store(db_url: str) -> Iterator[Store]:
    with Store.open(db_url) as opened:
        yield opened


@pytest.fixture
def canaries(sync_store: Store, caplog: pytest.LogCaptureFixture) -> Store:
    capture_everything(caplog)
    load(sync_store)
    return sync_store


def _bites(
    store: Store,
    names: list[str],
    caplog: pytest.LogCaptureFixture,
    breaking: Callable[[], None],
) -> None:
    """The named probes pass on the real library, and each fails with a leak once broken."""
    table = probes()
    for name in names:
        check_probe(store, table[name], caplog)
    breaking()
    clear_statement_caches()
    for name in names:
        with pytest.raises(AssertionError, match=LEAK):
            check_probe(store, table[name], caplog)


# ---------------------------------------------------------------- (a) a whole body crosses


BITE_FIELD_CHARS = 300_000
"""Small enough to ingest at once, and still a megabyte of Python memory once it crosses."""


WHOLE = "whole_field"
"""The label of the leaking column, to find the broken statement among those sent."""


def _with_whole_field(statement: Any) -> Any:
    """`statement`, plus the field's whole text (every chunk, in one column): the window the
    caller gets is unchanged, so only the boundary can tell. The separator is SQL text, not a
    value: a value would be a literal-execute parameter, and the statement would run on
    SQLAlchemy instead of the store's read path."""
    every = field_chunks.alias("every")
    separator: Any = literal_column("''")  # typed `str` by SQLAlchemy, which renders SQL text too
    whole = select(func.aggregate_strings(every.c.text, separator)).where(
        every.c.connection_id == fields.c.connection_id,
        every.c.stream == fields.c.stream,
        every.c.record_id == fields.c.record_id,
        every.c.path == fields.c.path,
    )
    return statement.add_columns(whole.scalar_subquery().label(WHOLE))


def _leaking(builder: Callable[..., Any]) -> Callable[..., Any]:
    def broken(*args: Any) -> Any:
        return _with_whole_field(builder(*args))

    return broken


def test_a_window_statement_selecting_the_whole_field_fails_the_bounded_proof(
    sync_store: Store, breakable: pytest.MonkeyPatch
) -> None:
    big = load_big(sync_store, BITE_FIELD_CHARS, 200_000)
    first = sync_store.read_field_window(GRANT, RECORD, FIELD, limit_chars=1000)
    reads: list[Callable[[], Any]] = [
        lambda: sync_store.read_field_window(GRANT, RECORD, FIELD, offset_chars=len(big.text) - 50),
        lambda: sync_store.read_field_window(GRANT, RECORD, FIELD, q="unique-tail-marker"),
        lambda: sync_store.read_field_window(GRANT, RECORD, FIELD, cursor=first.next_cursor),
    ]
    for read in reads:
        check_bounded(sync_store, read, window_text)

    # Every statement that cuts a window: `_field_window`, and `_match_window` where the store
    # cuts a match window in the scan's own statement (else match reads use `_field_window`).
    for module, name in ((read_sql, "_field_window"), (match_sql, "_match_window")):
        breakable.setattr(module, name, _leaking(getattr(module, name)))
    for read in reads:
        with observing(sent := _Sent()):
            assert read().text  # the broken variant still answers correctly ...
        assert any(WHOLE in statement for statement in sent.statements)  # on the read path ...
        with pytest.raises(AssertionError, match="characters crossed the boundary"):
            check_bounded(sync_store, read, window_text)  # ... and the proof fails


class _Sent:
    """The statements the store's read path (`_runtime.Statements`) sends itself; a statement
    that runs on SQLAlchemy instead is not among them."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def executing(self, engine: Engine, statement: str, parameters: Any) -> None:
        self.statements.append(statement)

    def fetched(self, engine: Engine, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        pass


# ---------------------------------------------------------------- (b) visibility removed


def test_grant_visibility_removed_lets_hidden_records_through(
    canaries: Store, caplog: pytest.LogCaptureFixture, breakable: pytest.MonkeyPatch
) -> None:
    def everything_visible(shape: sql.GrantShape, prefix: str = "g") -> Any:
        return true()

    names = [
        "outside-resources-record",
        "outside-resources-window",
        "outside-resources-match",
        "outside-resources-uri",
        "deleted-record",
        "deleted-blob",
        "blob-other-connection",  # instance_ids: records are refused before SQL; blobs are not
        "blob-outside-time",
        "nul-blob-outside-resources",
        "time-t_before",
        "time-t_until",
        "time-missing",
        "time-null",
        "time-number",
        "time-malformed",
        "time-words",
        "time-empty",
    ]
    _bites(
        canaries,
        names,
        caplog,
        lambda: breakable.setattr(sql, "visible_records", everything_visible),
    )


# ---------------------------------------------------------------- (c) field check removed


def test_field_check_removed_lets_an_ungranted_field_through(
    canaries: Store, caplog: pytest.LogCaptureFixture, breakable: pytest.MonkeyPatch
) -> None:
    def every_field(self: StreamGrant, path: str) -> bool:
        return True

    names = ["ungranted-field-window", "ungranted-field-match", "ungranted-named-field"]
    _bites(
        canaries, names, caplog, lambda: breakable.setattr(StreamGrant, "allows_field", every_field)
    )


# ---------------------------------------------------------------- (d) blob check removed


def test_blob_check_removed_lets_hidden_blobs_through(
    canaries: Store, caplog: pytest.LogCaptureFixture, breakable: pytest.MonkeyPatch
) -> None:
    def any_blob(shapes: tuple[tuple[sql.GrantShape, bool], ...]) -> Select[Any]:
        return select(literal(1))

    names = [
        "deleted-blob",
        "blob-other-connection",
        "blob-of-ungranted-field",
        "blob-named-in-text",
        "blob-unreferenced",
        "blob-outside-time",
        "nul-blob-ungranted-field",
    ]
    _bites(
        canaries, names, caplog, lambda: breakable.setattr(blob_sql, "_blob_referenced", any_blob)
    )


# ---------------------------------------------------------------- (e) logs and errors


@pytest.mark.parametrize("channel", ["log", "error"])
def test_a_result_kept_from_an_earlier_request_is_caught_in_logs_and_errors(
    canaries: Store,
    caplog: pytest.LogCaptureFixture,
    breakable: pytest.MonkeyPatch,
    channel: str,
) -> None:
    """A store that keeps the previous result (a cache, a debug aid) and says it later: the leak
    never crosses the database boundary of the later read, so only the log and error checks
    can see it."""
    owner_read = Record((A, "message_bodies", "b04"))
    narrow_read = probes()["outside-resources-record"]
    check(canaries, OWNER, owner_read, caplog)
    check_probe(canaries, narrow_read, caplog)

    real_run = Store._run
    kept: list[Any] = []

    def remembering(self: Store, name: Operation, op: Any) -> Any:
        if channel == "log":
            logging.getLogger("pdpp_store").debug("previous result: %r", kept[-1:])
        try:
            kept.append(real_run(self, name, op))
        except StoreError as exc:
            if channel == "error":
                exc.message = f"{exc.message} (previous result: {kept[-1:]!r})"
                exc.args = (exc.message,)
            raise
        return kept[-1]

    breakable.setattr(Store, "_run", remembering)
    check(canaries, OWNER, owner_read, caplog)  # authorized: saying it is no leak
    with pytest.raises(AssertionError, match="in an error or log"):
        check_probe(canaries, narrow_read, caplog)
