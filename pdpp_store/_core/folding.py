"""The project's case folding: one definition, applied in Python, identical on every backend.

Case-insensitive matching (docs/contract.md §3) never relies on a database's `lower()`: SQLite's is
ASCII-only and Postgres's depends on the locale. Instead the store folds text in Python when it
writes a field's search chunks, folds the needle the same way, and the SQL only does an exact
substring search on folded text. So the fold below is the whole definition of "case-insensitive".

Definition ("pdpp-simple-fold-v2"), per code point `c`, independently of its neighbours:

    f(c) = c.casefold()              if that is a single code point,
           NFC(c.casefold())         else, if that is a single code point,
           'i'                       else, if c is U+0130 (capital I with dot above),
           c.lower()                 else, if that is a single code point,
           c                         otherwise.

The code points whose full case folding changes length (Unicode 15: 104 of them) were reviewed
one by one (docs/read-path.md, "Case folding"): the ligatures, `ß`/`ẞ` and the Greek letters with
a subscript iota fold to several letters and keep a one-code-point fold (`ẞ` -> `ß`); the
letters whose folding is a base letter plus combining marks fold to their precomposed form,
which makes U+1FD3/U+1FE3 fold like U+0390/U+03B0 (the simple case folding of Unicode 14+);
U+0130, whose folding is `i` + U+0307 with no precomposed form, folds to `i`, so "istanbul"
finds "İstanbul" (v1 left it unmatched).

Rules:
1. Length-preserving: one code point in, one code point out. So an offset of a match in folded
   text is the exact offset in the original text, and the returned window keeps its original
   case. (Full case folding is not length-preserving: 'ß' -> 'ss'; hence "simple".)
2. Context-free: `str.lower()` on a multi-character string applies the final-sigma rule
   ('Σ' -> 'ς' at the end of a word), which would make the fold of a chunk depend on where the
   chunk was cut. So non-ASCII text is only ever folded code point by code point: capital,
   small and final sigma all fold to small sigma (U+03C3).
3. Idempotent: `fold(fold(s)) == fold(s)` (checked over every code point by the tests).
4. Examples: 'É' -> 'é', 'ẞ' -> 'ß' (as is 'ß'), 'K' (Kelvin) -> 'k', 'İ' -> 'i',
   'ΐ' (U+1FD3) -> 'ΐ' (U+0390), lone surrogates map to themselves.
5. The fold is tied to the Unicode version of the running Python (`UNICODE_VERSION`). The store
   does not record it next to the folded chunks: chunks written under another Unicode version
   keep that version's fold (a code point new to the running version could then be missed by a
   match). `FOLDING_NAME` and `UNICODE_VERSION` name the fold in reports and benchmarks. A
   change of the fold itself is a migration that re-folds the chunks it affects (0004: v1 to
   v2).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache

__all__ = ["FOLDING_NAME", "UNICODE_VERSION", "fold", "fold_char"]

FOLDING_NAME = "pdpp-simple-fold-v2"
UNICODE_VERSION: str = unicodedata.unidata_version

_SURROGATES = range(0xD800, 0xE000)


@dataclass(frozen=True, slots=True)
class _Tables:
    translation: dict[int, str]
    """Every code point whose fold differs from itself."""
    irregular: re.Pattern[str]
    """Code points where whole-string `str.lower()` is not the per-code-point fold: those whose
    lowercase is not their fold (final sigma, long s, Cherokee, dotted capital I), and capital
    sigma, whose lowercase depends on its neighbours."""


def fold_char(char: str) -> str:
    """The fold of one code point (the definition itself; `fold` is its fast form)."""
    if len(char) != 1:
        raise ValueError("fold_char takes exactly one code point")
    folded = char.casefold()
    if len(folded) == 1:
        return folded
    composed = unicodedata.normalize("NFC", folded)
    if len(composed) == 1:
        return composed
    if char == "\u0130":
        return "i"
    lowered = char.lower()
    if len(lowered) == 1:
        return lowered
    return char


_BLOCK = 1024


def _caseless(codes: range) -> bool:
    """True when no code point in `codes` changes under lower() or casefold(): most of Unicode,
    checked a block at a time at C speed, so the tables are built in a few milliseconds."""
    block = "".join(map(chr, codes))
    return block.lower() == block and block.casefold() == block


@cache
def _tables() -> _Tables:
    # Built once, on first use: importing stays cheap.
    translation: dict[int, str] = {}
    irregular = ["\u03a3"]
    for first in range(0, sys.maxunicode + 1, _BLOCK):
        codes = range(first, min(first + _BLOCK, sys.maxunicode + 1))
        if first in _SURROGATES or _caseless(codes):
            continue
        for code in codes:
            char = chr(code)
            folded = fold_char(char)
            if folded != char:
                translation[code] = folded
            if char.lower() != folded:
                irregular.append(f"\\U{code:08x}")
    return _Tables(translation, re.compile("[" + "".join(irregular) + "]"))


def fold(text: str) -> str:
    """Fold `text` per code point; `len(fold(text)) == len(text)` always.

    Fast path: where no irregular code point occurs, whole-string `lower()` (C speed) is exactly
    the per-code-point fold; otherwise the translation table gives it.
    """
    if text.isascii():
        # For ASCII, whole-string lower() is exactly the per-code-point fold (no context rules).
        return text.lower()
    tables = _tables()
    if tables.irregular.search(text) is None:
        return text.lower()
    return text.translate(tables.translation)
