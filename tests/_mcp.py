"""MCP test material: a mailbox with a 3,000,000-character email, and the SDK's client as the four
agent classes of the content ladder (docs/contract.md §10, "Surfaces"), each seeing only what its
class sees.

    content_only      reads only the text of content[] (header line, then text or JSON lines)
    structured_only   reads only structuredContent
    resource_aware    calls search once, then follows resource links through resources/read
    full              reads everything and checks that the channels agree

Each agent takes a connected `mcp.Client` and a query, and returns the whole field it rebuilt
from windows joined by their ranges, with the match it reached (`Walk`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _data import MAILBOX, body, manifest
from mcp import StdioServerParameters
from mcp_types import TextResourceContents

from pdpp_store import Grant, Store, fold

BIG_ID = "big"
BIG_CHARS = 3_000_000
PHRASE = "kumquat ledger overdue"
PHRASE_AT = BIG_CHARS - 5_000
SMALL_TEXT = "Lunch at noon? Bring the kumquat ledger notes."
PAGE = 16_384


def big_email_text() -> str:
    unit = "Dear Zoë, the invoice for März is attached 😀. "
    filler = (unit * (BIG_CHARS // len(unit) + 1))[:BIG_CHARS]
    return filler[:PHRASE_AT] + PHRASE.upper() + filler[PHRASE_AT + len(PHRASE) :]


def load_ladder(url: str) -> None:
    """The mailbox of the agent tests: the big email, a small one, and an email whose undeclared
    field `body` holds the phrase (never evidence)."""
    gmail = manifest("gmail")
    with Store.open(url) as store:
        store.register_manifest(gmail)
        store.add_connection(MAILBOX, gmail["connector_id"])
        store.upsert_records(
            MAILBOX,
            "message_bodies",
            [
                body(BIG_ID, big_email_text()),
                body("small", SMALL_TEXT),
                {**body("decoy", "nothing to see"), "body": f"the {PHRASE} is here"},
            ],
        )


def owner() -> Grant:
    return Grant.owner(MAILBOX, "message_bodies")


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
"""The params of a module's `ladder_url` fixture: both databases."""


def ladder_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, label: str
) -> Iterator[str]:
    """The body of a `ladder_url` fixture: a database holding the agents' mailbox
    (`load_ladder`), a SQLite file in a temporary folder named `label`, or a pooled Postgres
    database given back afterwards."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp(label) / 'store.db'}"
        load_ladder(url)
        yield url
        return
    pool = request.getfixturevalue("pg_pool")
    server = request.getfixturevalue("pg_server")
    name = pool.take()
    try:
        url = server.database_url(name)
        load_ladder(url)
        yield url
    finally:
        pool.give_back(name)


def stdio(url: str, grant_file: Path) -> StdioServerParameters:
    """`pdpp-store --db URL mcp --grant FILE` as a subprocess the SDK's client starts and ends."""
    command = shutil.which("pdpp-store", path=os.path.dirname(sys.executable))
    assert command is not None
    return StdioServerParameters(
        command=command,
        args=["--db", url, "mcp", "--grant", str(grant_file)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


# ---------------------------------------------------------------- reading results


def texts(result: Any) -> str:
    """What a content-only reader sees: the text blocks of content[], joined."""
    return "\n".join(block.text for block in result.content if block.type == "text")


def header_and_body(result: Any) -> tuple[dict[str, Any], str]:
    """A window's text: the JSON header line, then the window's text verbatim."""
    first, _, rest = texts(result).partition("\n")
    header: dict[str, Any] = json.loads(first)
    return header, rest


def json_lines(result: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in texts(result).split("\n")]


def resource_text(result: Any) -> str:
    """The text of a resource read's one content (never a blob of bytes)."""
    (content,) = result.contents
    assert isinstance(content, TextResourceContents)
    return content.text


def links(result: Any) -> list[str]:
    return [block.uri for block in result.content if block.type == "resource_link"]


@dataclass
class Pieces:
    """Windows of one field by their ranges; joined, they must be the field."""

    total: int | None = None
    parts: dict[int, str] = field(default_factory=dict)

    def add(self, start: int, end: int, text: str) -> None:
        assert end - start == len(text), (start, end, len(text))
        self.parts[start] = text

    def join(self) -> str:
        out = ""
        for start in sorted(self.parts):
            text = self.parts[start]
            assert start <= len(out), f"a gap before {start}"
            overlap = out[start:]
            assert text[: len(overlap)] == overlap, f"windows disagree at {start}"
            out = out[:start] + text
        assert self.total is not None
        assert len(out) == self.total
        return out


@dataclass
class Walk:
    text: str
    match: tuple[int, int] | None
    calls: int


class ToolError(AssertionError):
    pass


async def call(client: Any, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise ToolError(f"{tool}({arguments}) failed: {texts(result)}")
    return result


# ---------------------------------------------------------------- the four agents


def _validator(schema: dict[str, Any] | None) -> Callable[[Any], None]:
    """Validation against `schema` (compiled once), or nothing."""
    if schema is None:
        return lambda _: None
    validator = jsonschema.Draft202012Validator(schema)

    def validate(instance: Any) -> None:
        validator.validate(instance)

    return validate


async def content_only(client: Any, q: str) -> Walk:
    found = json_lines(await call(client, "search", {"q": f'"{q}"'}))
    evidence = [line for line in found[1:] if "evidence" in line]
    assert evidence, f"no evidence line: {found}"
    first = evidence[0]
    assert fold(q) in fold(first["evidence"])
    read = first["read"]
    header, text = header_and_body(
        await call(client, read["tool"], {**read["arguments"], "limit_chars": PAGE})
    )
    pieces = Pieces(header["total_chars"])
    start, end = header["range"]
    pieces.add(start, end, text)
    match = tuple(header["match"])
    calls = 2
    for direction in ("previous", "next"):
        step = header
        while step[direction] is not None:
            following = step[direction]
            step, text = header_and_body(
                await call(client, following["tool"], following["arguments"])
            )
            start, end = step["range"]
            pieces.add(start, end, text)
            calls += 1
    return Walk(pieces.join(), (match[0], match[1]), calls)


async def structured_only(client: Any, q: str, schema: dict[str, Any] | None = None) -> Walk:
    found = (await call(client, "search", {"q": f'"{q}"'})).structured_content
    excerpt = found["data"][0]["evidence_excerpts"][0]
    read = excerpt["call"]
    first = (
        await call(client, read["tool"], {**read["arguments"], "limit_chars": PAGE})
    ).structured_content
    check = _validator(schema)
    check(first)
    pieces = Pieces(first["field"]["size_chars"])
    window = first["window"]
    pieces.add(window["start_chars"], window["end_chars"], window["text"])
    match = (window["match"]["start_chars"], window["match"]["end_chars"])
    calls = 2
    for cursor_key in ("previous_cursor", "next_cursor"):
        step = first
        while step["window"][cursor_key] is not None:
            arguments = {
                "id": step["record"]["id"],
                "field_path": step["field"]["path"],
                "cursor": step["window"][cursor_key],
            }
            step = (await call(client, "read_record_field", arguments)).structured_content
            check(step)
            window = step["window"]
            pieces.add(window["start_chars"], window["end_chars"], window["text"])
            calls += 1
    return Walk(pieces.join(), match, calls)


async def resource_aware(client: Any, q: str) -> Walk:
    result = await call(client, "search", {"q": f'"{q}"'})
    start_uri = links(result)[0]
    first = (await client.read_resource(start_uri)).contents[0]
    assert fold(q) in fold(first.text), "the linked window holds the match"
    pieces = Pieces(first.meta["total_chars"])
    pieces.add(first.meta["start_chars"], first.meta["end_chars"], first.text)
    calls = 2
    for direction in ("previous_uri", "next_uri"):
        step = first
        while step.meta.get(direction) is not None:
            step = (await client.read_resource(step.meta[direction])).contents[0]
            pieces.add(step.meta["start_chars"], step.meta["end_chars"], step.text)
            calls += 1
    text = pieces.join()
    at = fold(text).find(fold(q))
    return Walk(text, (at, at + len(q)), calls)


async def full(client: Any, q: str, schema: dict[str, Any] | None = None) -> Walk:
    """Everything at once: each window's content header and text must say what its structured
    content says, and its resource URI must read the same text."""
    result = await call(client, "search", {"q": f'"{q}"'})
    excerpt = result.structured_content["data"][0]["evidence_excerpts"][0]
    evidence = next(line for line in json_lines(result)[1:] if "evidence" in line)
    assert evidence["read"] == excerpt["call"]
    assert evidence["evidence"] == excerpt["preview_text"]
    read = excerpt["call"]
    step = await call(client, read["tool"], {**read["arguments"], "limit_chars": PAGE})
    calls = 2
    validate = _validator(schema)

    async def check(step: Any) -> dict[str, Any]:
        data: dict[str, Any] = step.structured_content
        validate(data)
        header, text = header_and_body(step)
        window = data["window"]
        assert text == window["text"]
        assert header["range"] == [window["start_chars"], window["end_chars"]]
        assert header["total_chars"] == data["field"]["size_chars"]
        assert header["complete"] == window["complete"]
        for key, cursor in (("next", "next_cursor"), ("previous", "previous_cursor")):
            assert (header[key] or {}).get("arguments", {}).get("cursor") == window[cursor]
        same = (await client.read_resource(data["resource"]["uri"])).contents[0]
        assert same.text == window["text"]
        return data

    first = await check(step)
    pieces = Pieces(first["field"]["size_chars"])
    pieces.add(
        first["window"]["start_chars"], first["window"]["end_chars"], first["window"]["text"]
    )
    match = (first["window"]["match"]["start_chars"], first["window"]["match"]["end_chars"])
    for key in ("previous", "next"):
        data = first
        current = step
        while True:
            header, _ = header_and_body(current)
            if header[key] is None:
                break
            current = await call(client, header[key]["tool"], header[key]["arguments"])
            data = await check(current)
            window = data["window"]
            pieces.add(window["start_chars"], window["end_chars"], window["text"])
            calls += 1
    return Walk(pieces.join(), match, calls)


Agent = Callable[[Any, str], Awaitable[Walk]]
AGENTS: dict[str, Agent] = {
    "content-only": content_only,
    "structured-only": structured_only,
    "resource-aware": resource_aware,
    "full": full,
}
