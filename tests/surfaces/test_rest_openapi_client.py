"""The OpenAPI document, as generators use it: a Python client generated from the running
server's `/openapi.json` by `openapi-python-client` (a generator this project did not write) calls
the real server over a socket and parses its answers into its own model classes, successes and
error envelopes alike; and the document names its schemas once (`components.schemas`, `$ref`),
its `servers`, its response headers and a typed continuation.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from _rest import OWNER, TEXT
from _served import Server, server, tokens_file

__all__ = ["server", "tokens_file"]  # fixtures of _served, used here too

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "pdpp_generated_client"


def _document(server: Server) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(f"{server.base_url}/openapi.json").json()
    return document


def _generated(document: dict[str, Any], where: Path) -> Any:
    """The client package `openapi-python-client` generates from `document`, imported."""
    spec = where / "openapi.json"
    spec.write_text(json.dumps(document), encoding="utf-8")
    out = where / PACKAGE
    path = f"{GENERATOR.parent}{os.pathsep}{os.environ.get('PATH', '')}"  # its ruff, too
    command = [str(GENERATOR), "generate", "--path", str(spec), "--output-path", str(out)]
    done = subprocess.run(
        [*command, "--meta", "none"],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    # every JSON answer of every route is generated (the blob's bytes are `*/*`, not JSON)
    assert "duplicate models" not in said, said
    assert said.count("Cannot parse response") <= 2, said
    sys.path.insert(0, str(where))
    try:
        for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
            del sys.modules[name]
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))


def test_a_generated_client_parses_every_json_answer(server: Server, tmp_path: Path) -> None:
    client_package = _generated(_document(server), tmp_path)
    windows = importlib.import_module(f"{PACKAGE}.api.records.read_field_window")
    records = importlib.import_module(f"{PACKAGE}.api.records.read_record")
    searches = importlib.import_module(f"{PACKAGE}.api.search.search")
    models = importlib.import_module(f"{PACKAGE}.models")
    client = client_package.AuthenticatedClient(base_url=server.base_url, token=OWNER)
    with client:
        window = windows.sync(
            client=client,
            stream="message_bodies",
            record_id="b1",
            field="body_text",
            limit_chars=50,
        )
        assert isinstance(window, models.FieldWindowResponse)
        assert window.window.text == TEXT[:50]
        following = window.next_
        assert isinstance(following, models.Continuation)
        assert isinstance(following.arguments, models.ContinuationArguments)
        onward = windows.sync(
            client=client,
            stream="message_bodies",
            record_id="b1",
            field="body_text",
            cursor=following.arguments.cursor,
        )
        assert onward.window.text == TEXT[50:100]
        detailed = windows.sync_detailed(
            client=client, stream="message_bodies", record_id="b1", field="body_text"
        )
        assert detailed.headers["ETag"] == f'"{window.field.digest}"'
        refused = windows.sync(client=client, stream="message_bodies", record_id="b1", field="nope")
        assert isinstance(refused, models.Error)
        assert (refused.error.code, refused.error.param) == ("field_not_found", "field")
        assert refused.error.request_id.startswith("req_")
        record = records.sync(client=client, stream="message_bodies", record_id="b2")
        assert isinstance(record, models.RecordView)
        page = searches.sync(client=client, q="short")
        assert isinstance(page, models.SearchPage)
        assert [hit.record_key for hit in page.data] == ["b2"]
        _asks(client, models)


def _asks(client: Any, models: Any) -> None:
    """The asking routes' answers parse into their own classes: discovery and a records page."""
    described = importlib.import_module(f"{PACKAGE}.api.discovery.describe_grant")
    listed = importlib.import_module(f"{PACKAGE}.api.discovery.list_streams")
    one = importlib.import_module(f"{PACKAGE}.api.discovery.describe_stream")
    listing = importlib.import_module(f"{PACKAGE}.api.records.query_records")
    schema = described.sync(client=client)
    assert isinstance(schema, models.GrantSchema)
    assert [stream.name for stream in schema.streams] == ["attachments", "message_bodies"]
    streams = listed.sync(client=client)
    assert isinstance(streams, models.StreamList)
    stream = one.sync(client=client, stream="message_bodies")
    assert isinstance(stream, models.StreamSchema)
    assert stream.record_count == 3
    assert isinstance(stream.order, models.StreamOrder)
    page = listing.sync(client=client, stream="message_bodies", limit=2, count="exact")
    assert isinstance(page, models.RecordPage)
    assert len(page.data) == 2
    assert page.count.value == 3
    following = listing.sync(
        client=client, stream="message_bodies", limit=2, count="exact", cursor=page.next_cursor
    )
    assert isinstance(following, models.RecordPage)
    refused = listing.sync(client=client, stream="message_bodies", filter_="{not json")
    assert isinstance(refused, models.Error)
    assert (refused.error.code, refused.error.param) == ("invalid_filter", "filter")


def test_the_document_names_each_schema_once(server: Server) -> None:
    document = _document(server)
    schemas = document["components"]["schemas"]
    assert {"FieldWindowResponse", "RecordView", "SearchPage", "Error", "Continuation"} <= set(
        schemas
    )
    assert {"GrantSchema", "StreamSchema", "StreamList", "RecordPage", "RecordRow"} <= set(schemas)
    assert document["servers"] == [
        {"url": "/", "description": document["servers"][0]["description"]}
    ]
    paths = json.dumps(document["paths"])
    assert '"properties"' not in paths  # no object schema inline in a path: only references
    operations = {
        op["operationId"]: op for path in document["paths"].values() for op in path.values()
    }
    window = operations["read_field_window"]["responses"]
    assert window["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/FieldWindowResponse"
    }
    assert set(window["200"]["headers"]) == {"ETag", "X-Request-Id"}
    assert set(window["304"]["headers"]) == {"ETag", "X-Request-Id"}
    blob = operations["read_blob"]["responses"]
    assert set(blob["206"]["headers"]) == {"ETag", "Content-Range", "X-Request-Id"}
    assert "Content-Range" in blob["416"]["headers"]
    for operation in operations.values():
        for response in operation["responses"].values():
            assert "X-Request-Id" in response["headers"]
    # a card held inside another is a reference to its component, never a second copy
    card = json.dumps(schemas["FieldWindowResponse"])
    assert '"#/components/schemas/FieldInfo"' in card
    assert '"#/components/schemas/Continuation"' in card
    arguments = schemas["Continuation"]["properties"]["arguments"]
    assert arguments == {"$ref": "#/components/schemas/ContinuationArguments"}
    typed = schemas["ContinuationArguments"]["properties"]
    assert typed["cursor"]["type"] == "string"
    assert typed["limit_chars"]["type"] == "integer"
    for name, schema in schemas.items():
        text = json.dumps(schema)
        for other, other_schema in schemas.items():
            if other != name and len(json.dumps(other_schema)) > 200:
                assert json.dumps(other_schema)[1:-1] not in text, (other, "inline in", name)
