"""The read audit (docs/contract.md §14): what agents read under each grant, for the owner
(`audit list|export|prune`). `export` is `list` paged to the end, one entry per line."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from ._io import echo_json, older_than_option, open_store
from ._root import cli

_PAGE = 1000


def _filters(command: Callable[..., Any]) -> Callable[..., Any]:
    """The filters `list` and `export` share: by grant and by time."""
    command = click.option(
        "--until", metavar="INSTANT", default=None, help="Only entries before this (ISO-8601)."
    )(command)
    command = click.option(
        "--since", metavar="INSTANT", default=None, help="Only entries from this on (ISO-8601)."
    )(command)
    return click.option(
        "--grant-id", "grant_id", metavar="ID", default=None, help="Only this grant's reads."
    )(command)


@cli.group("audit")
def audit_group() -> None:
    """The read audit: every answered read under a grant, on every surface (never a value)."""


@audit_group.command("list")
@_filters
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many.")
@click.option(
    "--after-id", "after_id", type=int, default=0, metavar="ID", help="Entries after this id."
)
@click.pass_context
def audit_list(  # noqa: PLR0917 (click passes each option by keyword)
    ctx: click.Context,
    grant_id: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    after_id: int,
) -> None:
    """The audit's entries, oldest first, as a JSON array (page on with --after-id)."""
    entries = open_store(ctx).list_audit(
        grant_id=grant_id, since=since, until=until, limit=limit, after_id=after_id
    )
    echo_json([entry.to_dict() for entry in entries])


@audit_group.command("export")
@_filters
@click.pass_context
def audit_export(
    ctx: click.Context, grant_id: str | None, since: str | None, until: str | None
) -> None:
    """Every entry that matches, oldest first, as JSON Lines (one entry per line)."""
    store = open_store(ctx)
    after_id = 0
    while True:
        entries = store.list_audit(
            grant_id=grant_id, since=since, until=until, limit=_PAGE, after_id=after_id
        )
        for entry in entries:
            click.echo(json.dumps(entry.to_dict(), ensure_ascii=False))
        if len(entries) < _PAGE:
            return
        after_id = entries[-1].audit_id


@audit_group.command("prune")
@older_than_option("Delete the entries written more than this long ago.")
@click.pass_context
def audit_prune(ctx: click.Context, older_than: float) -> None:
    """Delete the audit's entries older than SECONDS; prints how many were deleted."""
    pruned = open_store(ctx).prune_audit(older_than)
    echo_json({"object": "read_audit", "pruned": pruned})
