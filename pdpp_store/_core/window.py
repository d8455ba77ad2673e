"""Field-window selectors and arithmetic (docs/contract.md §3): pure values, no I/O.

Owns: parsing the selector arguments of `read_field_window` (named in `_core.selector`) into one
`Selector`, and the arithmetic of windows. The result, `FieldWindow`, is an evidence card
(`pdpp_store.evidence.window`).

Rules:
1. One selector: `cursor` excludes `offset_chars`, `q`, `before_chars`, `after_chars` and
   `occurrence`; `q` excludes `offset_chars`; `before_chars`/`after_chars` and `occurrence`
   require `q`. No arguments at all means offset 0, limit 4096. Every violation is
   `invalid_window` (400) with `param` naming the parameter at fault.
2. Integers are real `int`s (a `bool` is refused). `limit_chars` above `MAX_LIMIT_CHARS` is
   clamped, with the warning `{"code": "limit_clamped", "param": "limit_chars"}`;
   `before_chars`/`after_chars` above `MAX_CONTEXT_CHARS` are refused, not clamped.
3. All offsets and lengths count Unicode code points (Python `len`), so an astral character is
   one unit and a window never splits one.
4. An offset past the end is not an error: the window is empty, at the end.
5. Unknown argument names are `invalid_request` naming the argument, never a `TypeError`.
6. The match window's bounds are computed by the statement that cuts the window
   (`_sql.match.match_window`); `match_window_start` and `match_window_limit` are their
   definition in Python, which the tests hold the SQL to.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BadRequest
from .identity import is_unicode
from .selector import SELECTOR_ARGS
from .slots import slot_setters

__all__ = [
    "DEFAULT_CONTEXT_CHARS",
    "DEFAULT_LIMIT_CHARS",
    "MAX_CONTEXT_CHARS",
    "MAX_LIMIT_CHARS",
    "MAX_OCCURRENCE",
    "MAX_QUERY_CHARS",
    "CursorSelector",
    "MatchSelector",
    "OffsetSelector",
    "Selector",
    "limit_clamped_warning",
    "match_window_limit",
    "match_window_start",
    "parse_selector",
    "window_bounds",
]

DEFAULT_LIMIT_CHARS = 4096
MAX_LIMIT_CHARS = 16384
DEFAULT_CONTEXT_CHARS = 2048
MAX_CONTEXT_CHARS = 8192
MAX_QUERY_CHARS = 1024
MAX_OCCURRENCE = 10_000
"""`occurrence` walks the occurrences before it one statement each (the index makes each cheap);
beyond this, an agent follows `next_match_cursor` from a later window instead."""

Warning_ = dict[str, str]


def limit_clamped_warning() -> Warning_:
    """The warning of a clamped limit (a fresh dict each time: callers may mutate theirs)."""
    return {"code": "limit_clamped", "param": "limit_chars"}


def _invalid(param: str, message: str) -> BadRequest:
    return BadRequest("invalid_window", f"{param} {message}", param=param)


def _check_int(value: object, param: str, low: int, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(param, "must be an integer")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise _invalid(param, f"must be {bound}")
    return value


def _context_chars(value: object, param: str) -> int:
    if value is None:
        return DEFAULT_CONTEXT_CHARS
    return _check_int(value, param, 0, MAX_CONTEXT_CHARS)


def _check_optional_limit(limit_chars: int | None) -> None:
    if limit_chars is not None:
        _check_int(limit_chars, "limit_chars", 1, MAX_LIMIT_CHARS)


@dataclass(frozen=True, slots=True)
class OffsetSelector:
    offset_chars: int = 0
    limit_chars: int = DEFAULT_LIMIT_CHARS

    def __post_init__(self) -> None:
        _check_int(self.offset_chars, "offset_chars", 0)
        _check_int(self.limit_chars, "limit_chars", 1, MAX_LIMIT_CHARS)


@dataclass(frozen=True, slots=True)
class MatchSelector:
    q: str
    before_chars: int = DEFAULT_CONTEXT_CHARS
    after_chars: int = DEFAULT_CONTEXT_CHARS
    limit_chars: int | None = None
    occurrence: int = 1
    """Which occurrence (1-based): every position where the folded `q` starts counts, so
    occurrences may overlap ("aa" occurs 3 times in "aaaa")."""

    def __post_init__(self) -> None:
        if not isinstance(self.q, str) or not self.q:
            raise _invalid("q", "must be a non-empty string")
        if len(self.q) > MAX_QUERY_CHARS:
            raise _invalid("q", f"must be at most {MAX_QUERY_CHARS} characters")
        if "\x00" in self.q:
            raise _invalid("q", "must not contain NUL")
        if not is_unicode(self.q):
            raise _invalid("q", "must be valid Unicode (it holds a lone surrogate)")
        _check_int(self.before_chars, "before_chars", 0, MAX_CONTEXT_CHARS)
        _check_int(self.after_chars, "after_chars", 0, MAX_CONTEXT_CHARS)
        _check_optional_limit(self.limit_chars)
        _check_int(self.occurrence, "occurrence", 1, MAX_OCCURRENCE)


@dataclass(frozen=True, slots=True)
class CursorSelector:
    cursor: str
    limit_chars: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cursor, str) or not self.cursor:
            raise _invalid("cursor", "must be a non-empty string")
        _check_optional_limit(self.limit_chars)


Selector = OffsetSelector | MatchSelector | CursorSelector


def parse_selector(**args: object) -> tuple[Selector, tuple[Warning_, ...]]:
    """Turn the selector arguments of a window read into a `Selector` and its warnings."""
    fast = _plain_window(args)
    if fast is not None:
        return fast, ()
    return _parse(args)


def _parse(args: dict[str, object]) -> tuple[Selector, tuple[Warning_, ...]]:
    """`parse_selector` for any arguments (rules 1, 2 and 5)."""
    for name in args:
        if name not in SELECTOR_ARGS:
            raise BadRequest(
                "invalid_request", f"{name} is not an argument of a window read", param=name
            )
    offset_chars, limit_chars = args.get("offset_chars"), args.get("limit_chars")
    q, cursor = args.get("q"), args.get("cursor")
    before_chars, after_chars = args.get("before_chars"), args.get("after_chars")
    occurrence = args.get("occurrence")
    if cursor is not None:
        for param, value in (
            ("offset_chars", offset_chars),
            ("q", q),
            ("before_chars", before_chars),
            ("after_chars", after_chars),
            ("occurrence", occurrence),
        ):
            if value is not None:
                raise _invalid(param, "cannot be combined with cursor")
    if q is not None and offset_chars is not None:
        raise _invalid("offset_chars", "cannot be combined with q")
    if q is None:
        for param, value in (
            ("before_chars", before_chars),
            ("after_chars", after_chars),
            ("occurrence", occurrence),
        ):
            if value is not None:
                raise _invalid(param, "requires q")

    warnings: tuple[Warning_, ...] = ()
    limit: int | None = None
    if limit_chars is not None:
        limit = _check_int(limit_chars, "limit_chars", 1)
        if limit > MAX_LIMIT_CHARS:
            limit = MAX_LIMIT_CHARS
            warnings = (limit_clamped_warning(),)

    selector: Selector
    if cursor is not None:
        if not isinstance(cursor, str):
            raise _invalid("cursor", "must be a non-empty string")
        selector = CursorSelector(cursor, limit)
    elif q is not None:
        if not isinstance(q, str):
            raise _invalid("q", "must be a non-empty string")
        before = _context_chars(before_chars, "before_chars")
        after = _context_chars(after_chars, "after_chars")
        which = 1 if occurrence is None else _check_int(occurrence, "occurrence", 1, MAX_OCCURRENCE)
        selector = MatchSelector(q, before, after, limit, which)
    else:
        offset = 0 if offset_chars is None else _check_int(offset_chars, "offset_chars", 0)
        selector = OffsetSelector(offset, DEFAULT_LIMIT_CHARS if limit is None else limit)
    return selector, warnings


def _plain_window(args: dict[str, object]) -> Selector | None:
    """The selector of the commonest reads, an offset window or a cursor with at most a limit in
    range (nothing to refuse, clamp or warn about), built without the general checks; None for
    anything else."""
    limit = args.get("limit_chars")
    if limit is not None and not (type(limit) is int and 1 <= limit <= MAX_LIMIT_CHARS):
        return None
    if len(args) > (1 if limit is None else 2):
        return None
    offset, cursor = args.get("offset_chars"), args.get("cursor")
    if cursor is not None:
        if type(cursor) is not str or not cursor:
            return None
        chosen: Selector = _NEW(CursorSelector)  # checked above: built as `_core.slots` says
        _SET_CURSOR(chosen, cursor)
        _SET_CURSOR_LIMIT(chosen, limit)
        return chosen
    if offset is None and len(args) == (0 if limit is None else 1):
        offset = 0
    elif type(offset) is not int or offset < 0:
        return None
    chosen = _NEW(OffsetSelector)
    _SET_OFFSET(chosen, offset)
    _SET_OFFSET_LIMIT(chosen, DEFAULT_LIMIT_CHARS if limit is None else limit)
    return chosen


_NEW = object.__new__
_SET_OFFSET, _SET_OFFSET_LIMIT = slot_setters(OffsetSelector, ("offset_chars", "limit_chars"))
_SET_CURSOR, _SET_CURSOR_LIMIT = slot_setters(CursorSelector, ("cursor", "limit_chars"))


# -- arithmetic -------------------------------------------------------------------------------


def window_bounds(offset: int, total: int) -> int:
    """The start of a window asked for at `offset` in a field of `total` characters."""
    return min(offset, total)


def match_window_start(match_start: int, before_chars: int) -> int:
    """A match window starts `before_chars` before the match, or at 0."""
    return max(0, match_start - before_chars)


def match_window_limit(
    match_start: int, start: int, q_len: int, after_chars: int, limit_chars: int | None
) -> tuple[int, bool]:
    """The limit of a match window and whether it was clamped.

    `limit_chars` if given, else `(match_start - start) + q_len + after_chars` (the context
    before, the match, the context after). Either way it is never more than `MAX_LIMIT_CHARS`;
    when it had to be clamped (`True`), the `limit_clamped` warning applies to the window.
    """
    wanted = limit_chars if limit_chars is not None else (match_start - start) + q_len + after_chars
    if wanted > MAX_LIMIT_CHARS:
        return MAX_LIMIT_CHARS, True
    return wanted, False
