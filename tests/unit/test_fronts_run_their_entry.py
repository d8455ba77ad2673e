"""Each front method hands `_run` its own catalogue entry (no database: `_run` is replaced by a
recorder, and operations are generators, so none of them runs).

What a front does with an operation (a read, or a write in its own transaction) follows from the
entry it hands `_run`, not from a name looked up there; this holds every method of both fronts
to the entry of its own name.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pdpp_store import AsyncStore, Store
from pdpp_store._core.cursor import codec_for_stored_keys
from pdpp_store._ops.catalogue import CATALOGUE, Operation
from pdpp_store._store import _StoreCore

SAMPLE: dict[str, Any] = {
    "grant": None,
    "record": "record",
    "field": "field",
    "string": "text",
    "integer": 1,
    "object": {},
    "records": [],
    "strings": [],
    "bytes": b"",
}
"""A value of each argument type: never looked at, as no operation runs."""


def _required(op: Operation) -> list[Any]:
    return [SAMPLE[argument.type] for argument in op.arguments if argument.required]


def _unopened(front: type[_StoreCore]) -> Any:
    """A front with its configuration and no engine: enough to build operations."""
    store = object.__new__(front)
    _StoreCore.__init__(store, codec_for_stored_keys([(1, b"k" * 32)]), 500, True)
    return store


def _handed(entry: Operation, op: Any) -> Operation:
    op.close()
    return entry


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_the_sync_front_hands_run_its_own_entry(name: str) -> None:
    store = _unopened(Store)
    store._run = _handed
    assert getattr(store, name)(*_required(CATALOGUE[name])) is CATALOGUE[name]


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_the_async_front_hands_run_its_own_entry(name: str) -> None:
    store = _unopened(AsyncStore)

    async def handed(entry: Operation, op: Any) -> Operation:
        return _handed(entry, op)

    store._run = handed
    entry = asyncio.run(getattr(store, name)(*_required(CATALOGUE[name])))
    assert entry is CATALOGUE[name]
