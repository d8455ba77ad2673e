"""What the commands share, I/O only: the store and grant options, JSON and JSON Lines reading,
the `--format` and `--older-than` options and the selector options derived from
`SELECTOR_ARGS`."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

import click

from pdpp_store import (
    SELECTOR_ARGS,
    BadRequest,
    FieldWindowRef,
    Grant,
    Store,
    UnscopedRecordRef,
    parse_record_ref,
)

__all__ = [
    "connection_option",
    "echo_json",
    "file_name",
    "file_size",
    "format_option",
    "grant_option",
    "json_lines",
    "load_grant",
    "load_json",
    "older_than_option",
    "open_store",
    "record_grant",
    "required_grant_option",
    "resource_grant",
    "selector_options",
    "unsized",
]

F = TypeVar("F", bound=Callable[..., Any])


def open_store(ctx: click.Context) -> Store:
    """The store named by the global `--db`, closed when the command ends."""
    store = Store.open(ctx.find_root().params["db"])
    ctx.call_on_close(store.close)
    return store


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


def file_name(file: IO[bytes]) -> str:
    name = getattr(file, "name", None)
    return name if isinstance(name, str) else "<stdin>"


def load_json(file: IO[bytes], param: str) -> Any:
    try:
        return json.load(file)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        message = f"{file_name(file)} is not valid JSON: {error}"
        raise click.BadParameter(message, param_hint=param) from None


def record_grant(grant_file: IO[bytes] | None, record: str, connection: str | None) -> Grant:
    """The grant from `--grant`, else the owner's grant over the record's connection and stream."""
    if grant_file is not None:
        return load_grant(grant_file)
    ref = parse_record_ref(record, connection_id=connection)
    if isinstance(ref, UnscopedRecordRef):
        raise click.UsageError(
            f"RECORD {record!r} does not name its connection: give --connection, "
            "or write it as CONNECTION/STREAM:ID"
        )
    return Grant.owner(ref.connection_id, ref.stream)


def load_grant(grant_file: IO[bytes]) -> Grant:
    return Grant.from_dict(load_json(grant_file, "'--grant'"))


def resource_grant(grant_file: IO[bytes] | None, uri: str) -> Grant:
    """`--grant`, else the owner's grant over the record a resource URI names."""
    if grant_file is not None or not uri.startswith("pdpp://field-window/"):
        return record_grant(grant_file, uri, None)
    ref = FieldWindowRef.parse(uri).record
    return Grant.owner(ref.connection_id, ref.stream)


def file_size(file: IO[bytes]) -> int | None:
    """The size of a regular file, else None (a pipe or a terminal has no size to show)."""
    try:
        info = os.fstat(file.fileno())
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def json_lines(file: IO[bytes], advance: Callable[[int], None]) -> Iterator[object]:
    """The JSON value of each line, read lazily; a line that is not JSON names its number.

    Every line is one record (JSON Lines has no blank lines), so the library's "record #N" is
    line N + 1 of the file.
    """
    name = file_name(file)
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


def unsized() -> Iterator[int]:
    """An iterable without a length, for a progress bar whose total is unknown."""
    yield from ()


def format_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--format",
        "output",
        type=click.Choice(["json", "text"]),
        default="json",
        show_default=True,
        help="json: the card (to_dict()); text: exactly what an MCP client's content[] shows.",
    )


def older_than_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--older-than SECONDS` (required, passed as `older_than`): an age, for the commands that
    delete what is older."""
    return click.option(
        "--older-than",
        "older_than",
        type=float,
        required=True,
        metavar="SECONDS",
        help=help_text,
    )


connection_option = click.option(
    "--connection",
    "connection_id",
    metavar="CONNECTION_ID",
    help="The record's connection (needed for a legacy STREAM:ID record).",
)
grant_option = click.option(
    "--grant",
    "grant",
    type=click.File("rb"),
    metavar="FILE.json",
    help="A PDPP grant (JSON). Default: the owner's grant over the record's connection and stream.",
)
required_grant_option = click.option(
    "--grant", "grant", type=click.File("rb"), required=True, metavar="FILE.json"
)


def selector_options(command: F) -> F:
    """One option per selector argument, from `SELECTOR_ARGS` (the selector's one definition)."""
    for arg in reversed(SELECTOR_ARGS.values()):
        metavar = "TEXT" if arg.type is str else "N"
        command = click.option(arg.flag, arg.name, type=arg.type, metavar=metavar, help=arg.help)(
            command
        )
    return command
