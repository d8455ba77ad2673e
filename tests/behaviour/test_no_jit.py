"""Every Postgres connection of the store runs without JIT compilation (`_runtime.engines`
Rule 2; docs/decisions.md, "No JIT on the store's connections"), on both fronts, from its
first statement, whatever an earlier call on it did."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from pdpp_store import AsyncStore, Store
from pdpp_store._runtime import sync_url

pytestmark = pytest.mark.postgres


def test_the_server_compiles_by_default(pg_db_url: str) -> None:
    """The setting is the store's: a plain connection to the same server has JIT on."""
    engine = create_engine(sync_url(pg_db_url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SHOW jit")).scalar_one() == "on"
    finally:
        engine.dispose()


def test_a_fresh_store_connection_has_jit_off(pg_db_url: str) -> None:
    with Store.open(pg_db_url) as store:
        store.engine.dispose()  # a fresh connection, not one opening left in the pool
        with store.engine.connect() as conn:
            assert conn.execute(text("SHOW jit")).scalar_one() == "off"


def test_a_fresh_async_store_connection_has_jit_off(pg_db_url: str) -> None:
    async def jit() -> str:
        store = await AsyncStore.open(pg_db_url)
        try:
            await store.engine.dispose()
            async with store.engine.connect() as conn:
                return str((await conn.execute(text("SHOW jit"))).scalar_one())
        finally:
            await store.close()

    assert asyncio.run(jit()) == "off"
