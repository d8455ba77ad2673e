"""Search queries and page positions (docs/contract.md §9): parsing `q` into terms, and the binding
of a page cursor to a grant and a query. Pure: no I/O.

Rules:
1. `q` is split on whitespace into terms; a `"double-quoted phrase"` is one term (its inner
   whitespace kept as written). Every term is required. Terms are folded with the project's
   fold (`folding.fold`) for matching; a term that folds like an earlier one is dropped (it
   adds no condition), so `Invoice invoice` is one term.
2. Limits: at most `MAX_TERMS` terms, each at most `MAX_TERM_CHARS` code points, no NUL, valid
   Unicode, no unterminated quote, no empty phrase. Each violation is
   `BadRequest("invalid_query", param="q")`; a `q` that is not a string is `invalid_request`.
3. A page position is the key of the last hit shown, `(connection_id, stream, record_id)`;
   hits are ordered by that key (code-point order, which is the byte order both databases
   compare keys in), so the next page starts strictly after it and never skips or repeats a hit
   while the data does not change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import BadRequest
from .folding import fold
from .grants import Grant
from .identity import is_unicode

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "SearchQuery",
    "Term",
    "page_binding",
    "parse_query",
]

MAX_TERMS = 8
MAX_TERM_CHARS = 256
MAX_QUERY_CHARS = 4096
DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 50


def _invalid(message: str) -> BadRequest:
    return BadRequest("invalid_query", f"q {message}", param="q")


@dataclass(frozen=True, slots=True)
class Term:
    text: str
    """As the caller wrote it (what a `read_field_window` continuation passes as `q`)."""
    folded: str
    """What is matched: `fold(text)`, the same length."""


@dataclass(frozen=True, slots=True)
class SearchQuery:
    q: str
    terms: tuple[Term, ...]

    @property
    def canonical(self) -> str:
        """The query's identity for cursors: its folded terms, in order."""
        return json.dumps([term.folded for term in self.terms], ensure_ascii=False)


def _split(q: str) -> list[str]:
    terms: list[str] = []
    position = 0
    while position < len(q):
        char = q[position]
        if char.isspace():
            position += 1
        elif char == '"':
            end = q.find('"', position + 1)
            if end < 0:
                raise _invalid("has an unterminated quoted phrase")
            phrase = q[position + 1 : end]
            if not phrase.strip():
                raise _invalid("has an empty quoted phrase")
            terms.append(phrase)
            position = end + 1
        else:
            end = position
            while end < len(q) and not q[end].isspace() and q[end] != '"':
                end += 1
            terms.append(q[position:end])
            position = end
    return terms


def parse_query(q: object) -> SearchQuery:
    if not isinstance(q, str):
        raise BadRequest("invalid_request", "q must be a string", param="q")
    if "\x00" in q:
        raise _invalid("must not contain NUL")
    if not is_unicode(q):
        raise _invalid("must be valid Unicode (it holds a lone surrogate)")
    if len(q) > MAX_QUERY_CHARS:
        raise _invalid(f"must be at most {MAX_QUERY_CHARS} characters")
    words = _split(q)
    if not words:
        raise _invalid("must contain at least one term")
    terms: list[Term] = []
    for word in words:
        if len(word) > MAX_TERM_CHARS:
            raise _invalid(f"terms must be at most {MAX_TERM_CHARS} characters")
        folded = fold(word)
        if all(term.folded != folded for term in terms):
            terms.append(Term(word, folded))
    if len(terms) > MAX_TERMS:
        raise _invalid(f"must have at most {MAX_TERMS} terms")
    return SearchQuery(q, tuple(terms))


def page_binding(
    grant: Grant,
    query: SearchQuery,
    streams: Sequence[str],
    connection_id: str | None,
    *extra: str,
) -> bytes:
    """The 16 bytes a page cursor is bound to: the grant (id and every searched stream's terms),
    the query's folded terms, the stream and connection filters, and `extra` (the order)."""
    hasher = hashlib.sha256(b"pdpp-store/search-page/v1")
    parts = [
        grant.grant_id,
        *(grant.stream(name).canonical for name in streams),
        query.canonical,
        json.dumps(list(streams)),
        connection_id or "",
        *extra,
    ]
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.digest()[:16]
