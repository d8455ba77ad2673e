"""Grants: what a grant lets an agent see (`grant describe`)."""

from __future__ import annotations

from typing import IO

import click

from pdpp_store.evidence import text as evidence_text

from ._io import echo_json, format_option, load_grant, open_store, required_grant_option
from ._root import cli


@cli.group("grant")
def grant_group() -> None:
    """What a grant lets an agent see."""


@grant_group.command("describe")
@required_grant_option
@format_option()
@click.pass_context
def grant_describe(ctx: click.Context, grant: IO[bytes], output: str) -> None:
    """The granted streams and fields (from the manifests, never a record), and which are
    searchable."""
    card = open_store(ctx).describe_grant(load_grant(grant)).to_dict()
    if output == "json":
        echo_json(card)
        return
    click.echo(evidence_text.schema_text(card))
