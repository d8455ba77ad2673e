"""Test material: the real manifests, a small mailbox, grants, and text generators."""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

from pdpp_store import Grant

FIXTURES = Path(__file__).parent / "fixtures"
MAILBOX = "cin_mail"
OTHER_MAILBOX = "cin_other"


@cache
def _manifest_text(name: str) -> str:
    return (FIXTURES / "manifests" / f"{name}.json").read_text(encoding="utf-8")


def manifest(name: str) -> dict[str, Any]:
    """A fresh copy of a real PDPP manifest: `gmail`, `slack` or `chatgpt`."""
    loaded: dict[str, Any] = json.loads(_manifest_text(name))
    return loaded


def setup_mailbox(store: Any, *connections: str) -> str:
    """Register the gmail manifest and the given connections (default: `MAILBOX`)."""
    gmail = manifest("gmail")
    store.register_manifest(gmail)
    for connection_id in connections or (MAILBOX,):
        store.add_connection(connection_id, gmail["connector_id"])
    connector: str = gmail["connector_id"]
    return connector


def body(record_id: str, text: str, received_at: str = "2026-03-01T10:00:00Z") -> dict[str, Any]:
    """A gmail `message_bodies` record."""
    return {
        "id": record_id,
        "message_id": f"m-{record_id}",
        "message_received_at": received_at,
        "body_text": text,
        "body_html": None,
        "charset": "utf-8",
    }


def grant(*streams: dict[str, Any], grant_id: str = "g-test", **extra: Any) -> Grant:
    return Grant.from_dict({"grant_id": grant_id, "streams": list(streams), **extra})


def owner(stream: str = "message_bodies", connection_id: str = MAILBOX) -> Grant:
    return Grant.owner(connection_id, stream)


MIXED_ALPHABET = "abcdefghij ÉéüßΣσς名前😀🎉\u0301KİẞxyzABC,.\n"


def mixed_text(size: int, seed: int = 7) -> str:
    """Deterministic text of `size` code points mixing ASCII, accents, CJK, combining marks and
    astral characters."""
    rng = random.Random(seed)
    return "".join(rng.choice(MIXED_ALPHABET) for _ in range(size))


def big_text(size: int, mixed: bool) -> str:
    """A large deterministic text, built by repetition (fast) with a unique tail marker."""
    unit = "Dear Zoë, the invoice for März is attached 😀. " if mixed else "Dear Joe, the invoice. "
    tail = "UNIQUE-TAIL-MARKER"
    return (unit * (size // len(unit) + 1))[: size - len(tail)] + tail
