"""A statement marked `Execute.bounded` runs on the event loop (`AsyncReaders`), so its cost
must not grow with the data. Measured in SQLite VM steps on the loop's own connection (a progress
handler), never in wall-clock time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from _data import MAILBOX, body, grant, manifest, ref_id

from pdpp_store import AsyncStore, Grant, StoreError

STEP = 100


async def _steps_on_the_loop(store: AsyncStore, read: Callable[[], Awaitable[Any]]) -> int:
    with suppress(StoreError):
        await read()  # warm: catalogue cache, statement cache, the loop's connection
    inline = store._readers._inline
    assert inline is not None
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    inline.set_progress_handler(count, STEP)
    try:
        await read()
    except StoreError:
        pass
    finally:
        inline.set_progress_handler(None, 0)
    assert store._readers._inline is inline  # ran on the loop, on that connection
    return steps[0] * STEP


async def _store(path: Path, connectors: int) -> AsyncStore:
    store = await AsyncStore.open(f"sqlite:///{path}")
    gmail = manifest("gmail")
    await store.register_manifest(gmail)
    await store.add_connection(MAILBOX, gmail["connector_id"])
    for number in range(connectors):
        other = manifest("gmail")
        other["connector_id"] = f"{gmail['connector_id']}_{number}"
        await store.register_manifest(other)
    await store.upsert_records(MAILBOX, "message_bodies", [body("e1", "an invoice " * 100)])
    return store


def _undeclared_stream_steps(path: Path, connectors: int) -> int:
    async def run() -> int:
        store = await _store(path, connectors)
        try:
            mail = grant({"name": "message_bodies", "instance_ids": [MAILBOX]})
            # A stream no connector declares, of a connection the grant does not cover: the
            # read asks the catalogue whether the stream is declared anywhere.
            ref = ref_id("e1", connection_id="cin_elsewhere", stream="no_such_stream")
            return await _steps_on_the_loop(store, lambda: store.read_record(mail, ref))
        finally:
            await store.close()

    return asyncio.run(run())


def test_the_catalogue_lookup_on_the_loop_does_not_scan_the_catalogue(tmp_path: Path) -> None:
    """`streams` is keyed by (connector_id, stream): `WHERE stream = ?` scans every declared
    stream of every connector, for any caller-chosen undeclared stream name (the negative answer
    is not cached), so it must not run on the loop."""
    small = _undeclared_stream_steps(tmp_path / "small.db", 0)
    large = _undeclared_stream_steps(tmp_path / "large.db", 400)
    assert large <= small + 10 * STEP, (small, large)


def _window_steps(path: Path, mail: Grant) -> int:
    async def run() -> int:
        store = await _store(path, 0)
        try:
            return await _steps_on_the_loop(
                store,
                lambda: store.read_field_window(mail, ref_id("e1"), "body_text", limit_chars=100),
            )
        finally:
            await store.close()

    return asyncio.run(run())


def test_a_window_read_on_the_loop_does_not_grow_with_the_grants_connections(
    tmp_path: Path,
) -> None:
    """The grant's `instance_ids` are bound as one list and matched with `IN (SELECT value FROM
    json_each(?))`: SQLite reads the whole list on every statement, so a read under a grant over
    many connections (above `BOUNDED_GRANT_TERMS`) must not run on the loop (measured before:
    100,000 connections, 41 ms of loop per window read)."""
    few = grant({"name": "message_bodies", "instance_ids": [MAILBOX]})
    many = grant(
        {
            "name": "message_bodies",
            "instance_ids": [MAILBOX, *(f"cin_{number}" for number in range(20_000))],
        }
    )
    small = _window_steps(tmp_path / "few.db", few)
    large = _window_steps(tmp_path / "many.db", many)
    assert large <= small + 10 * STEP, (small, large)
