"""The owner's commands: manifests, connections, ingesting and deleting records, the cursor keys,
and migrating the schema."""

from __future__ import annotations

import sys
from typing import IO, Any

import click

from pdpp_store import Store

from ._io import (
    echo_json,
    file_size,
    json_lines,
    load_json,
    older_than_option,
    open_store,
    unsized,
)
from ._root import cli

_PROGRESS_STEP_BYTES = 1 << 16  # redraw the progress bar at most once per 64 KiB read


@cli.group()
def manifest() -> None:
    """Connector manifests."""


@manifest.command("add")
@click.argument("file", type=click.File("rb"), metavar="FILE.json")
@click.pass_context
def manifest_add(ctx: click.Context, file: IO[bytes]) -> None:
    """Register (or replace) a connector manifest."""
    open_store(ctx).register_manifest(load_json(file, "'FILE.json'"))


@cli.group()
def connection() -> None:
    """Connections (one account of one connector)."""


@connection.command("add")
@click.argument("connection_id")
@click.argument("connector_id")
@click.pass_context
def connection_add(ctx: click.Context, connection_id: str, connector_id: str) -> None:
    """Add a connection of a registered connector."""
    open_store(ctx).add_connection(connection_id, connector_id)


@cli.command()
@click.argument("connection_id")
@click.argument("stream")
@click.argument("file", type=click.File("rb"), metavar="FILE.jsonl")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.pass_context
def ingest(
    ctx: click.Context, connection_id: str, stream: str, file: IO[bytes], quiet: bool
) -> None:
    """Upsert the records of a JSON Lines file (or - for stdin) into a stream.

    The file is read as it is written to the store, never whole. Prints the counts of
    inserted, updated and unchanged records as JSON.
    """
    store = open_store(ctx)
    size = file_size(file)
    common: dict[str, Any] = {
        "label": f"ingesting {stream}",
        "file": sys.stderr,
        "hidden": quiet,
        "update_min_steps": _PROGRESS_STEP_BYTES,
    }
    if size is None:
        bar = click.progressbar(unsized(), show_pos=True, **common)
    else:
        bar = click.progressbar(length=size, **common)
    with bar:
        result = store.upsert_records(connection_id, stream, json_lines(file, bar.update))
    echo_json(result.to_dict())


@cli.command("delete")
@click.argument("connection_id")
@click.argument("stream")
@click.argument("record_id")
@click.pass_context
def delete(ctx: click.Context, connection_id: str, stream: str, record_id: str) -> None:
    """Delete a record (soft: its reads answer not_found from now on)."""
    open_store(ctx).delete_record(connection_id, stream, record_id)


@cli.group("cursor-key")
def cursor_key() -> None:
    """The keys that sign cursors."""


@cursor_key.command("rotate")
@click.pass_context
def cursor_key_rotate(ctx: click.Context) -> None:
    """Sign new cursors with a new key; cursors signed with the older keys stay valid."""
    open_store(ctx).rotate_cursor_key()


@cursor_key.command("retire")
@older_than_option("Retire keys superseded more than this long ago (the grace period).")
@click.pass_context
def cursor_key_retire(ctx: click.Context, older_than: float) -> None:
    """Delete cursor keys superseded more than SECONDS ago: the cursors they signed stop working."""
    retired = open_store(ctx).retire_cursor_keys(older_than)
    echo_json({"object": "cursor_keys", "retired": retired})


@cli.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Bring the database to the newest schema (safe to run from several processes at once).

    Servers can then open the store with `Store.open(url, migrate=False)`.
    """
    Store.open(ctx.find_root().params["db"], migrate=True).close()
    echo_json({"object": "migration", "status": "at_head"})
