"""Concurrency without wrong errors or starvation (issue 10, item 7), on both databases:

- writers that fill every writer slot, blocked behind a held lock, do not stop readers: all reads
  of an unrelated record complete while the lock is still held;
- batches writing the same new records in opposite orders never deadlock: every call succeeds,
  or (when another writer got there first) answers a retryable `write_conflict`, never a 503;
- threads storing the same new bytes at once all succeed, with the same blob.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from _data import MAILBOX, body, owner, ref_id, setup_mailbox
from _postgres import PostgresServer

from pdpp_store import Store, StoreError

WRITERS = 12  # more than the store's writer slots
READERS = 8
READS_EACH = 25
ROUNDS = 12
BLOB_THREADS = 6


def _outcome(call: Any, *args: Any) -> str:
    try:
        call(*args)
    except StoreError as error:
        return error.code
    except Exception as error:  # what the test is about: nothing untyped
        return f"untyped:{type(error).__name__}"
    return "ok"


def _hold_write_lock(db_url: str, request: pytest.FixtureRequest) -> Any:
    holder: Any
    if db_url.startswith("sqlite"):
        holder = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        return holder
    server: PostgresServer = request.getfixturevalue("pg_server")
    holder = psycopg.connect(server.conninfo(db_url.rsplit("/", 1)[1]))
    holder.execute("LOCK TABLE records IN SHARE ROW EXCLUSIVE MODE")  # writes wait, reads pass
    return holder


def test_reads_never_queue_behind_blocked_writers(
    db_url: str, request: pytest.FixtureRequest
) -> None:
    with Store.open(db_url, busy_timeout_s=60) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, "message_bodies", [body("r1", "unrelated")])
        holder = _hold_write_lock(db_url, request)
        released = threading.Event()
        try:
            with ThreadPoolExecutor(WRITERS + READERS) as pool:
                writes = [
                    pool.submit(
                        store.upsert_records, MAILBOX, "message_bodies", [body(f"w{n}", "x")]
                    )
                    for n in range(WRITERS)
                ]

                def read_many() -> list[str]:
                    return [
                        "late"
                        if released.is_set()
                        else _outcome(store.read_record, owner(), ref_id("r1"))
                        for _ in range(READS_EACH)
                    ]

                reads = [pool.submit(read_many) for _ in range(READERS)]
                outcomes = Counter(o for future in reads for o in future.result(timeout=120))
                # Every read finished while every writer was still blocked.
                assert not any(future.done() for future in writes)
                released.set()
                holder.rollback() if hasattr(holder, "rollback") else None
                holder.close()
                write_outcomes = Counter(_outcome(future.result) for future in writes)
        finally:
            holder.close()
        print(f"reads while writers blocked: {dict(outcomes)}; writes: {dict(write_outcomes)}")
        assert outcomes == {"ok": READERS * READS_EACH}
        assert write_outcomes == {"ok": WRITERS}


def test_opposite_order_batches_and_identical_blobs(db_url: str) -> None:
    counts: Counter[str] = Counter()
    with Store.open(db_url) as store:
        setup_mailbox(store)
        for round_ in range(ROUNDS):
            ids = [f"n{round_}_{number}" for number in range(10)]
            barrier = threading.Barrier(2)

            def write(order: list[str], tag: str, barrier: threading.Barrier) -> list[str]:
                barrier.wait()
                outcomes = []
                for _ in range(5):  # retry what asks to be retried
                    outcome = _outcome(
                        store.upsert_records,
                        MAILBOX,
                        "message_bodies",
                        [body(record_id, tag) for record_id in order],
                    )
                    outcomes.append(outcome)
                    if outcome != "write_conflict":
                        break
                return outcomes

            with ThreadPoolExecutor(2) as pool:
                forward = pool.submit(write, ids, f"a{round_}", barrier)
                backward = pool.submit(write, ids[::-1], f"b{round_}", barrier)
                for outcome in [*forward.result(timeout=120), *backward.result(timeout=120)]:
                    counts[f"batch:{outcome}"] += 1
            texts = {
                store.read_record(owner(), ref_id(record_id)).to_dict()["data"]["body_text"]
                for record_id in ids
            }
            assert len(texts) == 1  # one batch or the other, whole

            data = os.urandom(100_000)
            blob_barrier = threading.Barrier(BLOB_THREADS)

            def put(data: bytes, blob_barrier: threading.Barrier) -> tuple[str, str]:
                blob_barrier.wait()
                try:
                    return "ok", store.put_blob(data, "application/octet-stream").blob_id
                except StoreError as error:
                    return error.code, ""
                except Exception as error:
                    return f"untyped:{type(error).__name__}", ""

            with ThreadPoolExecutor(BLOB_THREADS) as pool:
                results = [
                    future.result(timeout=120)
                    for future in [
                        pool.submit(put, data, blob_barrier) for _ in range(BLOB_THREADS)
                    ]
                ]
            for outcome, _ in results:
                counts[f"blob:{outcome}"] += 1
            assert len({blob_id for _, blob_id in results}) == 1
    print(f"opposite-order batches and identical blobs: {dict(counts)}")
    assert counts["blob:ok"] == ROUNDS * BLOB_THREADS
    assert set(counts) <= {"batch:ok", "batch:write_conflict", "blob:ok"}
    assert counts["batch:ok"] == 2 * ROUNDS  # every batch got through, retried or not
