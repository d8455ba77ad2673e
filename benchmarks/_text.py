"""Deterministic prose-like text for the benchmarks, and the needles planted in it. Pure.

Rules:
1. The same (kind, size) gives the same text on every machine and every run: a seeded
   `random.Random` picks words into a pool of paragraphs, then paragraphs into the field.
   Drawing paragraphs from a pool keeps 100 M code points to a few seconds; the pool is large
   enough that the text does not repeat in any window.
2. `ascii` is English-like prose. `mixed` is the same prose with accented Latin words (é, ü, ß,
   upper case too), CJK words and emoji from the astral planes, so offsets, UTF-8 byte lengths and
   Python's 4-byte string storage all differ from code points.
3. Sizes count code points (the unit of every offset in the API), never bytes.
4. Needles are planted by overwriting text, so a field's size is exactly its nominal size. They
   differ from their queries only in ASCII case, so every design benchmarked (including those
   that lower-case with SQLite's ASCII-only `lower()`) finds the same match; the generated words
   never contain the needles' common stem.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pdpp_store import fold

__all__ = [
    "GENERATOR_VERSION",
    "KINDS",
    "NEEDLE_PLACES",
    "Needle",
    "check_needles",
    "field_text",
    "needles",
    "parse_sizes",
]

KINDS = ("ascii", "mixed")
NEEDLE_PLACES = ("start", "boundary", "end", "absent")
CHUNK_CHARS_ASSUMED = 1024
"""Only used to place the `boundary` needle across a chunk boundary of the store's layout;
the benchmarks check the store's own constant against it."""

GENERATOR_VERSION = 1
"""Bump when the text a (kind, size) gives changes: cached datasets are keyed by it (and by a
sample of the output, as a safety net)."""

SIZE_UNITS = {"k": 1_000, "m": 1_000_000}


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_ASCII_WORDS = _words(
    "the of and to in is that for it as with was on be by at this from or have an they which one "
    "you were all we when your can said there use each she do how their if will up other about "
    "out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long "
    "down day did get come made may part invoice meeting agenda attached budget quarter review "
    "thanks regards project deadline schedule minutes summary draft report customer shipment "
    "delivery contract signature payment account balance transfer receipt "
)
_LATIN_WORDS = _words(
    "café über straße naïve façade résumé Müller Größe déjà fiancée jalapeño Ørsted Zoë München "
    "señor crème brûlée Ångström Éloïse Übermaß Straßenbahn Ça façon Œuvre "
)
_CJK_WORDS = _words("数据 東京 日本語 会议 邮件 附件 发票 今日は ありがとう 서울 한국어 報告書 ")
_EMOJI = _words("😀 🚀 📧 🎉 👍 🔥 🌍 📎 🤖 🧾 ✅ ")

_POOL_PARAGRAPHS = 512
_SEED = {"ascii": 20260101, "mixed": 20260102}


def parse_sizes(spec: str) -> tuple[tuple[str, int], ...]:
    """`"10k,1m"` -> `(("10k", 10_000), ("1m", 1_000_000))`."""
    sizes = []
    for label in (part.strip().lower() for part in spec.split(",")):
        if not label:
            continue
        number, unit = label[:-1], label[-1]
        if unit not in SIZE_UNITS or not number.isdigit():
            raise ValueError(f"bad size {label!r}: use a number and k or m, e.g. 10k,1m,100m")
        sizes.append((label, int(number) * SIZE_UNITS[unit]))
    if not sizes:
        raise ValueError("no sizes given")
    return tuple(sizes)


def _word(rng: random.Random, kind: str) -> str:
    if kind == "mixed":
        roll = rng.random()
        if roll < 0.16:
            return rng.choice(_LATIN_WORDS)
        if roll < 0.30:
            return rng.choice(_CJK_WORDS)
        if roll < 0.36:
            return rng.choice(_EMOJI)
    return rng.choice(_ASCII_WORDS)


def _sentence(rng: random.Random, kind: str) -> str:
    words = [_word(rng, kind) for _ in range(rng.randint(6, 18))]
    words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words) + rng.choice((". ", ". ", ". ", "? ", "! "))


def _paragraph_pool(kind: str) -> list[str]:
    rng = random.Random(_SEED[kind])
    return [
        "".join(_sentence(rng, kind) for _ in range(rng.randint(2, 7))) + "\n\n"
        for _ in range(_POOL_PARAGRAPHS)
    ]


@dataclass(frozen=True, slots=True)
class Needle:
    place: str
    planted: str
    """The text written into the field (mixed case)."""
    query: str
    """What the benchmarks search for (the planted text lower-cased; ASCII case only)."""
    offset: int | None
    """Where it is planted, in code points; None for the absent needle."""


def needles(kind: str, size: int) -> dict[str, Needle]:
    """The four needles of a field: near the start, across a chunk boundary in the middle, at the
    very end, and one that does not occur."""
    tail = "-café-🚀" if kind == "mixed" else "-cafe-x"
    middle_boundary = max(1, size // CHUNK_CHARS_ASSUMED // 2) * CHUNK_CHARS_ASSUMED
    out = {}
    for place in NEEDLE_PLACES:
        planted = f"QuoKKaZephyr-{place.title()}{tail}"
        offset = {
            "start": 100,
            "boundary": middle_boundary - len(planted) // 2,
            "end": size - len(planted),
            "absent": None,
        }[place]
        out[place] = Needle(place, planted, planted.lower(), offset)
    return out


def field_text(kind: str, size: int) -> str:
    """The field of `size` code points for `kind`, with its needles planted."""
    if kind not in KINDS:
        raise ValueError(f"unknown text kind {kind!r}")
    pool = _paragraph_pool(kind)
    rng = random.Random(_SEED[kind] + size)
    parts: list[str] = []
    length = 0
    while length < size:
        paragraph = pool[rng.randrange(_POOL_PARAGRAPHS)]
        parts.append(paragraph)
        length += len(paragraph)
    text = "".join(parts)[:size]
    planted = sorted(
        (n for n in needles(kind, size).values() if n.offset is not None),
        key=lambda n: n.offset or 0,
    )
    pieces, cursor = [], 0
    for needle in planted:
        assert needle.offset is not None
        assert needle.offset >= cursor, "needles overlap"
        pieces += [text[cursor : needle.offset], needle.planted]
        cursor = needle.offset + len(needle.planted)
    pieces.append(text[cursor:])
    return "".join(pieces)


def check_needles(kind: str, size: int, text: str) -> None:
    """The first folded occurrence of each query is where it was planted (absent: nowhere)."""
    folded = fold(text)
    for needle in needles(kind, size).values():
        found = folded.find(fold(needle.query))
        expected = -1 if needle.offset is None else needle.offset
        if found != expected:
            raise AssertionError(f"needle {needle.place!r} found at {found}, not {expected}")
