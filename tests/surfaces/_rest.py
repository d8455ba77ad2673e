"""Test material for the REST surface: a seeded store, its tokens, and an HTTP client on the app.

    async with served(db_url) as site:       # the app over an AsyncStore on db_url, seeded
        response = await site.get(OWNER, "/v1/...")

The seed (on every database):
- `message_bodies` in `MAILBOX`: b1 (`TEXT`, 5000 mixed code points), b2 (short), b3 (holds
  `CANARY` in its body: hidden from `NARROW` by `resources`), and `CANARY` in b1's `body_html`
  (a field `NARROW` does not cover).
- `attachments` in `MAILBOX`: a1 whose `blob_ref` is `site.blob` (`DATA`, about 200 KB), and a2
  whose blob (`site.secret_blob`) holds `CANARY`; `NARROW` covers no `blob_ref`.
Tokens: `OWNER` (all fields of both streams), `NARROW` (ids and body text of b1/b2, attachment
ids), `EXPIRED`, `REVOKED`, `MAIL_ONLY` (no attachments).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from _data import MAILBOX, attachment, body, manifest, mixed_text

from pdpp_store import AsyncStore, BlobInfo, Grant
from pdpp_store.rest import create_app

__all__ = [
    "CANARY",
    "DATA",
    "EXPIRED",
    "MAIL_ONLY",
    "NARROW",
    "OWNER",
    "REVOKED",
    "TEXT",
    "TOKEN_GRANTS",
    "Site",
    "served",
    "window_path",
]

CANARY = "CANARY-7f3a9-never-leaves"
TEXT = mixed_text(5000)
DATA = random.Random(12).randbytes(200_000)
SECRET_DATA = b"%PDF " + CANARY.encode() + b" end"

OWNER = "tok_owner_000000000000000"
NARROW = "tok_narrow_00000000000000"
EXPIRED = "tok_expired_0000000000000"
REVOKED = "tok_revoked_0000000000000"
MAIL_ONLY = "tok_mailonly_000000000000"

_BOTH = [MAILBOX]
TOKEN_GRANTS: dict[str, dict[str, Any]] = {
    OWNER: {
        "grant_id": "g-owner",
        "streams": [
            {"name": "message_bodies", "instance_ids": _BOTH},
            {"name": "attachments", "instance_ids": _BOTH},
        ],
    },
    NARROW: {
        "grant_id": "g-narrow",
        "streams": [
            {
                "name": "message_bodies",
                "instance_ids": _BOTH,
                "fields": ["id", "body_text"],
                "resources": ["b1", "b2"],
            },
            {"name": "attachments", "instance_ids": _BOTH, "fields": ["id", "filename"]},
        ],
    },
    EXPIRED: {
        "grant_id": "g-expired",
        "expires_at": "2020-01-01T00:00:00Z",
        "streams": [{"name": "message_bodies", "instance_ids": _BOTH}],
    },
    REVOKED: {
        "grant_id": "g-revoked",
        "status": "revoked",
        "streams": [{"name": "message_bodies", "instance_ids": _BOTH}],
    },
    MAIL_ONLY: {
        "grant_id": "g-mail",
        "streams": [{"name": "message_bodies", "instance_ids": _BOTH}],
    },
}


def tokens() -> dict[str, Grant]:
    return {token: Grant.from_dict(grant) for token, grant in TOKEN_GRANTS.items()}


def window_path(record_id: str = "b1", stream: str = "message_bodies") -> str:
    return f"/v1/streams/{stream}/records/{record_id}/field-window"


@dataclass
class Site:
    store: AsyncStore
    client: httpx.AsyncClient
    blob: BlobInfo
    secret_blob: BlobInfo

    async def get(
        self,
        token: str | None,
        path: str,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return await self.client.get(path, params=params, headers=sent)


async def seed(store: AsyncStore) -> tuple[BlobInfo, BlobInfo]:
    gmail = manifest("gmail")
    await store.register_manifest(gmail)
    await store.add_connection(MAILBOX, gmail["connector_id"])
    b1 = {**body("b1", TEXT), "body_html": f"<p>{CANARY}</p>"}
    await store.upsert_records(
        MAILBOX, "message_bodies", [b1, body("b2", "short"), body("b3", f"hidden {CANARY}")]
    )
    blob = await store.put_blob(DATA, "application/pdf")
    secret = await store.put_blob(SECRET_DATA, "application/pdf")
    await store.upsert_records(
        MAILBOX, "attachments", [attachment("a1", blob.as_ref()), attachment("a2", secret.as_ref())]
    )
    return blob, secret


@contextlib.asynccontextmanager
async def served(url: str, **app_options: Any) -> AsyncIterator[Site]:
    """The app over an AsyncStore on `url` (seeded), and a client that calls it in process."""
    store = await AsyncStore.open(url)
    try:
        blob, secret = await seed(store)
        app = create_app(store, tokens(), **app_options)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://pdpp.test") as client:
            yield Site(store, client, blob, secret)
    finally:
        await store.close()
