"""Reader processes for the fronts benchmark: each runs an `AsyncStore` on its own event loop
and, per order, makes that many window reads split over its tasks, answering with the distinct
texts it read. Kept apart from the test module so that a spawned process imports no pytest."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from multiprocessing.connection import Connection

from pdpp_store import AsyncStore, Grant


@dataclass(frozen=True)
class WindowRead:
    """The read every process makes: the same window the async front's benchmark reads."""

    url: str
    ref: str
    grant: Grant
    offset: int
    limit: int


def shares(total: int, parts: int) -> list[int]:
    """`total` split over `parts` as evenly as it goes."""
    return [total // parts + (1 if n < total % parts else 0) for n in range(parts)]


def serve_orders(read: WindowRead, pipe: Connection) -> None:
    """A reader process's life: open the store, say "ready", then answer each order `(reads,
    tasks)` with the set of texts read, until the order None; close the store."""

    async def main() -> None:
        store = await AsyncStore.open(read.url)

        async def one() -> str:
            window = await store.read_field_window(
                read.grant, read.ref, "body", offset_chars=read.offset, limit_chars=read.limit
            )
            return window.text

        async def worker(count: int) -> set[str]:
            return {await one() for _ in range(count)}

        try:
            await one()  # the catalogue cache, as the in-process benchmark warms it
            pipe.send("ready")
            while (order := pipe.recv()) is not None:
                reads, tasks = order
                done = await asyncio.gather(*(worker(n) for n in shares(reads, tasks)))
                pipe.send(set().union(*done))
        finally:
            await store.close()

    asyncio.run(main())
