"""Every route and every status the OpenAPI document lists, through a client generated from it
(`openapi-python-client`, a generator this project did not write), over a real socket: each
answer is one the document lists for that route (the client raises on any other), and parses into
the model the document names (the error envelope for every error, `None` for a 304, the bytes of
a blob left as they came). The statuses reached are then checked against the document's own
list, route by route, so a status documented but never produced (or produced but not documented)
fails here.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _data import MAILBOX, body, manifest
from _rest import DATA, EXPIRED, OWNER, TOKEN_GRANTS
from test_rest_openapi_client import PACKAGE, _document, _generated
from test_serve import Server, _seed, start

from pdpp_store import Store

TWO = "tok_two_connections_00000"
"""A grant over two connections that both hold record `b1`: an id without one is ambiguous."""


@pytest.fixture
def served(sqlite_db_url: str, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    _seed(sqlite_db_url)
    with Store.open(sqlite_db_url) as store:
        store.add_connection("cin_second", manifest("gmail")["connector_id"])
        store.upsert_records("cin_second", "message_bodies", [body("b1", "second")])
    grants = {
        **TOKEN_GRANTS,
        TWO: {
            "grant_id": "g-two",
            "streams": [{"name": "message_bodies", "instance_ids": [MAILBOX, "cin_second"]}],
        },
    }
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(grants), encoding="utf-8")
    running = start(sqlite_db_url, tokens)
    try:
        yield running, Path(sqlite_db_url.removeprefix("sqlite:///"))
    finally:
        running.stop()


def _given(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments to send: a `None` means "leave it out" (the generated client's UNSET)."""
    return {name: value for name, value in arguments.items() if value is not None}


def _lose(path: Path) -> None:
    """The files are no longer a database (open connections see it too): 503 from now on."""
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            with part.open("r+b") as handle:
                handle.write(b"\xff" * min(part.stat().st_size, 1 << 16))


def test_a_generated_client_meets_every_documented_status(
    served: tuple[Server, Path], tmp_path: Path
) -> None:
    server, database = served
    document = _document(server)
    package = _generated(document, tmp_path)

    def api(name: str) -> Any:
        return importlib.import_module(f"{PACKAGE}.api.{name}")

    windows, records = api("records.read_field_window"), api("records.read_record")
    searches, blobs = api("search.search"), api("blobs.read_blob")
    metadata = api("discovery.protected_resource_well_known_oauth_protected_resource_get")
    models = importlib.import_module(f"{PACKAGE}.models")
    base = server.base_url

    def client(token: str | None) -> Any:
        if token is None:
            return package.Client(base_url=base, raise_on_unexpected_status=True)
        return package.AuthenticatedClient(
            base_url=base, token=token, raise_on_unexpected_status=True
        )

    owner, expired, two, nobody = client(OWNER), client(EXPIRED), client(TWO), client("tok_x" * 4)
    reached: dict[str, set[str]] = {}

    def check(operation: str, status: int, expected: Any, call: Callable[[], Any]) -> Any:
        answer = call()
        assert answer.status_code == status, (operation, answer.status_code, answer.content[:300])
        if expected is None:
            assert answer.parsed is None, (operation, status)
        else:
            assert isinstance(answer.parsed, expected), (operation, status, answer.parsed)
        if isinstance(answer.parsed, models.Error):
            assert answer.parsed.error.request_id.startswith("req_")
        reached.setdefault(operation, set()).add(str(status))
        return answer

    error = models.Error
    bodies = {"stream": "message_bodies", "record_id": "b1"}

    def window(who: Any = owner, **options: Any) -> Callable[[], Any]:
        arguments = _given({**bodies, "field": "body_text", "connection_id": MAILBOX, **options})
        return lambda: windows.sync_detailed(client=who, **arguments)

    first = check("read_field_window", 200, models.FieldWindowResponse, window(limit_chars=10))
    digest = first.parsed.field.digest
    check("read_field_window", 304, None, window(limit_chars=10, if_none_match=f'"{digest}"'))
    check("read_field_window", 400, error, window(cursor="nope"))
    check("read_field_window", 401, error, window(nobody))
    check("read_field_window", 403, error, window(expired))
    check("read_field_window", 404, error, window(record_id="nope"))
    check("read_field_window", 409, error, window(two, connection_id=None))
    check("read_field_window", 412, error, window(if_match='"sha256:' + "0" * 64 + '"'))
    binary = {"stream": "attachments", "record_id": "a1", "field": "blob_ref"}
    check("read_field_window", 422, error, window(**binary))

    def record(who: Any = owner, **options: Any) -> Callable[[], Any]:
        arguments = _given({**bodies, "connection_id": MAILBOX, **options})
        return lambda: records.sync_detailed(client=who, **arguments)

    view = check("read_record", 200, models.RecordView, record())
    revision = view.parsed.revision
    assert isinstance(view.parsed.card, models.RecordCard)  # the card is a model too
    check("read_record", 304, None, record(if_none_match=f'"{revision}"'))
    check("read_record", 400, error, record(fields="not a path\x00"))
    check("read_record", 401, error, record(nobody))
    check("read_record", 403, error, record(expired))
    check("read_record", 404, error, record(record_id="nope"))
    check("read_record", 409, error, record(two, connection_id=None))
    check("read_record", 412, error, record(if_match='"sha256:' + "0" * 64 + '"'))

    def search(who: Any = owner, **options: Any) -> Callable[[], Any]:
        arguments = {"q": "short", **options}
        return lambda: searches.sync_detailed(client=who, **arguments)

    check("search", 200, models.SearchPage, search())
    check("search", 400, error, search(q=""))
    check("search", 401, error, search(nobody))
    check("search", 403, error, search(expired))
    check("search", 404, error, search(connection_id="cin_nope"))

    blob_id = "blob_sha256_" + hashlib.sha256(DATA).hexdigest()

    def blob(who: Any = owner, **options: Any) -> Callable[[], Any]:
        return lambda: blobs.sync_detailed(blob_id, client=who, **options)

    whole = check("read_blob", 200, None, blob())
    assert whole.content == DATA  # the bytes, untouched by the client
    etag = whole.headers["ETag"]
    ranged = check("read_blob", 206, None, blob(range_="bytes=0-9"))
    assert ranged.content == DATA[:10]
    check("read_blob", 304, None, blob(if_none_match=etag))
    check("read_blob", 400, error, blob(range_="bytes=9-0"))
    check("read_blob", 401, error, blob(nobody))
    check("read_blob", 403, error, blob(expired))
    check(
        "read_blob",
        404,
        error,
        lambda: blobs.sync_detailed("blob_sha256_" + "0" * 64, client=owner),
    )
    check("read_blob", 416, error, blob(range_=f"bytes={len(DATA)}-"))

    discovery = next(
        op["operationId"]
        for op in document["paths"]["/.well-known/oauth-protected-resource"].values()
    )
    check(discovery, 200, object, lambda: metadata.sync_detailed(client=client(None)))
    with client(None) as anonymous:
        unknown = anonymous.get_httpx_client().get(
            "/.well-known/oauth-protected-resource", params={"colour": "red"}
        )
        check(
            discovery,
            400,
            error,
            lambda: metadata._build_response(client=anonymous, response=unknown),
        )

    _lose(database)
    for operation, call in (
        ("read_field_window", window()),
        ("read_record", record()),
        ("search", search()),
        ("read_blob", blob()),
    ):
        check(operation, 503, error, call)

    documented = {
        op["operationId"]: set(op["responses"])
        for path in document["paths"].values()
        for op in path.values()
    }
    mcp_metadata = {key for key in documented if key not in reached}
    assert all("protected_mcp_resource" in key for key in mcp_metadata), mcp_metadata
    for operation, statuses in reached.items():
        assert statuses == documented[operation], operation
