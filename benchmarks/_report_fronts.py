"""The fronts' section of docs/benchmarks.md (benchmarks/test_fronts.py; docs/performance.md goals 7
and 8): the async front against the raw async driver at 1, 4 and 16 tasks, and sync reads against
the raw floor, each ratio from cells of the same run found by their `extra_info` coordinates."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from ._format import BACKEND_TITLES, BACKENDS, fmt_ratio, fmt_time, ratio, table

ASYNC_GOAL = 1.5
SYNC_GOAL = 3.0

Cells = dict[tuple[Any, ...], dict[str, Any]]

_WHERE = {"async": "tasks", "processes": "processes", "threads": "threads"}
"""Each front's coordinate besides backend and impl (the sync front's is its read)."""


def _cells(data: dict[str, Any]) -> Cells:
    """The fronts suite's benchmarks by (front, backend, tasks or read, impl)."""
    cells: Cells = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if info.get("suite") != "fronts":
            continue
        where = info.get(_WHERE.get(str(info.get("front")), "read"))
        cells[(info["front"], info["backend"], where, info["impl"])] = bench
    return cells


def _median(cell: dict[str, Any] | None) -> float | None:
    return None if cell is None else float(cell["stats"]["median"])


def _reads_per_s(cell: dict[str, Any] | None) -> float | None:
    median = _median(cell)
    if cell is None or not median:
        return None
    return int(cell["extra_info"]["reads"]) / median


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _async_rows(cells: Cells) -> list[list[str]]:

    rows = []
    for backend in BACKENDS:
        tasks = sorted({key[2] for key in cells if key[:2] == ("async", backend)})
        for count in tasks:
            library = _reads_per_s(cells.get(("async", backend, count, "library")))
            raw = _reads_per_s(cells.get(("async", backend, count, "raw")))
            rows.append(
                [
                    BACKEND_TITLES[backend],
                    str(count),
                    _rate(library),
                    _rate(raw),
                    fmt_ratio(ratio(raw, library)),  # time per read: library / raw
                ]
            )
    return rows


def _growth(cells: Cells, backend: str, impl: str) -> str:
    """Reads/s at 1, 4, 16 tasks. A fall is named a fall unless the slower level's median round
    is within the interquartile range of either level's rounds of the faster one's: then it is
    flat, which is not growth either, and says so."""
    tasks = sorted({key[2] for key in cells if key[:2] == ("async", backend)})
    found = [cells.get(("async", backend, count, impl)) for count in tasks]
    known = [cell for cell in found if cell is not None]
    if not known or len(known) != len(found):
        return "n/a"
    shown = " → ".join(_rate(_reads_per_s(cell)) for cell in known)
    falls = [(a, b) for a, b in pairwise(known) if _stat(b, "median") > _stat(a, "median")]
    if not falls:
        return shown
    if all(_within_spread(a, b) for a, b in falls):
        return f"{shown} (flat: each fall within the rounds' spread)"
    return f"{shown} (falls)"


def _stat(cell: dict[str, Any], name: str) -> float:
    return float(cell["stats"][name])


def _within_spread(faster: dict[str, Any], slower: dict[str, Any]) -> bool:
    gap = _stat(slower, "median") - _stat(faster, "median")
    return gap <= max(_stat(faster, "iqr"), _stat(slower, "iqr"))


def _spread(cells: Cells, backend: str, front: str, impl: str) -> str:
    """Reads/s at each count of processes or threads, and the last against the first."""
    counts = sorted({key[2] for key in cells if key[:2] == (front, backend)})
    rates = [_reads_per_s(cells.get((front, backend, count, impl))) for count in counts]
    if not rates or None in rates:
        return "n/a"
    known = [rate for rate in rates if rate is not None]
    shown = " → ".join(_rate(rate) for rate in known)
    return f"{shown} ({known[-1] / known[0]:.2f}\N{MULTIPLICATION SIGN})"


def _sync_rows(cells: Cells) -> list[list[str]]:

    rows = []
    for backend in BACKENDS:
        reads = sorted({key[2] for key in cells if key[:2] == ("sync", backend)})
        for read in reads:
            library = _median(cells.get(("sync", backend, read, "library")))
            floor = _median(cells.get(("sync", backend, read, "floor")))
            rows.append(
                [
                    BACKEND_TITLES[backend],
                    str(read),
                    fmt_time(library),
                    fmt_time(floor),
                    fmt_ratio(ratio(library, floor)),
                ]
            )
    return rows


def render(data: dict[str, Any]) -> list[str]:

    cells = _cells(data)
    if not cells:
        return []
    lines = [
        "## The fronts around their SQL (docs/performance.md, goals 7 and 8)",
        "",
        "Reads run below SQLAlchemy on a kept connection (`_runtime`, Rule 6). **Async**: "
        "`AsyncStore.read_field_window` (a 4096-character window) against the very statement "
        "and parameters it sends, on the raw async driver (aiosqlite `execute_fetchall`; psycopg "
        "`AsyncConnection` in autocommit), one connection per task, the same reads split over "
        f"1, 4 and 16 concurrent tasks. Goal: library / raw ≤ {ASYNC_GOAL:g}x, and reads/s "
        "that grow with the tasks.",
        "",
    ]
    lines += table(
        ["database", "tasks", "library reads/s", "raw driver reads/s", "library / raw"],
        _async_rows(cells),
        "lrrrr",
    )
    lines += [
        "Reads/s from 1 → 4 → 16 tasks:",
        "",
        *[
            f"- {BACKEND_TITLES[backend]}: library {_growth(cells, backend, 'library')}; "
            f"raw {_growth(cells, backend, 'raw')}"
            for backend in BACKENDS
            if any(key[:2] == ("async", backend) for key in cells)
        ],
        "",
        "Where more reads/s come from: the 16 tasks of the last level in one process or split "
        "over two (an `AsyncStore` on each process's loop, `benchmarks/_processes.py`), and the "
        "raw sync driver running the same statement on 1 and on 2 threads of one process (a "
        "thread holds the interpreter lock for all but the database's own work):",
        "",
        *[
            f"- {BACKEND_TITLES[backend]}: library in 1 → 2 processes "
            f"{_spread(cells, backend, 'processes', 'library')}; raw driver on 1 → 2 threads "
            f"{_spread(cells, backend, 'threads', 'raw')}"
            for backend in BACKENDS
            if any(key[:2] == ("processes", backend) for key in cells)
        ],
        "",
        "**Sync**: `Store` reads against the raw floor (the captured statement replayed on a bare "
        "autocommit DBAPI connection, as the store runs its reads: no transaction). Goal: "
        f"library / floor ≤ {SYNC_GOAL:g}x.",
        "",
    ]
    lines += table(
        ["database", "read", "library p50", "raw floor p50", "library / floor"],
        _sync_rows(cells),
        "llrrr",
    )
    return lines
