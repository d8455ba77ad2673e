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
    pdpp-store [--db URL] grant describe --grant FILE [--stream S]  Store.describe_grant
    pdpp-store [--db URL] records list STREAM --grant FILE    Store.query_records
    pdpp-store [--db URL] aggregate STREAM --grant FILE       Store.aggregate
    pdpp-store [--db URL] grant add FILE.json                 Store.add_grant
    pdpp-store [--db URL] grant revoke GRANT_ID               Store.revoke_grant
    pdpp-store [--db URL] grant list [--grant-id ID]          Store.list_grants
    pdpp-store [--db URL] audit list [--grant-id ID] [--since T] [--until T]  Store.list_audit
    pdpp-store [--db URL] audit export [same filters]          Store.list_audit (JSON Lines)
    pdpp-store [--db URL] audit prune --older-than S           Store.prune_audit
    pdpp-store [--db URL] serve [--tokens FILE] [--issuer URL --introspection-url URL
                                 --client-id ID --client-secret-file FILE --jwks-url URL]
                                [--host] [--port] [--workers] [--public-url]
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
5. Like every surface, this package imports public names only (and its own `_io`, `_root`).

A package with a module per command group (`owner`, `reads`, `records`, `aggregate`, `blobs`,
`grants`, `audit`, `serving`, `demo`), each command a dozen lines of options around one library
call; what they share is in `_io` (the store and grant options, JSON reading, `--format`) and
`_root` (the group and its error envelope). A new group is a new module, imported below so that
its commands register, and its operations listed in `OPERATIONS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from . import aggregate, audit, blobs, demo, grants, owner, reads, records, serving
from ._root import DEFAULT_URL, URL_ENV, cli

__all__ = ["DEFAULT_URL", "IO_PARAMS", "OPERATIONS", "URL_ENV", "Shell", "cli", "main"]

_COMMAND_GROUPS = (aggregate, audit, blobs, demo, grants, owner, reads, records, serving)
"""The modules whose commands register on `cli` when imported."""


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
    "query_records": Shell(("records", "list")),
    "aggregate": Shell(("aggregate",)),
    "add_grant": Shell(("grant", "add"), {"grant": "file"}),
    "revoke_grant": Shell(("grant", "revoke")),
    "list_grants": Shell(("grant", "list")),
    "list_audit": Shell(("audit", "list")),
    "prune_audit": Shell(("audit", "prune")),
}
"""Every library operation's command (rule 4)."""

IO_PARAMS = frozenset({"output", "quiet"})
"""Parameters that only shape the command's I/O (`--format`, `--quiet`), never an argument."""


def main() -> None:
    """The `pdpp-store` console script."""
    cli(prog_name="pdpp-store")
