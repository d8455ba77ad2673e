"""Opening a store, written once for both fronts: the options, checked before anything is
opened; the engine, with the errors of opening translated; the steps in order (migrate, load the
cursor keys) and when to try them again; and the store built from their outcome.

The steps are a generator (`Opening.steps`), in the shape of an operation: it yields what to do
and receives the outcome, so the retry rule exists once; each front does the steps with its own
I/O (`opened_sync`, `opened_async`), a loop with no decision of its own.

Rules:
1. Every option is checked before an engine exists: a bad option opens nothing.
2. Only `storage_busy` is tried again (openers of one fresh SQLite file can meet a lock that
   SQLite reports at once, switching to WAL), after a pause, until the busy timeout counted
   from the first step; any other error ends the opening, and the front disposes of its engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ._core.cursor import CursorCodec, CursorKey, codec_for_stored_keys
from ._core.errors import BadRequest, StoreError
from ._ops import writes as _ingest
from ._runtime import (
    DEFAULT_BUSY_TIMEOUT_S,
    check_busy_timeout,
    engine_options,
    opening,
    run_async,
    run_sync,
)
from ._runtime import migrate as _migrate
from ._sql.requests import Op

__all__ = ["DEFAULT_BATCH_SIZE", "MAX_BATCH_SIZE", "Opening", "opened_async", "opened_sync"]

DEFAULT_BATCH_SIZE = 500
MAX_BATCH_SIZE = 10_000
"""A batch's ids are bound one parameter each: well under what SQLite (32,766) and Postgres
(65,535) accept."""
MIN_SECRET_BYTES = 16
_OPEN_RETRY_S = 0.05
"""The pause before an opening step that met `storage_busy` is tried again (Rule 2)."""

E = TypeVar("E")
S = TypeVar("S")


def _check_secrets(configured: object, previous: object) -> tuple[bytes, ...]:
    """The configured cursor secrets, checked before anything is opened."""
    if configured is None:
        if previous:
            raise BadRequest(
                "invalid_request",
                "previous_cursor_secrets needs cursor_secret",
                param="previous_cursor_secrets",
            )
        return ()
    if isinstance(previous, bytes | str) or not isinstance(previous, Sequence):
        raise BadRequest(
            "invalid_request",
            "previous_cursor_secrets must be a list of bytes",
            param="previous_cursor_secrets",
        )
    secrets = (configured, *previous)
    for number, secret in enumerate(secrets):
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
            raise BadRequest(
                "invalid_request",
                f"cursor secrets must be bytes of at least {MIN_SECRET_BYTES} bytes",
                param="cursor_secret" if number == 0 else "previous_cursor_secrets",
            )
    return secrets


def _check_options(
    configured: object,
    previous: object,
    batch_size: object,
    migrate: object = True,
    busy_timeout_s: object = DEFAULT_BUSY_TIMEOUT_S,
) -> tuple[bytes, ...]:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= MAX_BATCH_SIZE
    ):
        raise BadRequest(
            "invalid_request",
            f"batch_size must be an integer in 1..{MAX_BATCH_SIZE}",
            param="batch_size",
        )
    if not isinstance(migrate, bool):
        raise BadRequest("invalid_request", "migrate must be True or False", param="migrate")
    check_busy_timeout(busy_timeout_s)
    return _check_secrets(configured, previous)


def _codec_from(configured: tuple[bytes, ...], stored: list[tuple[int, bytes]]) -> CursorCodec:
    """Configured secrets win (key id from the secret itself); else the keys kept in the store."""
    if not configured:
        return codec_for_stored_keys(stored)
    keys = [CursorKey(hashlib.sha256(s).digest()[0], s) for s in configured]
    return CursorCodec(keys[0], keys[1:])


@dataclass(frozen=True, slots=True)
class _Migrate:
    """Migrate the database (or, unless `upgrade`, check that it is at the newest schema) on a
    connection of its own, and commit."""

    upgrade: bool


@dataclass(frozen=True, slots=True)
class _Pause:
    """Wait `seconds` before the next step."""

    seconds: float


_Step = _Migrate | _Pause | Op[list[tuple[int, bytes]]]
"""What opening a store asks its front to do: migrate, pause, or run a write operation."""


class Opening:
    """Opening a store, written once for both fronts in the shape of an operation: the options,
    checked before anything is opened; the engine, with the errors of opening translated
    (`engine`); the steps, in order, with when to try again (`steps`), which each front does
    with its own I/O (`opened_sync`, `opened_async`); and the store built from their outcome
    (`store`)."""

    __slots__ = ("batch_size", "busy_timeout_s", "migrate", "secrets", "url")

    def __init__(
        self,
        url: str,
        *,
        cursor_secret: object,
        previous_cursor_secrets: object,
        batch_size: int,
        migrate: bool,
        busy_timeout_s: float,
    ) -> None:
        self.secrets = _check_options(
            cursor_secret, previous_cursor_secrets, batch_size, migrate, busy_timeout_s
        )
        self.url = url
        self.batch_size = batch_size
        self.migrate = migrate
        self.busy_timeout_s = busy_timeout_s

    def engine(self, driver_url: Callable[[object], str], create: Callable[..., E]) -> E:
        """The front's engine (`create_engine` or `create_async_engine`) on `driver_url`'s
        spelling of the URL."""
        with opening(self.url):
            url = driver_url(self.url)
            return create(url, **engine_options(url, self.busy_timeout_s))

    def steps(self) -> Generator[_Step, Any, list[tuple[int, bytes]]]:
        """Migrate, then load the cursor keys (created if the store keeps its own), whose rows
        it returns. The front sends each step's outcome back, and throws back the `StoreError`
        a step raised: `storage_busy` is tried again after a pause (Rule 2)."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                yield _Migrate(upgrade=self.migrate)
                stored: list[tuple[int, bytes]] = yield _ingest.load_cursor_keys(
                    create=not self.secrets
                )
                return stored
            except StoreError as error:
                if error.code != "storage_busy" or time.monotonic() >= deadline:
                    raise
            yield _Pause(_OPEN_RETRY_S)

    def store(
        self, cls: Callable[..., S], engine: Any, stored: list[tuple[int, bytes]], **options: Any
    ) -> S:
        return cls(
            engine,
            _codec_from(self.secrets, stored),
            self.batch_size,
            stored_keys=not self.secrets,
            busy_timeout_s=self.busy_timeout_s,
            **options,
        )


def opened_sync(engine: Engine, plan: Opening) -> list[tuple[int, bytes]]:
    """Do `plan`'s steps with the sync front's I/O; what they return."""
    steps = plan.steps()
    step = next(steps)
    while True:
        try:
            outcome = None
            if isinstance(step, _Pause):
                time.sleep(step.seconds)
            elif isinstance(step, _Migrate):
                with opening(plan.url), engine.connect() as conn:
                    _migrate(conn, upgrade=step.upgrade)
                    conn.commit()
            else:
                outcome = run_sync(engine, step, write=True)
        except StoreError as error:
            step = steps.throw(error)
            continue
        try:
            step = steps.send(outcome)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def opened_async(engine: AsyncEngine, plan: Opening) -> list[tuple[int, bytes]]:
    """As `opened_sync`, with the async front's I/O."""
    steps = plan.steps()
    step = next(steps)
    while True:
        try:
            outcome = None
            if isinstance(step, _Pause):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, _Migrate):
                with opening(plan.url):
                    async with engine.connect() as conn:
                        await conn.run_sync(_migrate, upgrade=step.upgrade)
                        await conn.commit()
            else:
                outcome = await run_async(engine, step, write=True)
        except StoreError as error:
            step = steps.throw(error)
            continue
        try:
            step = steps.send(outcome)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
