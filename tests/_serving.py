"""Helpers of the serving tests (tests/serving) that must be importable by name in a spawned
process: the worker of the concurrent-open test."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any


async def _active_key_async(store_class: Any, url: str) -> bytes:
    opened = await store_class.open(url)
    try:
        key: bytes = opened._ctx.codec.active.secret
        return key
    finally:
        await opened.close()


def open_in_rounds(worker: int, urls: list[str], barrier: Any, results: Any, front: str) -> None:
    """Open the store at each of `urls` in turn, all workers together (one `barrier` wait per
    round), and report per round either the digest of the active cursor key or the error."""
    from pdpp_store import AsyncStore, Store, StoreError

    for number, url in enumerate(urls):
        barrier.wait()
        try:
            if front == "sync":
                store = Store.open(url)
                key = store._ctx.codec.active.secret
                store.close()
            else:
                key = asyncio.run(_active_key_async(AsyncStore, url))
            results.put((worker, number, "ok", hashlib.sha256(key).hexdigest()))
        except StoreError as error:
            results.put((worker, number, "error", repr(error)))
        except Exception as error:
            results.put((worker, number, "untyped", f"{type(error).__name__}: {error}"))
