"""`pdpp-store`: the command line, one thin shell per library call (sqlite-utils style).

    pdpp-store [--db URL] manifest add FILE.json              Store.register_manifest
    pdpp-store [--db URL] connection add CONNECTION CONNECTOR Store.add_connection
    pdpp-store [--db URL] ingest CONNECTION STREAM FILE.jsonl Store.upsert_records
    pdpp-store [--db URL] delete CONNECTION STREAM RECORD_ID  Store.delete_record
    pdpp-store [--db URL] cursor-key rotate                   Store.rotate_cursor_key
    pdpp-store [--db URL] cursor-key retire --older-than S    Store.retire_cursor_keys
    pdpp-store [--db URL] read field-window RECORD FIELD      Store.read_field_window
    pdpp-store [--db URL] read field-info RECORD FIELD        Store.describe_field
    pdpp-store [--db URL] read record RECORD                  Store.read_record
    pdpp-store [--db URL] read resource URI                   Store.read_resource
    pdpp-store [--db URL] blob info BLOB_ID --grant FILE      Store.blob_info
    pdpp-store [--db URL] blob read BLOB_ID --grant FILE      Store.read_blob_range
    pdpp-store [--db URL] blob put FILE --mime-type TYPE      Store.put_blob
    pdpp-store [--db URL] search Q --grant FILE               Store.search
    pdpp-store [--db URL] grant describe --grant FILE         Store.describe_grant
    pdpp-store [--db URL] serve --tokens FILE [--host] [--port] [--workers] [--public-url]
                                                               pdpp_store.serve.run
    pdpp-store [--db URL] mcp --grant FILE                    pdpp_store.mcp.serve_stdio
    pdpp-store [--db URL] migrate                             Store.open(url, migrate=True)
    pdpp-store demo [--db URL | --dir DIR]                    demo.run_demo

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
4. `OPERATIONS` maps each library operation to its command, and each command's parameters carry
   the library's argument names (a file that supplies an argument is said so in `sources`);
   a test holds this to the operation catalogue. The selector options are derived from
   `SELECTOR_ARGS`, the selector's one definition.
5. Like every surface, this module imports public names only.

One module of about 700 lines: each command is a dozen lines of options around one library call,
and the shared parts (the store and grant options, the renderers, the error envelope) serve all
of them; when stage 3's commands (`records list`, `aggregate`, `grant`, `audit`) arrive it becomes
a package with a module per command group.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import click
from click.core import ParameterSource

from . import (
    SELECTOR_ARGS,
    AsyncStore,
    BadRequest,
    FieldWindowRef,
    Grant,
    Store,
    StoreError,
    UnscopedRecordRef,
    parse_record_ref,
)
from .demo import run_demo
from .evidence import text as evidence_text
from .mcp.calls import as_tool_call

__all__ = ["DEFAULT_URL", "IO_PARAMS", "OPERATIONS", "URL_ENV", "Shell", "cli", "main"]


@dataclass(frozen=True, slots=True)
class Shell:
    """The command that shells over one library operation (rule 4)."""

    command: tuple[str, ...]
    """The command's words after `pdpp-store`."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Library argument -> the command's parameter that supplies it, where they differ (a file
    read into the argument)."""


OPERATIONS: dict[str, Shell] = {
    "register_manifest": Shell(("manifest", "add"), {"manifest": "file"}),
    "add_connection": Shell(("connection", "add")),
    "upsert_records": Shell(("ingest",), {"records": "file"}),
    "delete_record": Shell(("delete",)),
    "put_blob": Shell(("blob", "put"), {"data": "file"}),
    "rotate_cursor_key": Shell(("cursor-key", "rotate")),
    "retire_cursor_keys": Shell(("cursor-key", "retire")),
    "read_field_window": Shell(("read", "field-window")),
    "read_record": Shell(("read", "record")),
    "describe_field": Shell(("read", "field-info")),
    "read_resource": Shell(("read", "resource")),
    "blob_info": Shell(("blob", "info")),
    "read_blob_range": Shell(("blob", "read")),
    "search": Shell(("search",)),
    "describe_grant": Shell(("grant", "describe")),
}
"""Every library operation's command (rule 4)."""

IO_PARAMS = frozenset({"output", "quiet"})
"""Parameters that only shape the command's I/O (`--format`, `--quiet`), never an argument."""

F = TypeVar("F", bound=Callable[..., Any])

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
        return _load_grant(grant_file)
    ref = parse_record_ref(record, connection_id=connection)
    if isinstance(ref, UnscopedRecordRef):
        raise click.UsageError(
            f"RECORD {record!r} does not name its connection: give --connection, "
            "or write it as CONNECTION/STREAM:ID"
        )
    return Grant.owner(ref.connection_id, ref.stream)


def _load_grant(grant_file: IO[bytes]) -> Grant:
    return Grant.from_dict(_load_json(grant_file, "'--grant'"))


def _resource_grant(grant_file: IO[bytes] | None, uri: str) -> Grant:
    """`--grant`, else the owner's grant over the record a resource URI names."""
    if grant_file is not None or not uri.startswith("pdpp://field-window/"):
        return _grant(grant_file, uri, None)
    ref = FieldWindowRef.parse(uri).record
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
    "connection_id",
    metavar="CONNECTION_ID",
    help="The record's connection (needed for a legacy STREAM:ID record).",
)
_grant_option = click.option(
    "--grant",
    "grant",
    type=click.File("rb"),
    metavar="FILE.json",
    help="A PDPP grant (JSON). Default: the owner's grant over the record's connection and stream.",
)
_required_grant_option = click.option(
    "--grant", "grant", type=click.File("rb"), required=True, metavar="FILE.json"
)


def _selector_options(command: F) -> F:
    """One option per selector argument, from `SELECTOR_ARGS` (the selector's one definition)."""
    for arg in reversed(SELECTOR_ARGS.values()):
        metavar = "TEXT" if arg.type is str else "N"
        command = click.option(arg.flag, arg.name, type=arg.type, metavar=metavar, help=arg.help)(
            command
        )
    return command


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


@cli.command("delete")
@click.argument("connection_id")
@click.argument("stream")
@click.argument("record_id")
@click.pass_context
def delete(ctx: click.Context, connection_id: str, stream: str, record_id: str) -> None:
    """Delete a record (soft: its reads answer not_found from now on)."""
    _open_store(ctx).delete_record(connection_id, stream, record_id)


@cli.group("cursor-key")
def cursor_key() -> None:
    """The keys that sign cursors."""


@cursor_key.command("rotate")
@click.pass_context
def cursor_key_rotate(ctx: click.Context) -> None:
    """Sign new cursors with a new key; cursors signed with the older keys stay valid."""
    _open_store(ctx).rotate_cursor_key()


@cursor_key.command("retire")
@click.option(
    "--older-than",
    "older_than",
    type=float,
    required=True,
    metavar="SECONDS",
    help="Retire keys superseded more than this long ago (the grace period).",
)
@click.pass_context
def cursor_key_retire(ctx: click.Context, older_than: float) -> None:
    """Delete cursor keys superseded more than SECONDS ago: the cursors they signed stop working."""
    retired = _open_store(ctx).retire_cursor_keys(older_than)
    _echo_json({"object": "cursor_keys", "retired": retired})


@cli.group()
def read() -> None:
    """Grant-enforced reads."""


@read.command("field-window")
@click.argument("record")
@click.argument("field")
@_connection_option
@_grant_option
@_selector_options
@_format_option()
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
    window = _open_store(ctx).read_field_window(
        _grant(grant, record, connection_id),
        record,
        field,
        connection_id=connection_id,
        **selector,
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
@_grant_option
@_format_option()
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
    view = _open_store(ctx).read_record(
        _grant(grant, record, connection_id),
        record,
        connection_id=connection_id,
        after_field=after_field,
        fields=list(fields) or None,
    )
    if output == "json":
        _echo_json(view.to_dict())
        return
    page = evidence_text.page_record(view.to_dict(), 0)
    click.echo(evidence_text.record_text(page, as_tool_call))


@read.command("field-info")
@click.argument("record")
@click.argument("field")
@_connection_option
@_grant_option
@click.pass_context
def read_field_info(
    ctx: click.Context,
    record: str,
    field: str,
    connection_id: str | None,
    grant: IO[bytes] | None,
) -> None:
    """What the store knows of one field of RECORD (kind, size, digest), without its value."""
    info = _open_store(ctx).describe_field(
        _grant(grant, record, connection_id), record, field, connection_id=connection_id
    )
    _echo_json(info.to_dict())


@read.command("resource")
@click.argument("uri")
@_grant_option
@_format_option()
@click.pass_context
def read_resource(ctx: click.Context, uri: str, grant: IO[bytes] | None, output: str) -> None:
    """The record or field window a pdpp://record/... or pdpp://field-window/... URI names."""
    card = _open_store(ctx).read_resource(_resource_grant(grant, uri), uri).to_dict()
    if output == "json":
        _echo_json(card)
    elif card["object"] == "field_window":
        click.echo(evidence_text.window_text(card, as_tool_call))
    else:
        click.echo(evidence_text.record_text(evidence_text.page_record(card, 0), as_tool_call))


@cli.command("search")
@click.argument("q")
@_required_grant_option
@click.option(
    "--stream", "streams", multiple=True, metavar="STREAM", help="Search this stream (repeat)."
)
@click.option("--connection", "connection_id", metavar="CONNECTION_ID", help="One connection only.")
@click.option("--limit", type=int, metavar="N", help="Hits per page (1..50, default 10).")
@click.option("--cursor", metavar="TEXT", help="The next_cursor of the previous page.")
@_format_option()
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
    card = _open_store(ctx).search(_load_grant(grant), q, cursor=cursor, **options).to_dict()
    if output == "json":
        _echo_json(card)
        return
    click.echo(evidence_text.search_text(card, as_tool_call))


@cli.group("grant")
def grant_group() -> None:
    """What a grant lets an agent see."""


@grant_group.command("describe")
@_required_grant_option
@_format_option()
@click.pass_context
def grant_describe(ctx: click.Context, grant: IO[bytes], output: str) -> None:
    """The granted streams and fields (from the manifests, never a record), and which are
    searchable."""
    card = _open_store(ctx).describe_grant(_load_grant(grant)).to_dict()
    if output == "json":
        _echo_json(card)
        return
    click.echo(evidence_text.schema_text(card))


@cli.group()
def blob() -> None:
    """Blobs (attachment bytes), referenced from records by blob_ref fields."""


@blob.command("info")
@click.argument("blob_id")
@_required_grant_option
@_format_option()
@click.pass_context
def blob_info(ctx: click.Context, blob_id: str, grant: IO[bytes], output: str) -> None:
    """Metadata of a blob that a record visible under the grant references."""
    info = _open_store(ctx).blob_info(_load_grant(grant), blob_id)
    if output == "json":
        _echo_json(info.to_dict())
        return
    click.echo(evidence_text.blob_text({**info.to_dict(), "uri": info.uri}))


@blob.command("read")
@click.argument("blob_id")
@_required_grant_option
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
    found = _open_store(ctx).read_blob_range(
        _load_grant(grant), blob_id, offset_bytes, length_bytes
    )
    if output == "json":
        _echo_json(found.to_dict())
        return
    sys.stdout.buffer.write(found.data)
    sys.stdout.buffer.flush()


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
    type=click.Path(path_type=Path),  # any bad path is the library's `invalid_tokens`
    metavar="FILE.json",
    help="A JSON object mapping each bearer token to the PDPP grant it carries.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    metavar="N",
    help="Serve from N processes sharing the port (one per core: a process uses one core).",
)
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="The http(s) origin clients reach the server by, named in its OAuth metadata and 401s"
    " (default: the address it listens on; never a request's Host header).",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="A browser origin allowed to call (CORS on REST and /mcp, and past /mcp's Origin"
    " check); repeatable. Default: none.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="HOST",
    help="Another name the server may be called by at /mcp (its Host check); repeatable.",
)
@click.option("--max-head-bytes", type=int, default=16384, show_default=True, metavar="N")
@click.option("--max-request-line", type=int, default=8192, show_default=True, metavar="N")
@click.option("--max-headers", type=int, default=100, show_default=True, metavar="N")
@click.option(
    "--max-body-bytes",
    type=int,
    default=1 << 20,
    show_default=True,
    metavar="N",
    help="Request bodies outside /mcp.",
)
@click.option("--max-mcp-body-bytes", type=int, default=4 << 20, show_default=True, metavar="N")
@click.option(
    "--head-timeout",
    type=float,
    default=10.0,
    show_default=True,
    metavar="S",
    help="Seconds a request head may take to arrive.",
)
@click.option(
    "--body-timeout",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds a request body may take to arrive.",
)
@click.option(
    "--idle-timeout",
    type=float,
    default=5.0,
    show_default=True,
    metavar="S",
    help="Seconds a kept-alive connection may wait for its next request.",
)
@click.option("--max-connections", type=int, default=1000, show_default=True, metavar="N")
@click.option(
    "--max-mcp-streams",
    type=int,
    default=16,
    show_default=True,
    metavar="N",
    help="MCP requests one token may have in flight at once.",
)
@click.pass_context
def serve(  # noqa: PLR0917 (click passes each option by keyword)
    ctx: click.Context,
    /,
    tokens_path: Path,
    host: str,
    port: int,
    workers: int,
    public_url: str | None,
    allow_origins: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    **limits: Any,
) -> None:
    """Serve the store over HTTP: the REST routes under /v1 and MCP at /mcp (needs the
    `server` extra: pip install 'pdpp-store[server]'). Stops on Ctrl-C.

    The door's limits (request heads, bodies, timeouts, connections, MCP requests per token)
    are answered before any token is read; docs/serving.md gives each default's reason."""
    try:
        from .serve import Limits, run
    except ImportError as error:
        raise click.UsageError(
            f"serving needs the server extra (pip install 'pdpp-store[server]'): {error}"
        ) from None
    run(
        ctx.find_root().params["db"],
        tokens_path,
        host=host,
        port=port,
        workers=workers,
        public_url=public_url,
        limits=Limits(
            max_head_bytes=limits["max_head_bytes"],
            max_request_line=limits["max_request_line"],
            max_headers=limits["max_headers"],
            max_body_bytes=limits["max_body_bytes"],
            max_mcp_body_bytes=limits["max_mcp_body_bytes"],
            head_timeout_s=limits["head_timeout"],
            body_timeout_s=limits["body_timeout"],
            idle_timeout_s=limits["idle_timeout"],
            max_connections=limits["max_connections"],
            max_mcp_streams_per_token=limits["max_mcp_streams"],
        ),
        allow_origins=allow_origins,
        allow_hosts=allow_hosts,
    )


@cli.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Bring the database to the newest schema (safe to run from several processes at once).

    Servers can then open the store with `Store.open(url, migrate=False)`.
    """
    Store.open(ctx.find_root().params["db"], migrate=True).close()
    _echo_json({"object": "migration", "status": "at_head"})


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
