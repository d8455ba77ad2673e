"""The MCP server's cost: one `read_record_field` call (a 4,096-character window in the middle of a
3,000,000-character email) through the SDK's client, in-process and over a stdio subprocess
(`pdpp-store ... mcp --grant FILE`), against the library call it makes
(`AsyncStore.read_field_window`). Goal: within 2x of the library.

All three run on one event loop in a helper thread (a client session must be entered and left by
one task), so each round pays the same hand-off to that loop; the benchmark asserts the answers,
never the times. `docs/mcp.md` reports the ratios.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest
from _mcp import BIG_CHARS, BIG_ID, big_email_text, load_ladder, owner
from _postgres import PostgresServer
from mcp import Client, StdioServerParameters
from pytest_benchmark.fixture import BenchmarkFixture

from pdpp_store import AsyncStore
from pdpp_store.mcp import create_server

T = TypeVar("T")
OFFSET = BIG_CHARS // 2
LIMIT = 4096
RECORD = f"cin_mail/message_bodies:{BIG_ID}"
ARGUMENTS = {"id": RECORD, "field_path": "body_text", "offset_chars": OFFSET, "limit_chars": LIMIT}


class Loop:
    """An event loop in a thread; `run` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def start(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Session:
    """A client session held open by one task on `loop` until `close`."""

    def __init__(self, loop: Loop, target: Any) -> None:
        self.loop = loop
        ready: Future[Client] = Future()
        self.stop = asyncio.Event()

        async def hold() -> None:
            try:
                async with Client(target) as client:
                    ready.set_result(client)
                    await self.stop.wait()
            except BaseException as error:
                if not ready.done():
                    ready.set_exception(error)
                raise

        self.held = loop.start(hold())
        self.client = ready.result(timeout=120)

    def call(self) -> Any:
        return self.loop.run(self.client.call_tool("read_record_field", ARGUMENTS))

    def close(self) -> None:
        self.loop.loop.call_soon_threadsafe(self.stop.set)
        self.held.result(timeout=60)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ],
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The agents' mailbox in a database, an `AsyncStore` and both client sessions over it."""
    directory = tmp_path_factory.mktemp("mcp-bench")
    server: PostgresServer | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{directory / 'store.db'}"
    else:
        server = request.getfixturevalue("pg_server")
        name = f"pdpp_bench_mcp_{uuid.uuid4().hex[:12]}"
        url = server.create_database(name)
    load_ladder(url)
    grant_file = directory / "grant.json"
    grant_file.write_text(json.dumps({"grant_id": "g", "streams": [{"name": "message_bodies"}]}))
    loop = Loop()
    store = loop.run(AsyncStore.open(url))
    command = shutil.which("pdpp-store", path=os.path.dirname(sys.executable))
    assert command is not None
    stdio = StdioServerParameters(
        command=command, args=["--db", url, "mcp", "--grant", str(grant_file)], env=dict(os.environ)
    )
    sessions = {
        "in-process": Session(loop, create_server(store, owner())),
        "stdio": Session(loop, stdio),
    }
    try:
        yield {
            "loop": loop,
            "store": store,
            "sessions": sessions,
            "expected": big_email_text()[OFFSET : OFFSET + LIMIT],
        }
    finally:
        for session in sessions.values():
            session.close()
        loop.run(store.close())
        loop.close()
        if server is not None:
            server.drop_database(name)


@pytest.mark.parametrize("path", ["library", "in-process", "stdio"])
def test_read_record_field(
    benchmark: BenchmarkFixture, served: dict[str, Any], path: str, request: pytest.FixtureRequest
) -> None:
    backend = request.node.callspec.params["served"]
    benchmark.group = f"mcp read_record_field ({backend})"
    loop: Loop = served["loop"]
    if path == "library":
        store: AsyncStore = served["store"]

        def library() -> str:
            window = loop.run(
                store.read_field_window(
                    owner(), RECORD, "body_text", offset_chars=OFFSET, limit_chars=LIMIT
                )
            )
            return window.text

        text = benchmark(library)
    else:
        session: Session = served["sessions"][path]

        def through_mcp() -> str:
            result = session.call()
            assert not result.is_error
            window: str = result.structured_content["window"]["text"]
            return window

        text = benchmark(through_mcp)
    assert text == served["expected"]
