"""HTTP conditionals and ranges (RFC 9110 §13, §14): pure functions over header values.

Rules:
1. Entity tags are strong and quoted (`"sha256:..."`). `If-Match` and `If-Range` compare
   strongly (a weak tag never matches); `If-None-Match` compares weakly, as RFC 9110 says.
2. One byte range is served: `bytes=a-b`, `bytes=a-` or `bytes=-n` (numbers of at most 64
   digits). A `Range` that does not parse, names another unit or several ranges is ignored
   (the whole body is sent, as RFC 9110 allows); a range that starts at or past the end is
   unsatisfiable (416).
"""

from __future__ import annotations

import re

__all__ = ["ByteRange", "etag", "if_match_fails", "none_match", "parse_range", "range_applies"]

ByteRange = tuple[int, int]
"""`(first, last)`, inclusive, as in `Content-Range`."""

_RANGE = re.compile(r"\s*bytes\s*=\s*(\d{0,64})\s*-\s*(\d{0,64})\s*")
_TAG = re.compile(r'\s*(W/)?("[^"]*")\s*')


def etag(value: str) -> str:
    return f'"{value}"'


def _tags(header: str) -> list[tuple[bool, str]] | None:
    """The entity tags of a list header as (weak, tag); None for `*`."""
    if header.strip() == "*":
        return None
    tags = []
    for part in header.split(","):
        found = _TAG.fullmatch(part)
        if found:
            tags.append((found.group(1) is not None, found.group(2)))
    return tags


def if_match_fails(header: str | None, current: str) -> bool:
    """Whether `If-Match` forbids the answer (strong comparison)."""
    if header is None:
        return False
    tags = _tags(header)
    if tags is None:
        return False
    return not any(not weak and tag == current for weak, tag in tags)


def none_match(header: str | None, current: str) -> bool:
    """Whether `If-None-Match` holds a tag equal to `current` (weak comparison): answer 304."""
    if header is None:
        return False
    tags = _tags(header)
    if tags is None:
        return True
    return any(tag == current for _, tag in tags)


def range_applies(if_range: str | None, current: str) -> bool:
    """Whether a `Range` is honoured under `If-Range` (a date never matches: no Last-Modified)."""
    if if_range is None:
        return True
    found = _TAG.fullmatch(if_range)
    return found is not None and found.group(1) is None and found.group(2) == current


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The one range `header` asks for in a body of `size` bytes, or None to send it whole.

    Raises `ValueError` when the range is well formed but unsatisfiable (416)."""
    if header is None:
        return None
    found = _RANGE.fullmatch(header)
    if not found:
        return None
    first, last = found.groups()
    if not first and not last:
        return None
    if not first:  # a suffix: the last n bytes
        length = int(last)
        if length == 0:
            raise ValueError("an empty suffix range")
        if size == 0:
            raise ValueError("a range of an empty body")
        return max(0, size - length), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None  # invalid syntax: ignored
    if start >= size:
        raise ValueError("the range starts at or past the end")
    return start, min(end, size - 1)
