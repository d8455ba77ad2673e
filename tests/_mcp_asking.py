"""The four agent classes of the content ladder (see `_mcp`), starting from a question instead of
a search: `query_records` with a filter (a month on the order field, two ids), then the evidence
of the 3,000,000-character email through what the agent's class sees, two windows of it.

    content_only      the text of content[]: the row's `fetch` call, the record's field line
                      and its `next` call, the window's header `next`
    structured_only   structuredContent: the row's `fetch`, the record's `calls`, the cursors
    resource_aware    one query_records call, then only resource links and resources/read
    full              both channels, which must agree, then the structured walk

Each returns the windows it read as `(start, end, text)`; the caller compares them with the field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from _data import MAILBOX
from _mcp import BIG_ID, PAGE, call, header_and_body, json_lines

BIG = f"{MAILBOX}/message_bodies:{BIG_ID}"
QUESTION: dict[str, Any] = {
    "stream": "message_bodies",
    "filter": {
        "message_received_at": {"gte": "2026-03-01T00:00:00Z", "lt": "2026-04-01T00:00:00Z"},
        "id": {"in": [BIG_ID, "small"]},
    },
    "limit": 5,
}
"""Two of the mailbox's three records match (the decoy's id is not asked for)."""

Windows = list[tuple[int, int, str]]


async def content_only(client: Any) -> Windows:
    lines = json_lines(await call(client, "query_records", QUESTION))
    header, rows = lines[0], lines[1:]
    assert header["results"] == 2
    assert sorted(row["id"] for row in rows) == sorted([BIG, f"{MAILBOX}/message_bodies:small"])
    row = next(row for row in rows if row["id"] == BIG)
    fetch = row["fetch"]
    record = json_lines(await call(client, fetch["tool"], fetch["arguments"]))
    field = next(line for line in record[1:] if line.get("field") == "body_text")
    read = field["next"]
    first, text = header_and_body(
        await call(client, read["tool"], {**read["arguments"], "limit_chars": PAGE})
    )
    windows = [(*first["range"], text)]
    following = first["next"]
    second, text = header_and_body(await call(client, following["tool"], following["arguments"]))
    windows.append((*second["range"], text))
    return windows


async def structured_only(client: Any) -> Windows:
    page = (await call(client, "query_records", QUESTION)).structured_content
    assert len(page["data"]) == 2
    row = next(row for row in page["data"] if row["id"] == BIG)
    fetch = row["fetch"]
    record = (await call(client, fetch["tool"], fetch["arguments"])).structured_content
    read = record["calls"]["body_text"]
    first = (
        await call(client, read["tool"], {**read["arguments"], "limit_chars": PAGE})
    ).structured_content
    window = first["window"]
    windows = [(window["start_chars"], window["end_chars"], window["text"])]
    arguments = {"id": first["record"]["id"], "field_path": "body_text"}
    second = (
        await call(client, "read_record_field", {**arguments, "cursor": window["next_cursor"]})
    ).structured_content["window"]
    windows.append((second["start_chars"], second["end_chars"], second["text"]))
    return windows


async def resource_aware(client: Any) -> Windows:
    result = await call(client, "query_records", QUESTION)
    named = {block.name: block.uri for block in result.content if block.type == "resource_link"}
    record = (await client.read_resource(named[BIG])).contents[0]
    assert record.text.startswith("{")  # the record's header line, as fetch shows it
    first = (await client.read_resource(named[f"{BIG} body_text"])).contents[0]
    windows = [(first.meta["start_chars"], first.meta["end_chars"], first.text)]
    second = (await client.read_resource(first.meta["next_uri"])).contents[0]
    windows.append((second.meta["start_chars"], second.meta["end_chars"], second.text))
    return windows


async def full(client: Any) -> Windows:
    result = await call(client, "query_records", QUESTION)
    page = result.structured_content
    lines = json_lines(result)
    assert lines[0]["results"] == len(page["data"])
    assert lines[0]["next"] == page["next"]
    for line, row in zip(lines[1:], page["data"], strict=True):
        assert line["id"] == row["id"]
        assert line["fetch"] == row["fetch"]
        for path, more in line.get("more", {}).items():
            assert more["read"] == row["content_ladder"][path]["call"]
        for slot in ("title", "time", "actor", "secondary", "amount"):
            assert line.get(slot) == (row[slot]["value"] if slot in row else None)
    return await structured_only(client)


AGENTS: dict[str, Callable[[Any], Awaitable[Windows]]] = {
    "content_only": content_only,
    "structured_only": structured_only,
    "resource_aware": resource_aware,
    "full": full,
}


def check_windows(windows: Windows, field: str) -> None:
    """The windows are the field's text where they say, each going on where the one before it
    ended (the first where the record's preview of the field stopped)."""
    assert len(windows) == 2
    for (start, end, text), following in zip(windows, [*windows[1:], None], strict=True):
        assert end > start
        assert text == field[start:end]
        if following is not None:
            assert following[0] == end
