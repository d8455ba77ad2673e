"""Parity between surfaces: one read through the library, the CLI, REST and MCP (over `/mcp` of
the REST app) gives the same window text, offsets and continuation (the same cursor, since
cursors are deterministic for a grant, record, field, position and limit), on every database;
and the CLI's `--format text` is exactly MCP's `content[]` text.

Each surface reads with the same grant: the CLI gets it as a `--grant` file, REST and MCP as the
grant of a bearer token; the library is called directly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from _data import MAILBOX
from _mcp import texts
from _rest import OWNER, TEXT, TOKEN_GRANTS, Site, served, tokens, window_path
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pdpp_store import FieldWindowRef, Grant, RecordRef
from pdpp_store.cli import cli
from pdpp_store.mcp import http_app
from pdpp_store.rest import create_app

READS: list[dict[str, Any]] = [
    {"offset_chars": 0, "limit_chars": 300},
    {"offset_chars": 4900, "limit_chars": 300},
    {"q": TEXT[2500:2508], "before_chars": 30, "after_chars": 40},
    {"offset_chars": 10_000},
]
CLI_OPTIONS = {
    "offset_chars": "--offset",
    "limit_chars": "--limit",
    "q": "--q",
    "before_chars": "--before",
    "after_chars": "--after",
    "cursor": "--cursor",
}


@dataclass
class Surfaces:
    site: Site
    mcp: Client


@asynccontextmanager
async def opened(db_url: str) -> AsyncIterator[Surfaces]:
    """The seeded app with REST and MCP, and an MCP client on `/mcp` (opened and closed in the
    test's own task: the SDK's task groups cannot span a fixture's setup and teardown)."""
    async with served(db_url) as site:
        grants = tokens()
        app = create_app(site.store, grants, mcp_app=http_app(site.store, grants))
        async with app.router.lifespan_context(app):
            http = httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app),
                base_url="http://pdpp.test",
                headers={"Authorization": f"Bearer {OWNER}"},
            )
            link = streamable_http_client("http://pdpp.test/mcp", http_client=http)
            async with http, Client(link) as client:
                yield Surfaces(site, client)


def _essence(envelope: dict[str, Any]) -> dict[str, Any]:
    """What every surface must agree on, from a field-window envelope (contract §3)."""
    window = envelope["window"]
    match = window["match_start_chars"]
    return {
        "record": [envelope["connection_id"], envelope["stream"], envelope["record_id"]],
        "digest": envelope["field"]["digest"],
        "text": window["text"],
        "range": [window["start_chars"], window["end_chars"]],
        "total": window["total_chars"],
        "match": None if match is None else [match, window["match_end_chars"]],
        "next_cursor": window["next_cursor"],
        "previous_cursor": window["previous_cursor"],
    }


def _mcp_essence(structured: dict[str, Any]) -> dict[str, Any]:
    """The same, from `read_record_field`'s structured output."""
    record, field, window = structured["record"], structured["field"], structured["window"]
    match = window["match"]
    return {
        "record": [record["connection_id"], record["stream"], record["record_id"]],
        "digest": field["digest"],
        "text": window["text"],
        "range": [window["start_chars"], window["end_chars"]],
        "total": field["size_chars"],
        "match": None if match is None else [match["start_chars"], match["end_chars"]],
        "next_cursor": window["next_cursor"],
        "previous_cursor": window["previous_cursor"],
    }


async def _mcp(client: Client, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    result = await client.call_tool(
        "read_record_field",
        {"id": f"{MAILBOX}/message_bodies:b1", "field_path": "body_text", **args},
    )
    assert not result.is_error, result.content
    return _mcp_essence(result.structured_content), texts(result)


def _cli(url: str, grant_file: Path, args: dict[str, Any], *more: str) -> str:
    options = [part for key, value in args.items() for part in (CLI_OPTIONS[key], str(value))]
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            url,
            "read",
            "field-window",
            f"{MAILBOX}/message_bodies:b1",
            "body_text",
            "--grant",
            str(grant_file),
            *options,
            *more,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _cli_json(url: str, grant_file: Path, args: dict[str, Any]) -> dict[str, Any]:
    envelope: dict[str, Any] = json.loads(_cli(url, grant_file, args))
    return envelope


@pytest.mark.parametrize("args", READS, ids=["start", "end", "match", "past-the-end"])
async def test_library_cli_rest_and_mcp_give_the_same_window(
    db_url: str, tmp_path: Path, args: dict[str, Any]
) -> None:
    async with opened(db_url) as surfaces:
        await _compare(surfaces, db_url, tmp_path, args)


async def _compare(surfaces: Surfaces, db_url: str, tmp_path: Path, args: dict[str, Any]) -> None:
    site = surfaces.site
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(TOKEN_GRANTS[OWNER]), encoding="utf-8")
    grant = Grant.from_dict(TOKEN_GRANTS[OWNER])

    library = (
        await site.store.read_field_window(
            grant, f"{MAILBOX}/message_bodies:b1", "body_text", **args
        )
    ).to_dict()
    command_line = _cli_json(db_url, grant_file, args)
    response = await site.get(OWNER, window_path(), {"field": "body_text", **args})
    assert response.status_code == 200, response.text
    rest = response.json()
    mcp, mcp_text = await _mcp(surfaces.mcp, args)

    assert _essence(command_line) == _essence(library)
    assert _essence(rest) == _essence(library)
    assert mcp == _essence(library)
    # `--format text` is what an MCP client's content[] shows, to the character.
    assert _cli(db_url, grant_file, args, "--format", "text").removesuffix("\n") == mcp_text

    # The continuation is the same read on every surface: follow it through each and compare.
    cursor = library["window"]["next_cursor"] or library["window"]["previous_cursor"]
    if cursor is None:
        return
    after = (
        await site.store.read_field_window(
            grant, f"{MAILBOX}/message_bodies:b1", "body_text", cursor=cursor
        )
    ).to_dict()
    assert _essence(_cli_json(db_url, grant_file, {"cursor": cursor})) == _essence(after)
    followed = await site.get(OWNER, window_path(), {"field": "body_text", "cursor": cursor})
    assert _essence(followed.json()) == _essence(after)
    assert (await _mcp(surfaces.mcp, {"cursor": cursor}))[0] == _essence(after)


async def test_cli_text_of_a_record_and_a_blob_is_mcp_content(db_url: str, tmp_path: Path) -> None:
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(TOKEN_GRANTS[OWNER]), encoding="utf-8")
    async with opened(db_url) as surfaces:
        ref = f"{MAILBOX}/message_bodies:b1"
        fetched = await surfaces.mcp.call_tool("fetch", {"id": ref})
        assert not fetched.is_error
        command = [
            "--db", db_url, "read", "record", ref, "--grant", str(grant_file), "--format", "text"
        ]  # fmt: skip
        shown = CliRunner().invoke(cli, command, catch_exceptions=False)
        assert shown.exit_code == 0, shown.stderr
        assert shown.stdout.removesuffix("\n") == texts(fetched)

        blob_id = surfaces.site.blob.blob_id
        fetched = await surfaces.mcp.call_tool("fetch", {"id": f"pdpp://blob/{blob_id}"})
        assert not fetched.is_error, texts(fetched)
        command = ["--db", db_url, "blob", "info", blob_id, "--grant", str(grant_file)]
        shown = CliRunner().invoke(cli, [*command, "--format", "text"], catch_exceptions=False)
        assert shown.exit_code == 0, shown.stderr
        assert shown.stdout.removesuffix("\n") == texts(fetched)


async def test_cli_text_of_a_resource_and_a_grant_is_mcp_content(
    db_url: str, tmp_path: Path
) -> None:
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(TOKEN_GRANTS[OWNER]), encoding="utf-8")
    async with opened(db_url) as surfaces:
        b1 = RecordRef(MAILBOX, "message_bodies", "b1")
        uris = [FieldWindowRef(b1, "body_text", 10, 50).uri, b1.uri]
        for uri in uris:
            fetched = await surfaces.mcp.call_tool("fetch", {"id": uri})
            assert not fetched.is_error, texts(fetched)
            command = ["--db", db_url, "read", "resource", uri, "--grant", str(grant_file)]
            shown = CliRunner().invoke(cli, [*command, "--format", "text"], catch_exceptions=False)
            assert shown.exit_code == 0, shown.stderr
            assert shown.stdout.removesuffix("\n") == texts(fetched)

        schema = await surfaces.mcp.call_tool("schema", {})
        command = ["--db", db_url, "grant", "describe", "--grant", str(grant_file)]
        shown = CliRunner().invoke(cli, [*command, "--format", "text"], catch_exceptions=False)
        assert shown.exit_code == 0, shown.stderr
        assert shown.stdout.removesuffix("\n") == texts(schema)


async def test_a_search_page_s_next_page_is_the_same_call_on_every_surface(
    db_url: str, tmp_path: Path
) -> None:
    """`SearchPage.next` is the library's `search` call for the next page: MCP shows it as the
    tool call to make (in content[] and structuredContent), the CLI's `--format text` prints
    the same content, and following it gives the library's next page."""
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(TOKEN_GRANTS[OWNER]), encoding="utf-8")
    grant = Grant.from_dict(TOKEN_GRANTS[OWNER])
    async with opened(db_url) as surfaces:
        page = await surfaces.site.store.search(grant, "h", limit=1)
        assert page.next is not None
        assert page.next.operation == "search"
        assert dict(page.next.arguments) == {"q": "h", "limit": 1, "cursor": page.next_cursor}
        result = await surfaces.mcp.call_tool("search", {"q": "h", "limit": 1})
        assert not result.is_error
        structured = result.structured_content
        assert structured is not None
        following = structured["next"]
        assert following == {"tool": "search", "arguments": dict(page.next.arguments)}
        assert json.loads(texts(result).partition("\n")[0])["next"] == following
        command = [
            "--db", db_url, "search", "h", "--limit", "1", "--grant", str(grant_file),
            "--format", "text",
        ]  # fmt: skip
        shown = CliRunner().invoke(cli, command, catch_exceptions=False)
        assert shown.exit_code == 0, shown.stderr
        assert shown.stdout.removesuffix("\n") == texts(result)
        second = await surfaces.mcp.call_tool(following["tool"], following["arguments"])
        library = await surfaces.site.store.search(grant, **dict(page.next.arguments))
        assert second.structured_content is not None
        ids = [hit["id"] for hit in second.structured_content["data"]]
        assert ids == [hit.to_dict()["id"] for hit in library.hits]
        assert ids
        assert ids != [hit.to_dict()["id"] for hit in page.hits]


async def test_search_order_filter_and_count_are_the_same_on_every_surface(
    db_url: str, tmp_path: Path
) -> None:
    """`order`, `filter` and `count` reach the library alike from MCP, REST and the CLI: the same
    hits, scores, count and next call; a bad order is the same typed error everywhere."""
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(TOKEN_GRANTS[OWNER]), encoding="utf-8")
    grant = Grant.from_dict(TOKEN_GRANTS[OWNER])
    chosen = {"charset": "utf-8"}
    async with opened(db_url) as surfaces:
        for order in ("relevance", "asc"):
            args: dict[str, Any] = {
                "q": "h",
                "streams": ["message_bodies"],  # a filter goes with the streams declaring it
                "limit": 1,
                "order": order,
                "count": "exact",
                "filter": chosen,
            }
            library = (await surfaces.site.store.search(grant, **args)).to_dict()
            assert library["count"]["value"] >= 2
            assert all("score" in hit for hit in library["data"])
            result = await surfaces.mcp.call_tool("search", args)
            assert not result.is_error
            assert result.structured_content is not None
            ranked = [(hit["id"], hit["score"]) for hit in library["data"]]
            shown_hits = result.structured_content["data"]  # reads shown as tool calls
            assert [(hit["id"], hit["score"]) for hit in shown_hits] == ranked
            assert result.structured_content["count"] == library["count"]
            rest = await surfaces.site.get(
                OWNER, "/v1/search", {**args, "filter": json.dumps(chosen)}
            )
            assert rest.status_code == 200, rest.text
            assert rest.json() == library
            command = [
                "--db", db_url, "search", "h", "--limit", "1", "--grant", str(grant_file),
                "--order", order, "--count", "exact", "--filter", json.dumps(chosen),
                "--stream", "message_bodies",
                "--format", "json",
            ]  # fmt: skip
            shown = CliRunner().invoke(cli, command, catch_exceptions=False)
            assert shown.exit_code == 0, shown.stderr
            assert json.loads(shown.stdout) == library
        refused = await surfaces.site.get(OWNER, "/v1/search", {"q": "h", "order": "newest"})
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "order"
        bad = await surfaces.mcp.call_tool("search", {"q": "h", "count": "all"})
        assert bad.is_error
