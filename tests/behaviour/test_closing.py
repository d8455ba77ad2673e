"""Closing an `AsyncStore` is bounded, on every database: it ends while the read audit's writer
is writing a batch, and so does the writer when its loop cancels it (as `asyncio.run` does at
its end), and what was read is written once.

The moment is the one that hung a CI run for more than ten minutes: the writer had just begun
writing a batch of entries (an `executemany`) on a loaded event loop. After 5 ms without
yielding, psycopg yields to the loop inside its call, right after entering pipeline mode; a
cancellation delivered there left the pipeline entered and came back from psycopg as an
`AssertionError`, which the writer took for a failed batch and went on sleeping, so the close
that had cancelled it waited for it for ever. Here a listener on the audit's `INSERT` holds the
loop 6 ms (the load), and starts the close (or the cancellation) in that moment, so it lands
inside the driver's call on every run. The close must return within `BOUND_S`; the test waits
for it without cancelling it, so a close that does not end fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from _data import MAILBOX, body, manifest, owner, ref_id
from sqlalchemy import Engine, create_engine, event, func, select
from sqlalchemy.engine import make_url

from pdpp_store import AsyncStore
from pdpp_store._runtime import sync_url
from pdpp_store._sql.tables import read_audit

BOUND_S = 30.0
"""Far above a close's own waits here (a batch of two entries), far below the hang."""
BUSY_S = 0.006
"""How long the listener holds the loop: past psycopg's 5 ms, after which it yields."""
READS = 3
"""Reads before the writer's batch: more than one, so the batch is an `executemany`."""


async def _opened(url: str) -> AsyncStore:
    store = await AsyncStore.open(url)
    gmail = manifest("gmail")
    await store.register_manifest(gmail)
    await store.add_connection(MAILBOX, gmail["connector_id"])
    await store.upsert_records(MAILBOX, "message_bodies", [body("b1", "hello")])
    return store


def _written(url: str) -> int:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(read_audit)).scalar_one())
    finally:
        engine.dispose()


async def _during_the_audit_insert(
    store: AsyncStore, url: str, act: Callable[[asyncio.Task[Any]], Coroutine[Any, Any, None]]
) -> tuple[asyncio.Task[None], asyncio.Task[Any]]:
    """Read `READS` times, and run `act(writer)` as a task from the moment the writer's task
    begins its batch's `INSERT`, the loop held busy as under load; returns that task and the
    writer's."""
    loop = asyncio.get_running_loop()
    database = make_url(url).database
    seen: list[tuple[asyncio.Task[None], asyncio.Task[Any]]] = []

    def busy_then_act(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if seen or conn.engine.url.database != database or "read_audit" not in statement:
            return
        writer = asyncio.current_task()
        assert writer is not None
        seen.append((loop.create_task(act(writer)), writer))
        time.sleep(BUSY_S)

    event.listen(Engine, "before_cursor_execute", busy_then_act)
    try:
        for _ in range(READS):
            await store.read_record(owner(), ref_id("b1"))
        deadline = time.monotonic() + BOUND_S
        while not seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        event.remove(Engine, "before_cursor_execute", busy_then_act)
    assert seen, "the writer wrote no batch"
    return seen[0]


def _run(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run `scenario` on a loop of its own, never waiting on what it leaves behind (a close that
    hangs must fail the test, not hang it)."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_close_ends_while_the_audit_writer_writes_a_batch(db_url: str) -> None:
    async def scenario() -> None:
        store = await _opened(db_url)

        async def close(_writer: asyncio.Task[Any]) -> None:
            await store.close()

        closing, _ = await _during_the_audit_insert(store, db_url, close)
        done, _ = await asyncio.wait({closing}, timeout=BOUND_S)
        assert done, f"close did not end within {BOUND_S} s"
        closing.result()
        others = asyncio.all_tasks() - {asyncio.current_task()}
        assert not others, f"close left tasks running: {others}"

    _run(scenario)
    assert _written(db_url) == READS  # the batch begun was written, once


def test_a_cancelled_audit_writer_ends_and_close_writes_its_batch(db_url: str) -> None:
    async def scenario() -> None:
        store = await _opened(db_url)

        async def cancel(writer: asyncio.Task[Any]) -> None:
            writer.cancel()  # what the end of a loop does to its tasks (`asyncio.run`)

        _, writer = await _during_the_audit_insert(store, db_url, cancel)
        done, _ = await asyncio.wait({writer}, timeout=BOUND_S)
        assert done, f"the cancelled writer did not end within {BOUND_S} s"
        closing = asyncio.ensure_future(store.close())
        done, _ = await asyncio.wait({closing}, timeout=BOUND_S)
        assert done, f"close did not end within {BOUND_S} s"
        closing.result()

    _run(scenario)
    assert _written(db_url) == READS  # kept when its batch was cancelled, written by close
