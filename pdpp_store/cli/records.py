"""Asking a stream: `records list` (`Store.query_records`, docs/contract.md §11.2).

    pdpp-store records list messages --grant g.json \\
        --filter '{"from_email": "alice@example.com", "received_at": {"gte": "2026-03-01"}}' \\
        --order desc --fields id,subject --limit 10 --count exact

`--filter` is the filter's JSON text, handed to the library as it is (malformed JSON is the
library's `invalid_filter`); `--fields` a comma list. Text output is the MCP `content[]` of the
same page: a header line with the call for the next page, then one line per record card with the
call that opens it.
"""

from __future__ import annotations

from typing import IO, Any

import click

from pdpp_store.evidence import text as evidence_text
from pdpp_store.mcp.calls import as_tool_call

from ._io import echo_json, format_option, load_grant, open_store, required_grant_option
from ._root import cli


@cli.group("records")
def records_group() -> None:
    """A stream's records under a grant: filtered, newest first, projected."""


@records_group.command("list")
@click.argument("stream")
@required_grant_option
@click.option("--connection", "connection_id", metavar="CONNECTION_ID", help="One connection only.")
@click.option(
    "--filter", "filter", metavar="JSON", help="The filter as JSON (docs/contract.md §11.1)."
)
@click.option("--order", metavar="desc|asc", help="By the stream's order field (default desc).")
@click.option("--fields", metavar="A,B", help="Only these granted fields (comma-separated).")
@click.option("--limit", type=int, metavar="N", help="Records per page (1..100, default 25).")
@click.option("--cursor", metavar="TEXT", help="The next_cursor of the previous page.")
@click.option("--count", metavar="none|exact", help="exact: add the number that match.")
@click.option(
    "--changes-since", metavar="BOOKMARK", help="beginning, or an earlier next_changes_since."
)
@format_option()
@click.pass_context
def records_list(
    ctx: click.Context,
    stream: str,
    grant: IO[bytes],
    *,
    connection_id: str | None,
    filter: str | None,
    order: str | None,
    fields: str | None,
    limit: int | None,
    cursor: str | None,
    count: str | None,
    changes_since: str | None,
    output: str,
) -> None:
    """A page of STREAM's visible records (text: one line per record card, each with its fetch
    call, and the call that reads the next page)."""
    asked: dict[str, Any] = {
        "connection_id": connection_id,
        "filter": filter,
        "fields": None if fields is None else fields.split(","),
        "cursor": cursor,
        "changes_since": changes_since,
    }
    for name, value in (("order", order), ("limit", limit), ("count", count)):
        if value is not None:
            asked[name] = value
    card = open_store(ctx).query_records(load_grant(grant), stream, **asked).to_dict()
    if output == "json":
        echo_json(card)
        return
    click.echo(evidence_text.records_text(card, as_tool_call))
