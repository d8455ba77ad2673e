"""Blobs (attachment bytes): `blob info|read|put`."""

from __future__ import annotations

import sys
from typing import IO

import click

from pdpp_store.evidence import text as evidence_text

from ._io import echo_json, format_option, load_grant, open_store, required_grant_option
from ._root import cli


@cli.group()
def blob() -> None:
    """Blobs (attachment bytes), referenced from records by blob_ref fields."""


@blob.command("info")
@click.argument("blob_id")
@required_grant_option
@format_option()
@click.pass_context
def blob_info(ctx: click.Context, blob_id: str, grant: IO[bytes], output: str) -> None:
    """Metadata of a blob that a record visible under the grant references."""
    info = open_store(ctx).blob_info(load_grant(grant), blob_id)
    if output == "json":
        echo_json(info.to_dict())
        return
    click.echo(evidence_text.blob_text({**info.to_dict(), "uri": info.uri}))


@blob.command("read")
@click.argument("blob_id")
@required_grant_option
@click.option("--offset", "offset_bytes", type=int, default=0, show_default=True, metavar="N")
@click.option("--length", "length_bytes", type=int, default=65536, show_default=True, metavar="N")
@click.option(
    "--format",
    "output",
    type=click.Choice(["raw", "json"]),
    default="raw",
    show_default=True,
    help="raw: the bytes on stdout; json: where the range lies (no bytes).",
)
@click.pass_context
def blob_read(
    ctx: click.Context,
    blob_id: str,
    grant: IO[bytes],
    *,
    offset_bytes: int,
    length_bytes: int,
    output: str,
) -> None:
    """A byte range (at most 1 MiB) of a blob a record visible under the grant references."""
    found = open_store(ctx).read_blob_range(load_grant(grant), blob_id, offset_bytes, length_bytes)
    if output == "json":
        echo_json(found.to_dict())
        return
    sys.stdout.buffer.write(found.data)
    sys.stdout.buffer.flush()


@blob.command("put")
@click.argument("file", type=click.File("rb"))
@click.option("--mime-type", required=True, metavar="TYPE", help="For example application/pdf.")
@click.pass_context
def blob_put(ctx: click.Context, file: IO[bytes], mime_type: str) -> None:
    """Store FILE (or - for stdin) as a blob; prints the blob_ref a record field can hold."""
    echo_json(open_store(ctx).put_blob(file.read(), mime_type).as_ref())
