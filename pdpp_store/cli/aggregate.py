"""`pdpp-store aggregate`: counts, sums, ranges and time buckets of a stream (`Store.aggregate`).

pdpp-store aggregate STREAM --grant FILE [--metric M --field F]
    [--group-by F | --group-by-time F --granularity G --time-zone Z] [--filter JSON]
    [--connection ID] [--limit N] [--format json|text]
"""

from __future__ import annotations

from typing import IO, Any

import click

from pdpp_store.evidence import text as evidence_text
from pdpp_store.mcp.calls import as_tool_call

from ._io import echo_json, format_option, load_grant, open_store, required_grant_option
from ._root import cli

__all__ = ["aggregate"]


@cli.command("aggregate")
@click.argument("stream")
@required_grant_option
@click.option(
    "--metric",
    default="count",
    show_default=True,
    help="count, sum, min, max or count_distinct (of --field).",
)
@click.option("--field", "field", metavar="FIELD", help="The field the metric reads.")
@click.option("--group-by", "group_by", metavar="FIELD", help="Group by this field.")
@click.option("--group-by-time", "group_by_time", metavar="FIELD", help="Time buckets of FIELD.")
@click.option(
    "--granularity",
    default="month",
    show_default=True,
    help="hour, day, week (ISO), month or year.",
)
@click.option(
    "--time-zone",
    "time_zone",
    default="UTC",
    show_default=True,
    help="The IANA time zone of the buckets.",
)
@click.option("--filter", "filter", metavar="JSON", help="A filter (one clause per field).")
@click.option("--connection", "connection_id", metavar="CONNECTION_ID", help="One connection.")
@click.option("--limit", type=int, default=25, show_default=True, help="Groups shown (1..100).")
@format_option()
@click.pass_context
def aggregate(
    ctx: click.Context,
    stream: str,
    grant: IO[bytes],
    *,
    metric: str,
    field: str | None,
    group_by: str | None,
    group_by_time: str | None,
    granularity: str,
    time_zone: str,
    filter: str | None,
    connection_id: str | None,
    limit: int,
    output: str,
) -> None:
    """An aggregate of STREAM's records the grant can see: count (default), or sum, min, max,
    count_distinct of --field; per value of --group-by, or per time bucket of --group-by-time
    (text: a table, each group with the call that lists its records)."""
    options: dict[str, Any] = {
        "metric": metric,
        "field": field,
        "group_by": group_by,
        "group_by_time": group_by_time,
        "granularity": granularity,
        "time_zone": time_zone,
        "filter": filter,
        "connection_id": connection_id,
        "limit": limit,
    }
    card = open_store(ctx).aggregate(load_grant(grant), stream, **options).to_dict()
    if output == "json":
        echo_json(card)
        return
    click.echo(evidence_text.aggregate_text(card, as_tool_call))
