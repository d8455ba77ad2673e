"""The wide-record section of docs/benchmarks.md (benchmarks/test_wide.py): `read_record` of
records of many keys, its first page and every page, beside the raw floor and the reference's
JSON design measured in the same run. Cells are found by their `extra_info` coordinates
(suite ``wide``, backend, op, keys, impl)."""

from __future__ import annotations

from typing import Any

from ._format import BACKEND_TITLES, fmt_ratio, fmt_time, ratio, table

BACKENDS = tuple(BACKEND_TITLES.items())
BEFORE_KEYS = 10_000
BEFORE_SECONDS = 0.061
"""`read_record` of a 10,000-key record before the field budget: 61 ms, 7.7 MiB peak, every
field's preview in one answer (CHANGELOG.md, session 3; another run)."""

Cell = dict[str, Any]


def _cells(data: dict[str, Any]) -> dict[tuple[str, str, int, str], Cell]:
    """(backend, op, keys, impl) -> the benchmark's median and `extra_info`."""
    found: dict[tuple[str, str, int, str], Cell] = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if info.get("suite") != "wide":
            continue
        key = (info["backend"], info["op"], int(info["keys"]), info["impl"])
        found[key] = {**info, "median": float(bench["stats"]["median"])}
    return found


def _size(count: object) -> str:
    if not isinstance(count, int | float):
        return "n/a"
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def render(data: dict[str, Any]) -> list[str]:

    cells = _cells(data)
    if not cells:
        return []
    widths = sorted({keys for _, _, keys, _ in cells})

    def median(backend: str, op: str, keys: int, impl: str) -> float | None:
        cell = cells.get((backend, op, keys, impl))
        return None if cell is None else float(cell["median"])

    def info(backend: str, op: str, keys: int, impl: str, name: str) -> object:
        return (cells.get((backend, op, keys, impl)) or {}).get(name)

    lines = [
        "## Wide records: `read_record` by width (issue 14)",
        "",
        "A record of N short string fields (plus its id). The library answers one bounded page "
        "(at most 64 fields, 16,384 code points of values, 32,768 with naming) and `next` for "
        "the rest. Beside it, in the same run: the raw floor (the library's own statements "
        "replayed on a bare DBAPI connection, one transaction per page), and the reference's "
        "design, the whole record as one JSON document (jsonb on Postgres), read either by "
        "pages in SQL (`json_each` / `jsonb_each_text`, 64 keys after the last, values cut to "
        "the preview) or whole, every value previewed: what the reference serves, and what "
        "`read_record` did before its budget. p50; bytes are the page's JSON in UTF-8.",
        "",
    ]
    for backend, title in BACKENDS:
        if not any(b == backend for b, _, _, _ in cells):
            continue
        first = []
        for keys in widths:
            lib = median(backend, "first-page", keys, "library")
            floor = median(backend, "first-page", keys, "floor")
            paged = median(backend, "first-page", keys, "reference-page")
            whole = median(backend, "first-page", keys, "reference-whole")
            first.append(
                [
                    f"{keys:,}",
                    fmt_time(lib),
                    fmt_time(floor),
                    fmt_ratio(ratio(lib, floor)),
                    fmt_time(paged),
                    fmt_time(whole),
                    fmt_ratio(ratio(whole, lib)),
                    _size(info(backend, "first-page", keys, "library", "page_bytes")),
                    _size(info(backend, "first-page", keys, "reference-whole", "page_bytes")),
                    _size(info(backend, "first-page", keys, "library", "peak_bytes")),
                ]
            )
        lines += [f"### {title}: first page", ""]
        lines += table(
            [
                "keys",
                "library",
                "raw floor",
                "library / floor",
                "reference, paged",
                "reference, whole",
                "whole / library",
                "page bytes",
                "whole bytes",
                "library peak (Python)",
            ],
            first,
            "lrrrrrrrrr",
        )
        every = []
        for keys in widths:
            lib = median(backend, "all-pages", keys, "library")
            floor = median(backend, "all-pages", keys, "floor")
            every.append(
                [
                    f"{keys:,}",
                    str(info(backend, "all-pages", keys, "library", "pages") or "n/a"),
                    fmt_time(lib),
                    fmt_time(floor),
                    fmt_ratio(ratio(lib, floor)),
                    fmt_time(median(backend, "all-pages", keys, "reference-page")),
                    fmt_time(median(backend, "all-pages", keys, "reference-whole")),
                    _size(info(backend, "all-pages", keys, "library", "max_page_bytes")),
                ]
            )
        lines += [f"### {title}: every page, walked by `next`", ""]
        lines += table(
            [
                "keys",
                "pages",
                "library",
                "raw floor",
                "library / floor",
                "reference, paged",
                "reference, whole",
                "largest page",
            ],
            every,
            "lrrrrrrr",
        )
        now = median(backend, "first-page", BEFORE_KEYS, "library")
        if now is not None:
            lines += [
                f"Before the field budget, a {BEFORE_KEYS:,}-key record took "
                f"{fmt_time(BEFORE_SECONDS)} and 7.7 MiB in one unbounded answer (another run); "
                f"its first page now takes {fmt_time(now)} "
                f"({fmt_ratio(ratio(BEFORE_SECONDS, now))} less).",
                "",
            ]
    return lines
