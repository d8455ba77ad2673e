"""The selector arguments of a field-window read (docs/contract.md §3): their one definition.

`SelectorArgs` is the only place the arguments are spelled: their names, their types, a line of
help, the command line's flag, and whether a field-window URI may carry them. Everything else is
derived from it: the fronts' keyword arguments (`**selector: Unpack[SelectorArgs]`), the parser
(`_core.window.parse_selector` accepts exactly these names), the handle payload of a
`pdpp://field-window/...` URI (`URI_SELECTOR_ARGS`), the CLI's options, the operation catalogue
and the arguments of every `Continuation` that reads a window.

Which arguments may combine is a rule of the parser, not of this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypedDict, get_args, get_type_hints

__all__ = ["SELECTOR_ARGS", "URI_SELECTOR_ARGS", "SelectorArg", "SelectorArgs"]


@dataclass(frozen=True, slots=True)
class SelectorArg:
    """What the table says of one argument besides its name and type."""

    help: str
    flag: str
    """The command line's option for it (kept short: `--offset`, not `--offset-chars`)."""
    in_uri: bool = False
    """A `pdpp://field-window/...` handle may carry it (a resource names a position, not a
    search: `q` and its context are not part of a window's address)."""
    type: type = object
    """Filled in from the annotation by `SELECTOR_ARGS`."""
    name: str = ""
    """Filled in from the key by `SELECTOR_ARGS`."""


class SelectorArgs(TypedDict, total=False):
    """The selector keyword arguments of `read_field_window` (one selector: see docs/contract.md
    §3)."""

    offset_chars: Annotated[
        int | None, SelectorArg("Start, in code points (default 0).", "--offset", in_uri=True)
    ]
    limit_chars: Annotated[
        int | None,
        SelectorArg(
            "Length, in code points (default 4096; above 16384 clamped).", "--limit", in_uri=True
        ),
    ]
    q: Annotated[
        str | None, SelectorArg("Centre the window on the first case-insensitive match.", "--q")
    ]
    before_chars: Annotated[
        int | None, SelectorArg("Context before the match (default 2048).", "--before")
    ]
    after_chars: Annotated[
        int | None, SelectorArg("Context after the match (default 2048).", "--after")
    ]
    occurrence: Annotated[
        int | None,
        SelectorArg("Which occurrence of q to centre on (1-based, default 1).", "--occurrence"),
    ]
    cursor: Annotated[
        str | None,
        SelectorArg(
            "Continue from a window's next, previous or next-match cursor.", "--cursor", in_uri=True
        ),
    ]


def _table() -> dict[str, SelectorArg]:
    table: dict[str, SelectorArg] = {}
    for name, hint in get_type_hints(SelectorArgs, include_extras=True).items():
        optional, spec = get_args(hint)
        (python_type,) = (arg for arg in get_args(optional) if arg is not type(None))
        table[name] = SelectorArg(spec.help, spec.flag, spec.in_uri, python_type, name)
    return table


SELECTOR_ARGS: dict[str, SelectorArg] = _table()
"""Every selector argument by name, in the order of `SelectorArgs`."""

URI_SELECTOR_ARGS: tuple[str, ...] = tuple(name for name, a in SELECTOR_ARGS.items() if a.in_uri)
"""The selector arguments a field-window URI's handle may carry, in the handle's key order."""
