"""Every route and every status the OpenAPI document lists, through a client generated from it
(`openapi-python-client`, a generator this project did not write), over a real socket: each
answer is one the document lists for that route (the client raises on any other), and parses into
the model the document names (the error envelope for every error, `None` for a 304, the bytes of
a blob left as they came). The statuses reached are then checked against the document's own
list, route by route, so a status documented but never produced (or produced but not documented)
fails here.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _data import MAILBOX, body, manifest
from _postgres import PostgresServer
from _rest import DATA, EXPIRED, OWNER, TOKEN_GRANTS
from _served import Server, seed_served, start
from sqlalchemy import create_engine, text
from test_rest_openapi_client import PACKAGE, _document, _generated

from pdpp_store import Store
from pdpp_store._runtime import sync_url

TWO = "tok_two_connections_00000"
"""A grant over two connections that both hold record `b1`: an id without one is ambiguous."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Any]]:
    """A served database of this test's own, and a way to take it away under the server."""
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        with _serving(f"sqlite:///{path}", tmp_path) as server:
            yield server, lambda: _lose(path)
        return
    pg_server: PostgresServer = request.getfixturevalue("pg_server")
    template: str = request.getfixturevalue("pg_template")
    name = f"pdpp_statuses_{uuid.uuid4().hex}"
    url = pg_server.create_database(name, template=template)
    try:
        with _serving(url, tmp_path) as server:
            yield server, lambda: pg_server.drop_database(name)
    finally:
        pg_server.drop_database(name)


@contextlib.contextmanager
def _serving(url: str, where: Path) -> Iterator[Server]:
    seed_served(url)
    with Store.open(url) as store:
        store.add_connection("cin_second", manifest("gmail")["connector_id"])
        store.upsert_records("cin_second", "message_bodies", [body("b1", "second")])
        store.upsert_records(MAILBOX, "message_bodies", [body("far", "ahead", FAR_AHEAD)])
    grants = {
        **TOKEN_GRANTS,
        TWO: {
            "grant_id": "g-two",
            "streams": [{"name": "message_bodies", "instance_ids": [MAILBOX, "cin_second"]}],
        },
    }
    tokens = where / "tokens.json"
    tokens.write_text(json.dumps(grants), encoding="utf-8")
    running = start(url, tokens)
    try:
        yield running
    finally:
        running.stop()


FAR_AHEAD = "2700-01-01T00:00:00Z"
"""A body received so far ahead that its time buckets in a zone with summer time span more offset
changes than an aggregate walks: the 422 (`aggregate_range_too_wide`) of the aggregate route."""


def _db_url(server: Server) -> str:
    command = server.process.args
    assert isinstance(command, list)
    return str(command[command.index("--db") + 1])


def _forget_changes(url: str) -> None:
    """The database as restored from an older backup: every connection's change counter lower
    than a bookmark handed out before (the 410 of `changes_since`)."""
    engine = create_engine(sync_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE change_counters SET last_change_seq = 1"))
    finally:
        engine.dispose()


def _given(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments to send: a `None` means "leave it out" (the generated client's UNSET)."""
    return {name: value for name, value in arguments.items() if value is not None}


def _raw(module: Any, client: Any, path: str) -> Callable[[], Any]:
    """A GET of `path` with a query parameter no route takes, parsed by the generated module."""

    def call() -> Any:
        response = client.get_httpx_client().get(path, params={"colour": "red"})
        return module._build_response(client=client, response=response)

    return call


def _lose(path: Path) -> None:
    """The files are no longer a database (open connections see it too): 503 from now on."""
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            with part.open("r+b") as handle:
                handle.write(b"\xff" * min(part.stat().st_size, 1 << 16))


def test_a_generated_client_meets_every_documented_status(
    served: tuple[Server, Any], tmp_path: Path
) -> None:
    server, lose = served
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

    # The generator leaves `*/*` answers (a blob's bytes, whatever their type) out of its parser,
    # so for those two statuses (and the 200s that may precede a 503, below) the client must not
    # raise on "unexpected" ones.
    bytes_client = package.AuthenticatedClient(base_url=base, token=OWNER)
    whole = check("read_blob", 200, None, blob(bytes_client))
    assert whole.content == DATA  # the bytes, untouched by the client
    etag = whole.headers["ETag"]
    ranged = check("read_blob", 206, None, blob(bytes_client, range_="bytes=0-9"))
    assert ranged.content == DATA[:10]
    check("read_blob", 304, None, blob(if_none_match=etag))
    # a query parameter the route does not take: the only 400 of a route whose one parameter is
    # in its path, and one the generated functions cannot send, so sent raw and parsed by them
    check("read_blob", 400, error, _raw(blobs, owner, f"/v1/blobs/{blob_id}"))
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
    check(
        discovery, 400, error, _raw(metadata, client(None), "/.well-known/oauth-protected-resource")
    )

    asking = _check_asking(
        api, models, check=check, url=_db_url(server), owner=owner, expired=expired, nobody=nobody
    )

    lose()
    for operation, call in (
        ("read_field_window", window(bytes_client)),
        ("read_record", record(bytes_client)),
        ("search", search(bytes_client)),
        ("read_blob", blob(bytes_client)),
        *((operation, call(bytes_client)) for operation, call in asking.items()),
    ):
        check(operation, 503, error, call)  # the first read after the loss, and every one
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


def _check_asking(
    api: Callable[[str], Any],
    models: Any,
    *,
    check: Callable[..., Any],
    url: str,
    owner: Any,
    expired: Any,
    nobody: Any,
) -> dict[str, Callable[[Any], Callable[[], Any]]]:
    """The discovery routes (`/v1/schema`, `/v1/streams`, `/v1/streams/{stream}`) and the asking
    routes (`/v1/streams/{stream}/records`, `/v1/streams/{stream}/aggregate`): every status each
    documents but 503. Returns, per operation, a call the caller repeats once the database is
    lost."""
    error = models.Error
    discovery = {
        "describe_grant": (api("discovery.describe_grant"), "/v1/schema", ()),
        "list_streams": (api("discovery.list_streams"), "/v1/streams", ()),
        "describe_stream": (
            api("discovery.describe_stream"),
            "/v1/streams/message_bodies",
            ("message_bodies",),
        ),
    }
    calls: dict[str, Callable[[Any], Callable[[], Any]]] = {}
    for operation, (module, path, positional) in discovery.items():

        def ask(who: Any, module: Any = module, at: Any = positional, **options: Any) -> Any:
            return lambda: module.sync_detailed(*at, client=who, **options)

        answer = check(operation, 200, object, ask(owner))
        check(operation, 304, None, ask(owner, if_none_match=answer.headers["ETag"]))
        check(operation, 400, error, _raw(module, owner, path))
        check(operation, 401, error, ask(nobody))
        check(operation, 403, error, ask(expired))
        calls[operation] = ask

    records = api("records.query_records")

    def query(who: Any = owner, **options: Any) -> Callable[[], Any]:
        return lambda: records.sync_detailed("message_bodies", client=who, **options)

    page = check("query_records", 200, models.RecordPage, query(limit=1, count="exact"))
    assert page.parsed.has_more
    etag = page.headers["ETag"]
    check("query_records", 304, None, query(limit=1, count="exact", if_none_match=etag))
    check("query_records", 400, error, query(cursor="nope"))
    check("query_records", 400, error, query(filter_='{"charset": {"gte": "a"}}'))
    check("query_records", 401, error, query(nobody))
    check("query_records", 403, error, query(expired))
    check("query_records", 404, error, query(connection_id="cin_nope"))
    changes = check("query_records", 200, models.RecordPage, query(changes_since="beginning"))
    bookmark = changes.parsed.next_changes_since
    calls["query_records"] = query

    aggregates = api("records.aggregate")
    year = models.AggregateGranularity("year")
    card = (models.AggregateResultType0, models.AggregateResultType1)

    def aggregate(who: Any = owner, **options: Any) -> Callable[[], Any]:
        arguments = _given({"group_by_time": "message_received_at", "granularity": year, **options})
        return lambda: aggregates.sync_detailed("message_bodies", client=who, **arguments)

    check("aggregate", 200, card, aggregate(connection_id=MAILBOX))
    undeclared = aggregate(group_by_time=None, granularity=None, group_by="charset")
    check("aggregate", 400, error, undeclared)
    check("aggregate", 401, error, aggregate(nobody))
    check("aggregate", 403, error, aggregate(expired))
    check("aggregate", 404, error, aggregate(connection_id="cin_nope"))
    check("aggregate", 422, error, aggregate(time_zone="America/New_York"))
    calls["aggregate"] = aggregate

    _forget_changes(url)
    check("query_records", 410, error, query(changes_since=bookmark))
    return calls
