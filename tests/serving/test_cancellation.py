"""Cancellation-safe async front (issue 10, item 6): reads and writes of an `AsyncStore` are
cancelled at chosen moments, hundreds of times per database, and after each one the same store
must behave exactly as a fresh one would.

Per cancellation the test checks:
- the cancelled call ended with `CancelledError` (or finished, or raised a typed `StoreError`
  that is not a 503): never another exception;
- a follow-up write on the same store succeeds at once (no lock left behind, no poisoned
  connection handed back by the pool);
- a follow-up read of a record that nobody writes answers exactly its content;
- the batch being written when cancelled is all there or not at all: every record of the batch
  holds the same version tag (checked on the database directly, through one engine of its own).

When each call is cancelled (session 11). Each kind of call (a batch write, a delete, a record
read, a window read) is timed on the store (`_Timing`: its latest calls that ran to their end,
so the timing follows the machine's load), and a round cancels its call at a point of that
kind's own time, x 1.2 so that a few finish: the k-th call of a kind at the k-th point of the
van der Corput sequence (`_van_der_corput`), whose first n points leave no gap wider than 2/n of
that time. So the moments the calls are cancelled at cover each call from its first await to
its end, evenly, at every stage of the run, where random moments leave gaps. Until session 10
every call slept a random part of the batch write's time, so a read (a tenth of a write) almost
always finished first: of 500 cancellations about 400 were writes, 90 deletes and under 10
reads, in 1,400 to 4,000 rounds. Now a run goes on until writes are cancelled 400 times and
deletes 100 (`CANCELLED`), each read has been called 100 times (`CALLED`), and `CANCELLATIONS`
are reached in all, in about 750 rounds: writes and deletes are cancelled as often as before,
and on Postgres reads several times as often (about 50 in a run). On SQLite a bounded read runs
on the event loop without suspending, so no cancellation can land inside it, then or now.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Any

from _data import MAILBOX, body, manifest, owner, ref_id
from sqlalchemy import Engine, create_engine, text

from pdpp_store import AsyncStore, StoreError

CANCELLATIONS = int(os.environ.get("PDPP_CANCELLATIONS", "500"))
CANCELLED = {"write": 400, "delete": 100}
"""How many calls of each kind a run must see cancelled (`CANCELLATIONS` in all)."""
CALLED = {"read_record": 100, "window": 100}
"""How many calls of each kind of read a run makes, at least."""
MAX_ROUNDS = 4000
BATCH = 12
STABLE = {f"r{number}": f"stable text {number} " * (40 + number) for number in range(4)}


def _batch(tag: str) -> list[dict[str, Any]]:
    return [body(f"w{number}", f"{tag} " + "payload " * 300) for number in range(BATCH)]


def _torn(engine: Engine) -> int:
    """How many distinct `body_text` digests the batch's records hold (1 when none is torn)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(DISTINCT digest) FROM fields"
                    " WHERE path = 'body_text' AND record_id LIKE 'w%'"
                )
            ).scalar_one()
        )


def _van_der_corput(index: int) -> float:
    """The `index`-th point (from 0) of the base-2 van der Corput sequence in [0, 1): 0, 1/2,
    1/4, 3/4, 1/8, ...; its first n points leave no gap wider than 2/n."""
    point, scale = 0.0, 0.5
    while index:
        index, bit = divmod(index, 2)
        point += bit * scale
        scale /= 2
    return point


class _Timing:
    """How long one kind of call takes: the median of the latest nine that ran to their end
    (from five runs made first), so the stretch the cancellation points spread over follows the
    machine's load as it drifts during a run."""

    def __init__(self, seconds: list[float]) -> None:
        self.latest: deque[float] = deque(seconds, maxlen=9)

    def window(self) -> float:
        """The stretch to cancel in: the call's time, x 1.2 so that a few calls finish."""
        return statistics.median(self.latest) * 1.2

    def ran(self, seconds: float) -> None:
        self.latest.append(seconds)

    @classmethod
    async def of(cls, call: Callable[[str, str], Awaitable[object]]) -> _Timing:
        """Five runs of `call(tag, "r3")` after one more (its statements compiled), each with a
        tag of its own (so each write writes); a typed refusal counts as a run."""
        with contextlib.suppress(StoreError):
            await call("v-warm", "r3")
        times = []
        for run in range(5):
            started = time.perf_counter()
            with contextlib.suppress(StoreError):
                await call(f"v-measure{run}", "r3")
            times.append(time.perf_counter() - started)
        return cls(times)


async def _timed(call: Awaitable[object], ended: list[float]) -> object:
    """`call`, noting in `ended` when it ended (finished, failed or cancelled)."""
    try:
        return await call
    finally:
        ended.append(time.perf_counter())


async def _cancel_many(url: str) -> Counter[str]:
    store = await AsyncStore.open(url)
    checker = create_engine(url)
    counts: Counter[str] = Counter()
    rng = random.Random(10)
    try:
        await store.upsert_records(
            MAILBOX, "message_bodies", [body(rid, text_) for rid, text_ in STABLE.items()]
        )
        await store.upsert_records(MAILBOX, "message_bodies", _batch("v0"))
        grant = owner()
        calls: dict[str, Callable[[str, str], Awaitable[object]]] = {
            "write": lambda tag, _: store.upsert_records(MAILBOX, "message_bodies", _batch(tag)),
            "read_record": lambda _, rid: store.read_record(grant, ref_id(rid)),
            "window": lambda _, rid: store.read_field_window(
                grant, ref_id(rid), "body_text", offset_chars=5, limit_chars=50
            ),
            "delete": lambda _, __: store.delete_record(MAILBOX, "message_bodies", "w-gone"),
        }
        timings = {kind: await _Timing.of(call) for kind, call in calls.items()}
        for round_ in range(MAX_ROUNDS):
            wanting = [
                kind for kind, floor in CANCELLED.items() if counts[f"cancelled:{kind}"] < floor
            ]
            wanting += [kind for kind, floor in CALLED.items() if counts[f"calls:{kind}"] < floor]
            if not wanting and counts["cancelled"] >= CANCELLATIONS:
                break
            kind = rng.choice(wanting or list(CANCELLED))
            rid = rng.choice(list(STABLE))
            point = _van_der_corput(counts[f"calls:{kind}"])
            counts[f"calls:{kind}"] += 1
            ended: list[float] = []
            started = time.perf_counter()
            task = asyncio.ensure_future(_timed(calls[kind](f"v{round_ + 1}", rid), ended))
            await asyncio.sleep(point * timings[kind].window())
            task.cancel()
            try:
                result: Any = await task
            except asyncio.CancelledError:
                counts["cancelled"] += 1
                counts[f"cancelled:{kind}"] += 1
            except StoreError as error:
                counts[f"error:{error.code}"] += 1
                if error.http_status >= 500 and error.code != "not_found":
                    counts["wrong"] += 1
            except Exception:  # the point of the test: nothing else may escape
                counts["untyped"] += 1
            else:
                counts["finished"] += 1
                if kind == "read_record" and result.to_dict()["data"]["body_text"] != STABLE[rid]:
                    counts["wrong"] += 1
                if kind == "window" and result.text != STABLE[rid][5:55]:
                    counts["wrong"] += 1
            if ended and (not task.cancelled() or point * 1.2 >= 1):
                # It ran to its end, or was cancelled where it was timed to have finished (so
                # it takes longer than timed): how long it took, or at least took.
                timings[kind].ran(ended[0] - started)
            # The follow-ups: the same store, at once, as if nothing had happened.
            try:
                await store.upsert_records(
                    MAILBOX, "message_bodies", [body("f", f"follow-up {round_}")]
                )
                view = await store.read_record(grant, ref_id(rid))
                if view.to_dict()["data"]["body_text"] != STABLE[rid]:
                    counts["wrong"] += 1
            except Exception as error:  # a failed follow-up is what the test is about
                counts["failed_follow_up"] += 1
                counts[f"follow_up:{type(error).__name__}"] += 1
            if _torn(checker) != 1:
                counts["torn"] += 1
            counts["rounds"] += 1
    finally:
        await store.close()
        checker.dispose()
    return counts


async def _run(url: str) -> Counter[str]:
    store = await AsyncStore.open(url)
    try:
        gmail = manifest("gmail")
        await store.register_manifest(gmail)
        await store.add_connection(MAILBOX, gmail["connector_id"])
    finally:
        await store.close()
    return await _cancel_many(url)


def test_cancelled_calls_leave_the_store_as_fresh(db_url: str) -> None:
    counts = asyncio.run(_run(db_url))
    print(f"cancellation on {db_url.split(':', 1)[0]}: {dict(counts)}")
    assert counts["cancelled"] >= CANCELLATIONS
    for kind, floor in CANCELLED.items():
        assert counts[f"cancelled:{kind}"] >= floor, kind
    for kind, floor in CALLED.items():
        assert counts[f"calls:{kind}"] >= floor, kind
    assert counts["untyped"] == 0
    assert counts["wrong"] == 0
    assert counts["failed_follow_up"] == 0
    assert counts["torn"] == 0
