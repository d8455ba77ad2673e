"""The fronts' section of docs/benchmarks.md (benchmarks/test_fronts.py; goals 7 and 8): the
async front against the raw async driver at 1, 4 and 16 tasks, and sync reads against the raw
floor, each ratio from cells of the same run found by their `extra_info` coordinates."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from ._format import BACKEND_TITLES, BACKENDS, fmt_ratio, fmt_time, ratio, table

ASYNC_GOAL = 1.5
SYNC_GOAL = 3.0

Cells = dict[tuple[Any, ...], dict[str, Any]]


def _cells(data: dict[str, Any]) -> Cells:
    """The fronts suite's benchmarks by (front, backend, tasks or read, impl)."""
    cells: Cells = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if info.get("suite") != "fronts":
            continue
        where = info.get("tasks") if info.get("front") == "async" else info.get("read")
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
    tasks = sorted({key[2] for key in cells if key[:2] == ("async", backend)})
    rates = [_reads_per_s(cells.get(("async", backend, count, impl))) for count in tasks]
    known = [rate for rate in rates if rate is not None]
    if not known or len(known) != len(rates):
        return "n/a"
    grows = all(b >= a for a, b in pairwise(known))
    return " → ".join(_rate(rate) for rate in known) + ("" if grows else " (falls)")


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
        "## The fronts around their SQL (goals 7 and 8)",
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
