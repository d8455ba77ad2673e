"""`pdpp-store`: the command line, one thin shell per library call (sqlite-utils style).

    pdpp-store [--db URL] manifest add FILE.json              Store.register_manifest
    pdpp-store [--db URL] connection add CONNECTION CONNECTOR Store.add_connection
    pdpp-store [--db URL] ingest CONNECTION STREAM FILE.jsonl Store.upsert_records
    pdpp-store [--db URL] read field-window RECORD FIELD      Store.read_field_window
    pdpp-store [--db URL] read record RECORD                  Store.read_record
    pdpp-store [--db URL] blob info BLOB_ID --grant FILE      Store.blob_info
    pdpp-store [--db URL] blob put FILE --mime-type TYPE      Store.put_blob
    pdpp-store [--db URL] serve --tokens FILE [--host] [--port] pdpp_store.rest.run
    pdpp-store [--db URL] mcp --grant FILE                    pdpp_store.mcp.serve_stdio
    pdpp-store demo [--db URL | --dir DIR]                    _demo.run_demo

Rules:
1. Each command makes exactly one call on the library. What the CLI adds is I/O only: reading
   JSON and JSON Lines files, defaulting to the owner's grant, rendering results. No SQL, no
   store logic; what the library lacks is reported, not written here.
2. Results go to stdout as JSON (`to_dict()`), or, with `--format text` on the reads, as
   exactly the text an MCP client's `content[]` shows for the same read
   (`pdpp_store.evidence.text` with the MCP server's calls); progress and warnings go to stderr.
3. Every `StoreError` is printed on stderr as its JSON envelope (`to_dict()`), on one line, with
   exit code 1. Usage errors are click's (exit code 2). Nothing a user can cause prints a
   traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import click
from click.core import ParameterSource

from ._core.errors import BadRequest, StoreError
from ._core.grants import Grant
from ._core.identity import UnscopedRecordRef, parse_record_ref
from ._demo import run_demo
from ._store import AsyncStore, Store
from .evidence import text as evidence_text
from .mcp.calls import as_tool_call

__all__ = ["DEFAULT_URL", "URL_ENV", "cli", "main"]

DEFAULT_URL = "sqlite:///pdpp-store.db"
URL_ENV = "PDPP_STORE_URL"
_PROGRESS_STEP_BYTES = 1 << 16  # redraw the progress bar at most once per 64 KiB read


class _Cli(click.Group):
    """The root group: turns every `StoreError` into its envelope on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StoreError as error:
            click.echo(json.dumps(error.to_dict(), ensure_ascii=False), err=True)
            ctx.exit(1)


# ---------------------------------------------------------------- helpers (I/O only)


def _open_store(ctx: click.Context) -> Store:
    """The store named by the global `--db`, closed when the command ends."""
    store = Store.open(ctx.find_root().params["db"])
    ctx.call_on_close(store.close)
    return store


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


def _name(file: IO[bytes]) -> str:
    name = getattr(file, "name", None)
    return name if isinstance(name, str) else "<stdin>"


def _load_json(file: IO[bytes], param: str) -> Any:
    try:
        return json.load(file)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        message = f"{_name(file)} is not valid JSON: {error}"
        raise click.BadParameter(message, param_hint=param) from None


def _grant(grant_file: IO[bytes] | None, record: str, connection: str | None) -> Grant:
    """The grant from `--grant`, else the owner's grant over the record's connection and stream."""
    if grant_file is not None:
        return Grant.from_dict(_load_json(grant_file, "'--grant'"))
    ref = parse_record_ref(record, connection_id=connection)
    if isinstance(ref, UnscopedRecordRef):
        raise click.UsageError(
            f"RECORD {record!r} does not name its connection: give --connection, "
            "or write it as CONNECTION/STREAM:ID"
        )
    return Grant.owner(ref.connection_id, ref.stream)


def _file_size(file: IO[bytes]) -> int | None:
    """The size of a regular file, else None (a pipe or a terminal has no size to show)."""
    try:
        info = os.fstat(file.fileno())
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _json_lines(file: IO[bytes], advance: Callable[[int], None]) -> Iterator[object]:
    """The JSON value of each line, read lazily; a line that is not JSON names its number.

    Every line is one record (JSON Lines has no blank lines), so the library's "record #N" is
    line N + 1 of the file.
    """
    name = _name(file)
    for number, line in enumerate(file, start=1):
        advance(len(line))
        try:
            value = json.loads(line)
        except ValueError as error:  # JSONDecodeError, or UnicodeDecodeError for non-UTF-8
            if not line.strip():
                reason = "the line is empty"
            elif isinstance(error, json.JSONDecodeError):
                reason = f"{error.msg} at column {error.colno}"
            else:
                reason = "it is not UTF-8"
            raise BadRequest(
                "invalid_record",
                f"line {number} of {name} is not valid JSON: {reason}",
                param="FILE",
                details={"line": number},
            ) from None
        yield value


def _unsized() -> Iterator[int]:
    """An iterable without a length, for a progress bar whose total is unknown."""
    yield from ()


def _format_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--format",
        "output",
        type=click.Choice(["json", "text"]),
        default="json",
        show_default=True,
        help="json: the card (to_dict()); text: exactly what an MCP client's content[] shows.",
    )


_connection_option = click.option(
    "--connection",
    metavar="CONNECTION_ID",
    help="The record's connection (needed for a legacy STREAM:ID record).",
)
_grant_option = click.option(
    "--grant",
    "grant_file",
    type=click.File("rb"),
    metavar="FILE.json",
    help="A PDPP grant (JSON). Default: the owner's grant over the record's connection and stream.",
)


# ---------------------------------------------------------------- commands


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    envvar=URL_ENV,
    default=DEFAULT_URL,
    show_default=True,
    show_envvar=True,
    metavar="URL",
    help="The store: sqlite:///FILE or postgresql+psycopg://... (migrated when opened).",
)
@click.version_option(package_name="pdpp-store")
def cli(db: str) -> None:
    """Grant-enforced, bounded reads of personal-data records of any size."""


@cli.group()
def manifest() -> None:
    """Connector manifests."""


@manifest.command("add")
@click.argument("file", type=click.File("rb"), metavar="FILE.json")
@click.pass_context
def manifest_add(ctx: click.Context, file: IO[bytes]) -> None:
    """Register (or replace) a connector manifest."""
    _open_store(ctx).register_manifest(_load_json(file, "'FILE.json'"))


@cli.group()
def connection() -> None:
    """Connections (one account of one connector)."""


@connection.command("add")
@click.argument("connection_id")
@click.argument("connector_id")
@click.pass_context
def connection_add(ctx: click.Context, connection_id: str, connector_id: str) -> None:
    """Add a connection of a registered connector."""
    _open_store(ctx).add_connection(connection_id, connector_id)


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
    store = _open_store(ctx)
    size = _file_size(file)
    common: dict[str, Any] = {
        "label": f"ingesting {stream}",
        "file": sys.stderr,
        "hidden": quiet,
        "update_min_steps": _PROGRESS_STEP_BYTES,
    }
    if size is None:
        bar = click.progressbar(_unsized(), show_pos=True, **common)
    else:
        bar = click.progressbar(length=size, **common)
    with bar:
        result = store.upsert_records(connection_id, stream, _json_lines(file, bar.update))
    _echo_json(result.to_dict())


@cli.group()
def read() -> None:
    """Grant-enforced reads."""


@read.command("field-window")
@click.argument("record")
@click.argument("field")
@_connection_option
@_grant_option
@click.option("--offset", "offset_chars", type=int, help="Start, in code points (default 0).")
@click.option("--limit", "limit_chars", type=int, help="Length, in code points (default 4096).")
@click.option("--q", "q", metavar="TEXT", help="Centre the window on the first match of TEXT.")
@click.option("--before", "before_chars", type=int, help="Context before the match (2048).")
@click.option("--after", "after_chars", type=int, help="Context after the match (2048).")
@click.option("--cursor", help="Continue from a window's next or previous cursor.")
@_format_option()
@click.pass_context
def read_field_window(
    ctx: click.Context,
    *,
    record: str,
    field: str,
    connection: str | None,
    grant_file: IO[bytes] | None,
    offset_chars: int | None,
    limit_chars: int | None,
    q: str | None,
    before_chars: int | None,
    after_chars: int | None,
    cursor: str | None,
    output: str,
) -> None:
    """A bounded window of one text field of RECORD.

    RECORD is CONNECTION/STREAM:ID, pdpp://record/HANDLE, or STREAM:ID with --connection.
    """
    grant = _grant(grant_file, record, connection)
    window = _open_store(ctx).read_field_window(
        grant,
        record,
        field,
        connection_id=connection,
        offset_chars=offset_chars,
        limit_chars=limit_chars,
        q=q,
        before_chars=before_chars,
        after_chars=after_chars,
        cursor=cursor,
    )
    if output == "json":
        _echo_json(window.to_dict())
        return
    for warning in window.warnings:
        click.echo(f"warning: {warning['code']} ({warning['param']})", err=True)
    click.echo(evidence_text.window_text(window.to_dict(), as_tool_call))


@read.command("record")
@click.argument("record")
@_connection_option
@_grant_option
@_format_option()
@click.pass_context
def read_record(
    ctx: click.Context,
    record: str,
    connection: str | None,
    grant_file: IO[bytes] | None,
    output: str,
) -> None:
    """RECORD projected under the grant: granted fields, long values as previews."""
    grant = _grant(grant_file, record, connection)
    view = _open_store(ctx).read_record(grant, record, connection_id=connection)
    if output == "json":
        _echo_json(view.to_dict())
        return
    page = evidence_text.page_record(view.to_dict(), 0)
    click.echo(evidence_text.record_text(page, as_tool_call))


@cli.group()
def blob() -> None:
    """Blobs (attachment bytes), referenced from records by blob_ref fields."""


@blob.command("info")
@click.argument("blob_id")
@click.option("--grant", "grant_file", type=click.File("rb"), required=True, metavar="FILE.json")
@_format_option()
@click.pass_context
def blob_info(ctx: click.Context, blob_id: str, grant_file: IO[bytes], output: str) -> None:
    """Metadata of a blob that a record visible under the grant references."""
    grant = Grant.from_dict(_load_json(grant_file, "'--grant'"))
    card = _open_store(ctx).blob_info(grant, blob_id).to_dict()
    if output == "json":
        _echo_json(card)
        return
    click.echo(evidence_text.blob_text({**card, "uri": f"pdpp://blob/{card['blob_id']}"}))


@blob.command("put")
@click.argument("file", type=click.File("rb"))
@click.option("--mime-type", required=True, metavar="TYPE", help="For example application/pdf.")
@click.pass_context
def blob_put(ctx: click.Context, file: IO[bytes], mime_type: str) -> None:
    """Store FILE (or - for stdin) as a blob; prints the blob_ref a record field can hold."""
    _echo_json(_open_store(ctx).put_blob(file.read(), mime_type).as_ref())


@cli.command()
@click.option(
    "--tokens",
    "tokens_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE.json",
    help="A JSON object mapping each bearer token to the PDPP grant it carries.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.pass_context
def serve(ctx: click.Context, tokens_path: Path, host: str, port: int) -> None:
    """Serve the store over HTTP: the REST routes under /v1 and MCP at /mcp (needs the
    `server` extra: pip install 'pdpp-store[server]'). Stops on Ctrl-C."""
    try:
        from .rest import run
    except ImportError as error:
        raise click.UsageError(
            f"serving needs the server extra (pip install 'pdpp-store[server]'): {error}"
        ) from None
    run(ctx.find_root().params["db"], tokens_path, host=host, port=port)


@cli.command()
@click.option("--db", "url", metavar="URL", help="Run on this store instead of a fresh file.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the demo's SQLite file in DIR (default: a temporary directory, removed after).",
)
@click.pass_context
def demo(ctx: click.Context, url: str | None, directory: Path | None) -> None:
    """Load a realistic mailbox and chat, and walk the content ladder as an agent would."""
    root = ctx.find_root()
    if url is None and root.get_parameter_source("db") is ParameterSource.COMMANDLINE:
        url = root.params["db"]  # an explicit global --db, never the default or the env var
    if url is not None and directory is not None:
        raise click.UsageError("give --db or --dir, not both")
    if url is not None:
        Store.open(url).close()  # an unopenable store: a one-line error, before the demo
        run_demo(url, click.echo)
    elif directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        run_demo(f"sqlite:///{directory.resolve() / 'demo.db'}", click.echo)
    else:
        with tempfile.TemporaryDirectory(prefix="pdpp-store-demo-") as temporary:
            run_demo(f"sqlite:///{Path(temporary) / 'demo.db'}", click.echo)
        click.echo("(the demo's database was temporary and is gone; --dir DIR keeps it)")


@cli.command()
@click.option(
    "--grant",
    "grant_file",
    type=click.File("rb"),
    required=True,
    metavar="FILE.json",
    help="The PDPP grant every request is answered under.",
)
@click.pass_context
def mcp(ctx: click.Context, grant_file: IO[bytes]) -> None:
    """Serve MCP over stdio (for an MCP host's command + args), under the grant of --grant.

    Over HTTP, `pdpp-store serve` serves the same server at /mcp with bearer tokens. Needs the
    server extra: pip install 'pdpp-store[server]'.
    """
    grant = Grant.from_dict(_load_json(grant_file, "'--grant'"))
    asyncio.run(_serve_stdio(ctx.find_root().params["db"], grant))


async def _serve_stdio(url: str, grant: Grant) -> None:
    from .mcp import serve_stdio

    async with await AsyncStore.open(url) as store:
        await serve_stdio(store, grant)


def main() -> None:
    """The `pdpp-store` console script."""
    cli(prog_name="pdpp-store")
