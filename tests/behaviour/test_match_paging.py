"""Paging on from a match window (docs/contract.md §3), on every backend and front: the `next` and
`previous` cursors of a `q` window read windows of the caller's `limit_chars`, else of the
default size (4096), never of the match window's own size (docs/decisions.md, "Reads").
"""

from __future__ import annotations

import math
from typing import Any

from _data import MAILBOX, body, owner, ref_id, setup_mailbox
from _fronts import StoreFront

from pdpp_store import Grant

BODY = "body_text"
NEEDLE = "KUMQUAT"
SIZE = 40_000
AT = 11_111
TEXT = ("0123456789 ,.;-" * (SIZE // 15 + 1))[:AT] + NEEDLE
TEXT += ("0123456789 ,.;-" * (SIZE // 15 + 1))[: SIZE - len(TEXT)]
DEFAULT = 4096


def _read(store: StoreFront, grant: Grant, **args: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = store.read_field_window(grant, ref_id("m1"), BODY, **args).to_dict()
    window: dict[str, Any] = envelope["window"]
    return window


def _walk(
    store: StoreFront, grant: Grant, first: dict[str, Any], key: str, **args: Any
) -> list[dict[str, Any]]:
    windows = []
    step = first
    while step[key] is not None:
        step = _read(store, grant, cursor=step[key], **args)
        windows.append(step)
    return windows


def test_paging_on_from_a_match_keeps_the_default_size(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("m1", TEXT)])
    grant = owner()
    first = _read(store, grant, q=NEEDLE.lower(), before_chars=60, after_chars=60)
    assert (first["start_chars"], first["end_chars"]) == (AT - 60, AT + len(NEEDLE) + 60)
    forward = _walk(store, grant, first, "next_cursor")
    assert len(forward) == math.ceil((SIZE - first["end_chars"]) / DEFAULT)
    assert all(w["end_chars"] - w["start_chars"] == DEFAULT for w in forward[:-1])
    assert "".join(w["text"] for w in forward) == TEXT[first["end_chars"] :]
    backward = _walk(store, grant, first, "previous_cursor")
    assert len(backward) == math.ceil(first["start_chars"] / DEFAULT)
    assert backward[0]["start_chars"] == first["start_chars"] - DEFAULT
    assert backward[0]["end_chars"] == first["start_chars"]
    pieces = {w["start_chars"]: w["text"] for w in (*backward, first, *forward)}
    whole = ""
    for start in sorted(pieces):
        assert start <= len(whole)
        whole = whole[:start] + pieces[start]
    assert whole == TEXT


def test_paging_on_from_a_match_keeps_the_callers_limit(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("m1", TEXT)])
    grant = owner()
    first = _read(store, grant, q=NEEDLE, before_chars=60, after_chars=60, limit_chars=100)
    assert first["end_chars"] - first["start_chars"] == 100  # the match window, cut to the limit
    forward = _walk(store, grant, first, "next_cursor")
    assert len(forward) == math.ceil((SIZE - first["end_chars"]) / 100)
    assert "".join(w["text"] for w in forward) == TEXT[first["end_chars"] :]
    # a limit given with the cursor still wins, as on any cursor
    onward = _read(store, grant, cursor=first["next_cursor"], limit_chars=7)
    assert onward["text"] == TEXT[first["end_chars"] : first["end_chars"] + 7]
