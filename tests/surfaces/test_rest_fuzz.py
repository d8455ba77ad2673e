"""schemathesis over the app's own OpenAPI document, on every database: zero 5xx, and every
answer conforms to the document (status, content type, headers, body schema); invalid input
(negative mode) is refused with a 4xx.

The app runs in process on an event loop owned by the test (the store's connections belong to
it); each generated case is sent with httpx and checked by schemathesis's own checks. A case
gets one of the tokens (or none), and, three times in four, the path of a seeded record, field or
blob, so that generated requests reach real data and not only 404s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from _data import MAILBOX
from _rest import MAIL_ONLY, NARROW, OWNER, Site, served
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = {GenerationMode.POSITIVE: 60, GenerationMode.NEGATIVE: 40}
"""Examples per route and mode (bounded: this runs in the ordinary suite on both databases)."""

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture
def running(db_url: str) -> Iterator[tuple[asyncio.AbstractEventLoop, Site]]:
    loop = asyncio.new_event_loop()
    context = served(db_url)
    try:
        site = loop.run_until_complete(context.__aenter__())
        try:
            yield loop, site
        finally:
            loop.run_until_complete(context.__aexit__(None, None, None))
    finally:
        loop.close()


def _seeded(site: Site) -> dict[str, list[dict[str, str]]]:
    """Real path and query values per route (what a careful fuzz target offers)."""
    records = [{"stream": "message_bodies", "record_id": rid} for rid in ("b1", "b2", "b3")] + [
        {"stream": "attachments", "record_id": rid} for rid in ("a1", "a2")
    ]
    return {
        "records": records,
        "blobs": [{"blob_id": site.blob.blob_id}, {"blob_id": site.secret_blob.blob_id}],
        "message_bodies": [{"field": f} for f in ("body_text", "body_html", "id")],
        "attachments": [{"field": f} for f in ("filename", "id", "blob_ref")],
    }


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_openapi_document_holds_under_fuzzing(
    running: tuple[asyncio.AbstractEventLoop, Site], mode: GenerationMode
) -> None:
    loop, site = running
    document = loop.run_until_complete(site.get(None, "/openapi.json")).json()
    schema = schemathesis.openapi.from_dict(document)
    seeded = _seeded(site)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 5
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS
    sent = 0

    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not list(operation.iter_parameters()):
            continue  # nothing to make invalid

        @settings(
            max_examples=EXAMPLES[mode],
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(
            case=operation.as_strategy(generation_mode=mode),
            token=st.sampled_from([OWNER, OWNER, NARROW, MAIL_ONLY, None]),
            place=st.integers(0, 99),
        )
        def exchange(case: Any, token: str | None, place: int) -> None:
            nonlocal sent
            if place % 4 and mode is GenerationMode.POSITIVE:  # three cases in four
                _aim_at_seeded_data(case, seeded, place)
            kwargs = case.as_transport_kwargs(base_url="http://pdpp.test")
            # The generated credentials are random: send one of the real tokens, or none.
            generated = kwargs.get("headers") or {}
            headers = {k: v for k, v in generated.items() if k.lower() != "authorization"}
            if mode is GenerationMode.NEGATIVE and len(headers) == len(generated):
                token = None  # the negative case is the missing credential itself
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            # HTTP carries header values as bytes: a value no client could send is not a case.
            assume(all(_sendable(value) for value in headers.values()))
            response = loop.run_until_complete(
                site.client.request(
                    kwargs["method"],
                    kwargs["url"],
                    params=kwargs.get("params"),
                    headers=headers,
                )
            )
            sent += 1
            assert response.status_code < 500, response.text
            case.validate_response(response, checks=checks, headers=headers)

        exchange()
    assert sent >= 3 * 10


def _sendable(value: object) -> bool:
    try:
        str(value).encode("ascii")
    except UnicodeEncodeError:
        return False
    return "\r" not in str(value) and "\n" not in str(value)


def _aim_at_seeded_data(case: Any, seeded: dict[str, list[dict[str, str]]], place: int) -> None:
    path = case.operation.path
    if "{record_id}" in path:
        records = seeded["records"]
        record = records[place % len(records)]
        case.path_parameters = {**case.path_parameters, **record}
        if "field" in (case.query or {}):
            fields = seeded[record["stream"]]
            case.query = {**case.query, **fields[place // len(records) % len(fields)]}
        if case.query is not None and "connection_id" in case.query:
            case.query = {**case.query, "connection_id": MAILBOX}
        if path.endswith("/field-window") and place % 2 == 0:
            # A plain offset read, so that windows (and their schema) are really exercised.
            selector = {"q", "cursor", "before_chars", "after_chars"}
            case.query = {k: v for k, v in (case.query or {}).items() if k not in selector}
            case.headers = {
                k: v for k, v in (case.headers or {}).items() if k.lower() != "if-match"
            }
    elif "{blob_id}" in path:
        blobs = seeded["blobs"]
        case.path_parameters = {**case.path_parameters, **blobs[place % len(blobs)]}
