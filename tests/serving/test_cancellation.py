"""Cancellation-safe async front (issue 10, item 6): reads and writes of an `AsyncStore` are
cancelled at random moments, at least `CANCELLATIONS` times per database, and after each one the
same store must behave exactly as a fresh one would.

Per cancellation the test checks:
- the cancelled call ended with `CancelledError` (or finished, or raised a typed `StoreError`
  that is not a 503): never another exception;
- a follow-up write on the same store succeeds at once (no lock left behind, no poisoned
  connection handed back by the pool);
- a follow-up read of a record that nobody writes answers exactly its content;
- the batch being written when cancelled is all there or not at all: every record of the batch
  holds the same version tag (checked on the database directly).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from typing import Any

from _data import MAILBOX, body, manifest, owner, ref_id
from sqlalchemy import create_engine, text

from pdpp_store import AsyncStore, StoreError

CANCELLATIONS = int(os.environ.get("PDPP_CANCELLATIONS", "500"))
MAX_ROUNDS = 4000
BATCH = 12
STABLE = {f"r{number}": f"stable text {number} " * (40 + number) for number in range(4)}


def _batch(tag: str) -> list[dict[str, Any]]:
    return [body(f"w{number}", f"{tag} " + "payload " * 300) for number in range(BATCH)]


def _torn(url: str) -> int:
    """How many distinct `body_text` digests the batch's records hold (1 when none is torn)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(DISTINCT digest) FROM fields"
                        " WHERE path = 'body_text' AND record_id LIKE 'w%'"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


async def _cancel_many(url: str) -> Counter[str]:
    store = await AsyncStore.open(url)
    counts: Counter[str] = Counter()
    rng = random.Random(10)
    try:
        await store.upsert_records(
            MAILBOX, "message_bodies", [body(rid, text_) for rid, text_ in STABLE.items()]
        )
        await store.upsert_records(MAILBOX, "message_bodies", _batch("v0"))
        grant = owner()
        started = time.perf_counter()
        await store.upsert_records(MAILBOX, "message_bodies", _batch("v-measure"))
        write_s = time.perf_counter() - started
        for round_ in range(MAX_ROUNDS):
            if counts["cancelled"] >= CANCELLATIONS:
                break
            kind = rng.choice(["write", "write", "read_record", "window", "delete"])
            rid = rng.choice(list(STABLE))
            call: Any
            if kind == "write":
                call = store.upsert_records(MAILBOX, "message_bodies", _batch(f"v{round_ + 1}"))
            elif kind == "read_record":
                call = store.read_record(grant, ref_id(rid))
            elif kind == "window":
                call = store.read_field_window(
                    grant, ref_id(rid), "body_text", offset_chars=5, limit_chars=50
                )
            else:
                call = store.delete_record(MAILBOX, "message_bodies", "w-gone")
            task = asyncio.ensure_future(call)
            await asyncio.sleep(rng.uniform(0, write_s * 1.2))
            task.cancel()
            try:
                result = await task
            except asyncio.CancelledError:
                counts["cancelled"] += 1
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
            if _torn(url) != 1:
                counts["torn"] += 1
            counts["rounds"] += 1
    finally:
        await store.close()
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
    assert counts["untyped"] == 0
    assert counts["wrong"] == 0
    assert counts["failed_follow_up"] == 0
    assert counts["torn"] == 0
