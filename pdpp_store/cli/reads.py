"""Grant-enforced reads: `read field-window|record|field-info|resource` and `search`."""

from __future__ import annotations

from typing import IO, Any

import click

from pdpp_store.evidence import text as evidence_text
from pdpp_store.mcp.calls import as_tool_call

from ._io import (
    connection_option,
    echo_json,
    format_option,
    grant_option,
    load_grant,
    open_store,
    record_grant,
    required_grant_option,
    resource_grant,
    selector_options,
)
from ._root import cli


@cli.group()
def read() -> None:
    """Grant-enforced reads."""


@read.command("field-window")
@click.argument("record")
@click.argument("field")
@connection_option
@grant_option
@selector_options
@format_option()
@click.pass_context
def read_field_window(
    ctx: click.Context,
    /,
    *,
    record: str,
    field: str,
    connection_id: str | None,
    grant: IO[bytes] | None,
    output: str,
    **selector: Any,
) -> None:
    """A bounded window of one text field of RECORD.

    RECORD is CONNECTION/STREAM:ID, pdpp://record/HANDLE, or STREAM:ID with --connection.
    """
    window = open_store(ctx).read_field_window(
        record_grant(grant, record, connection_id),
        record,
        field,
        connection_id=connection_id,
        **selector,
    )
    if output == "json":
        echo_json(window.to_dict())
        return
    for warning in window.warnings:
        click.echo(f"warning: {warning['code']} ({warning['param']})", err=True)
    click.echo(evidence_text.window_text(window.to_dict(), as_tool_call))


@read.command("record")
@click.argument("record")
@connection_option
@click.option(
    "--after-field",
    metavar="PATH",
    help="Show the fields after this path (a wide record's next page; see its `next`).",
)
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="PATH",
    help="Show only this granted field (repeat for more).",
)
@grant_option
@format_option()
@click.pass_context
def read_record(
    ctx: click.Context,
    /,
    *,
    record: str,
    connection_id: str | None,
    after_field: str | None,
    fields: tuple[str, ...],
    grant: IO[bytes] | None,
    output: str,
) -> None:
    """RECORD projected under the grant: granted fields, long values as previews, a bounded
    number of fields and characters at a time."""
    view = open_store(ctx).read_record(
        record_grant(grant, record, connection_id),
        record,
        connection_id=connection_id,
        after_field=after_field,
        fields=list(fields) or None,
    )
    if output == "json":
        echo_json(view.to_dict())
        return
    page = evidence_text.page_record(view.to_dict(), 0)
    click.echo(evidence_text.record_text(page, as_tool_call))


@read.command("field-info")
@click.argument("record")
@click.argument("field")
@connection_option
@grant_option
@click.pass_context
def read_field_info(
    ctx: click.Context,
    record: str,
    field: str,
    connection_id: str | None,
    grant: IO[bytes] | None,
) -> None:
    """What the store knows of one field of RECORD (kind, size, digest), without its value."""
    info = open_store(ctx).describe_field(
        record_grant(grant, record, connection_id), record, field, connection_id=connection_id
    )
    echo_json(info.to_dict())


@read.command("resource")
@click.argument("uri")
@grant_option
@format_option()
@click.pass_context
def read_resource(ctx: click.Context, uri: str, grant: IO[bytes] | None, output: str) -> None:
    """The record or field window a pdpp://record/... or pdpp://field-window/... URI names."""
    card = open_store(ctx).read_resource(resource_grant(grant, uri), uri).to_dict()
    if output == "json":
        echo_json(card)
    elif card["object"] == "field_window":
        click.echo(evidence_text.window_text(card, as_tool_call))
    else:
        click.echo(evidence_text.record_text(evidence_text.page_record(card, 0), as_tool_call))


@cli.command("search")
@click.argument("q")
@required_grant_option
@click.option(
    "--stream", "streams", multiple=True, metavar="STREAM", help="Search this stream (repeat)."
)
@click.option("--connection", "connection_id", metavar="CONNECTION_ID", help="One connection only.")
@click.option("--limit", type=int, metavar="N", help="Hits per page (1..50, default 10).")
@click.option("--cursor", metavar="TEXT", help="The next_cursor of the previous page.")
@format_option()
@click.pass_context
def search(
    ctx: click.Context,
    q: str,
    grant: IO[bytes],
    *,
    streams: tuple[str, ...],
    connection_id: str | None,
    limit: int | None,
    cursor: str | None,
    output: str,
) -> None:
    """Records that match Q under the grant, each with the place of the match and how to read it
    (text: with the call that reads the next page)."""
    options: dict[str, Any] = {"streams": list(streams) or None, "connection_id": connection_id}
    if limit is not None:
        options["limit"] = limit
    card = open_store(ctx).search(load_grant(grant), q, cursor=cursor, **options).to_dict()
    if output == "json":
        echo_json(card)
        return
    click.echo(evidence_text.search_text(card, as_tool_call))
