"""Parity between surfaces: one read through the library, the CLI and REST gives the same window
text, offsets and continuation (the same cursor, since cursors are deterministic for a grant,
record, field, position and limit), on every database.

Each surface reads with the same grant: the CLI gets it as a `--grant` file, REST as the grant of
a bearer token; the library is called directly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _data import MAILBOX
from _rest import OWNER, TEXT, TOKEN_GRANTS, Site, served, window_path
from click.testing import CliRunner

from pdpp_store import Grant
from pdpp_store.cli import cli

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
KEPT = (
    "text",
    "total_chars",
    "start_chars",
    "end_chars",
    "limit_chars",
    "complete",
    "has_more",
    "match_start_chars",
    "match_end_chars",
    "next_offset_chars",
    "previous_offset_chars",
    "next_cursor",
    "previous_cursor",
)


@pytest.fixture
async def site(db_url: str) -> AsyncIterator[Site]:
    async with served(db_url) as opened:
        yield opened


def _essence(envelope: dict[str, Any]) -> dict[str, Any]:
    window = envelope["window"]
    return {
        "field": envelope["field"],
        "record": [envelope["connection_id"], envelope["stream"], envelope["record_id"]],
        **{key: window[key] for key in KEPT},
    }


def _cli(url: str, grant_file: Path, args: dict[str, Any]) -> dict[str, Any]:
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
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


@pytest.mark.parametrize("args", READS, ids=["start", "end", "match", "past-the-end"])
async def test_library_cli_and_rest_give_the_same_window(
    site: Site, db_url: str, tmp_path: Path, args: dict[str, Any]
) -> None:
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(TOKEN_GRANTS[OWNER]), encoding="utf-8")
    grant = Grant.from_dict(TOKEN_GRANTS[OWNER])

    library = (
        await site.store.read_field_window(
            grant, f"{MAILBOX}/message_bodies:b1", "body_text", **args
        )
    ).to_dict()
    command_line = _cli(db_url, grant_file, args)
    response = await site.get(OWNER, window_path(), {"field": "body_text", **args})
    assert response.status_code == 200, response.text
    rest = response.json()

    assert _essence(command_line) == _essence(library)
    assert _essence(rest) == _essence(library)

    # The continuation is the same read on every surface: follow it through each and compare.
    cursor = library["window"]["next_cursor"] or library["window"]["previous_cursor"]
    if cursor is None:
        return
    after = (
        await site.store.read_field_window(
            grant, f"{MAILBOX}/message_bodies:b1", "body_text", cursor=cursor
        )
    ).to_dict()
    assert _essence(_cli(db_url, grant_file, {"cursor": cursor})) == _essence(after)
    followed = await site.get(OWNER, window_path(), {"field": "body_text", "cursor": cursor})
    assert _essence(followed.json()) == _essence(after)
