"""Where the report's generated blocks go in docs/benchmarks.md, and what stays as people wrote it.

The document holds two kinds of text: blocks the report renders from a run, and everything else
(dated sections of figures and explanations written by hand, and the blocks other benchmarks
write between markers of their own: server load, search quality, read audit, datasets).

Rules:
1. The report owns blocks, never the document. Each part it renders is written between two
   lines, `<!-- report-NAME:start -->` and `<!-- report-NAME:end -->` (`start`, `end`; a marker
   is a whole line, so prose may quote one), and a new run replaces the text from a block's start
   marker to its end marker, both included. Every byte outside the report's blocks is kept, in
   place.
2. A block the document lacks (a section added to the report) goes right after the end marker
   of the block rendered before it, a blank line apart; if it comes before every block present,
   right before the first of them. Blocks present are replaced where they stand, in whatever
   order the document holds them. A document that is absent or blank becomes the blocks in
   their order, a blank line apart, with a final newline.
3. A block is written even when the run holds none of its cells: its markers alone, nothing
   between, so the next run fills it in place. A block's text is the rendered lines without
   leading or trailing blank lines.
4. Refused (`MarkerError`), so that nothing is written: a document with text but none of the
   report's blocks (its generated part cannot be told from what people wrote), and markers that
   do not pair up (a block's start or end twice, an end without its start before it, a start
   before the previous block's end). Guessing there would drop someone's text or duplicate a
   generated section.
5. A `report-` block the report no longer renders (a section renamed or removed) is kept like
   any text outside the report's blocks, and named in `Spliced.stale` for the caller to report.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MarkerError", "Spliced", "check", "end", "splice", "start"]

_MARKER = re.compile(r"^<!-- report-([a-z0-9][a-z0-9-]*):(start|end) -->$", re.MULTILINE)


class MarkerError(ValueError):
    """The document's report markers cannot be trusted (Rule 4)."""


@dataclass(frozen=True, slots=True)
class Spliced:
    """The new document, and the `report-` blocks in it that the report did not render."""

    text: str
    stale: tuple[str, ...]


def start(name: str) -> str:
    return f"<!-- report-{name}:start -->"


def end(name: str) -> str:
    return f"<!-- report-{name}:end -->"


def _spans(document: str) -> dict[str, tuple[int, int]]:
    """Each `report-` block of `document`: its name -> (offset of its start marker, offset just
    after its end marker). Raises `MarkerError` for markers that do not pair up."""
    spans: dict[str, tuple[int, int]] = {}
    opened: tuple[str, int] | None = None
    for marker in _MARKER.finditer(document):
        name, edge = marker.groups()
        if edge == "start":
            if opened is not None:
                raise MarkerError(f"{start(name)} before {end(opened[0])}")
            if name in spans:
                raise MarkerError(f"block report-{name} twice")
            opened = (name, marker.start())
        else:
            if opened is None or opened[0] != name:
                raise MarkerError(f"{end(name)} without {start(name)} before it")
            spans[name] = (opened[1], marker.end())
            opened = None
    if opened is not None:
        raise MarkerError(f"{start(opened[0])} without {end(opened[0])}")
    return spans


def check(document: str, names: Sequence[str]) -> dict[str, tuple[int, int]]:
    """The blocks of `document` (see `_spans`) if the blocks `names` can be written into it;
    raises `MarkerError` otherwise (Rule 4)."""
    spans = _spans(document)
    if document.strip() and not spans.keys() & set(names):
        raise MarkerError(
            "none of the report's blocks is marked ("
            + ", ".join(start(name) for name in names)
            + "); mark its generated part with them, or remove the file"
        )
    return spans


def _block(name: str, body: str) -> str:
    body = body.strip()
    return f"{start(name)}\n{body}\n{end(name)}" if body else f"{start(name)}\n{end(name)}"


def splice(document: str, blocks: Sequence[tuple[str, str]]) -> Spliced:
    """`document` with each of `blocks` (name, rendered text) written in (Rules 1-3)."""
    names = [name for name, _ in blocks]
    if len(set(names)) != len(names):
        raise ValueError(f"a block rendered twice: {names}")
    spans = check(document, names)
    rendered = {name: _block(name, body) for name, body in blocks}
    if not document.strip():
        return Spliced("\n\n".join(rendered.values()) + "\n", ())
    stale = tuple(name for name in spans if name not in rendered)

    # Rule 2: each missing block hangs on the block rendered before it, or on the first present.
    after: dict[str, list[str]] = {}
    before: dict[str, list[str]] = {}
    anchor: str | None = None
    waiting: list[str] = []  # missing blocks before any present one
    for name in names:
        if name in spans:
            if anchor is None:
                before[name] = waiting
            anchor = name
        elif anchor is None:
            waiting.append(rendered[name])
        else:
            after.setdefault(anchor, []).append(rendered[name])

    pieces: list[str] = []
    cursor = 0
    for name in sorted(rendered.keys() & spans.keys(), key=lambda name: spans[name][0]):
        first, last = spans[name]
        pieces.append(document[cursor:first])
        pieces += [block + "\n\n" for block in before.get(name, [])]
        pieces.append(rendered[name])
        pieces += ["\n\n" + block for block in after.get(name, [])]
        cursor = last
    pieces.append(document[cursor:])
    return Spliced("".join(pieces), stale)
