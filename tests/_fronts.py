"""The fronts the behaviour suite runs against: the sync `Store`, and the `AsyncStore` driven by
`BlockingAsyncStore`, so that every behaviour test is written once, as a plain function.

Rules:
1. `BlockingAsyncStore` adds no behaviour: each call is forwarded to the `AsyncStore` and, when it
   returns an awaitable, run to completion on the adapter's own event loop. Attributes that are not
   callables (properties, constants) pass through untouched; an async iterator comes back as a
   plain iterator driven by the same loop.
2. The adapter owns its loop and is its only user, so tests must be plain (not ``async def``)
   functions: a loop cannot be run from inside another running loop.
3. `pdpp_store` is imported lazily, so the harness's own tests run even when the library does not
   import.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias

if TYPE_CHECKING:
    from pdpp_store import AsyncStore, Store

__all__ = ["FRONTS", "BlockingAsyncStore", "Front", "StoreFront", "open_front"]

Front: TypeAlias = Literal["sync", "async"]
FRONTS: tuple[Front, ...] = ("sync", "async")

# What a behaviour test receives. Typed as the union (not Any) so that mypy still checks calls
# against `Store`'s signatures; the adapter's half is Any.
StoreFront: TypeAlias = "Store | BlockingAsyncStore"


def open_front(front: Front, url: str, **options: Any) -> StoreFront:
    """Open the store at `url` through `front`; `options` go to ``open`` (e.g. cursor_secret)."""
    if front == "sync":
        from pdpp_store import Store

        return Store.open(url, **options)
    if front == "async":
        return BlockingAsyncStore.open(url, **options)
    raise ValueError(f"unknown front {front!r}; expected one of {FRONTS}")


class BlockingAsyncStore:
    """An `AsyncStore` with blocking methods of the same names (see the module's rules)."""

    def __init__(self, store: AsyncStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop

    @classmethod
    def open(cls, url: str, **options: Any) -> BlockingAsyncStore:
        from pdpp_store import AsyncStore

        loop = asyncio.new_event_loop()
        try:
            store = loop.run_until_complete(AsyncStore.open(url, **options))
        except BaseException:
            loop.close()
            raise
        return cls(store, loop)

    @property
    def wrapped(self) -> AsyncStore:
        """The `AsyncStore` itself, for a test that needs to tell the fronts apart."""
        return self._store

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found on the adapter; guard our own slots so that a
        # half-built adapter (or copy/pickle probing) cannot recurse.
        if name in {"_store", "_loop"} or name.startswith("__"):
            raise AttributeError(name)
        attribute = getattr(self._store, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._resolve(attribute(*args, **kwargs))

        return blocking

    def _resolve(self, result: Any) -> Any:
        if inspect.isawaitable(result):
            return self._loop.run_until_complete(_awaited(result))
        if isinstance(result, AsyncIterator):
            return self._iterate(result)
        return result

    def _iterate(self, iterator: AsyncIterator[Any]) -> Iterator[Any]:
        while True:
            try:
                yield self._loop.run_until_complete(_awaited(anext(iterator)))
            except StopAsyncIteration:
                return

    def close(self) -> None:
        """Close the store, then the loop. Idempotent."""
        loop = self._loop
        if loop.is_closed():
            return
        try:
            loop.run_until_complete(self._store.close())
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
