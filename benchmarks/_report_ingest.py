"""The report's section on ingestion at scale (`test_ingest_scale.py`): per database, the rate
of each step against raw inserts of the same rows and a plain table, with and without the
statistics upkeep, and the first step with and without the search index.

Cells are found by `extra_info` coordinates (`suite`, `backend`, `impl`); each measurement's
`steps` list holds the step figures.
"""

from __future__ import annotations

from typing import Any

from ._format import BACKEND_TITLES

__all__ = ["render"]

SUITE = "ingest-scale"


def _variants(data: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """backend -> variant -> steps."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info", {})
        if info.get("suite") == SUITE and info.get("steps"):
            found.setdefault(info["backend"], {})[info["impl"]] = info["steps"]
    return found


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _table(steps: list[dict[str, Any]], no_upkeep: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| step | records present | library rec/s | raw same rows rec/s | library / raw "
        "| plain table rec/s | library / plain | with index / without | rec/s, upkeep off |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, cell in enumerate(steps):
        off = _n(no_upkeep[n]["rate"]) if n < len(no_upkeep) else "-"
        lines.append(
            f"| {cell['step']} | {_n(cell['present'])} | {_n(cell['rate'])} "
            f"| {_n(cell['raw_rate'])} | {_x(cell['rate'] / cell['raw_rate'])} "
            f"| {_n(cell['plain_rate'])} | {_x(cell['rate'] / cell['plain_rate'])} "
            f"| {_x(cell['unindexed_seconds'] / cell['indexed_seconds'])} | {off} |"
        )
    return lines


def _summary(backend: str, variants: dict[str, list[dict[str, Any]]]) -> list[str]:
    steps = variants["library"]
    first, last = steps[0], steps[-1]
    library = sum(c["records"] for c in steps) / sum(c["seconds"] for c in steps)
    raw = sum(c["raw_records"] for c in steps) / sum(c["raw_seconds"] for c in steps)
    parts = [
        f"**{BACKEND_TITLES.get(backend, backend)}**: small records at {_x(library / raw)} of raw "
        f"inserts of the same rows over the run ({_n(library)} against {_n(raw)} rec/s; goal "
        f"at least 0.33x); with {_n(last['present'])} records present the step ran at "
        f"{_n(last['rate'])} rec/s against {_n(first['rate'])} into empty tables, a ratio "
        f"empty / full of {_x(first['rate'] / last['rate'])} (goal: at most 1.5x)"
    ]
    indexed = sum(c["indexed_seconds"] for c in steps)
    unindexed = sum(c["unindexed_seconds"] for c in steps)
    parts.append(
        f"; for raw inserts of the same rows the same ratio was "
        f"{_x(first['raw_rate'] / last['raw_rate'])} (the database's own share of a slowdown, "
        f"and the machine's load). With the search index, ingestion "
        f"ran at {_x(unindexed / indexed)} the speed without it (the samples of every step, back "
        f"to back; goal at least 0.5x)"
    )
    off = variants.get("no-upkeep")
    if off:
        parts.append(
            f"; with the statistics upkeep off, {_n(off[-1]['rate'])} rec/s with "
            f"{_n(off[-1]['present'])} present against {_n(off[0]['rate'])} into empty tables"
        )
    return ["".join(parts) + "."]


def render(data: dict[str, Any]) -> list[str]:
    found = _variants(data)
    if not any("library" in variants for variants in found.values()):
        return []
    lines = [
        "## Ingestion at scale (benchmarks/test_ingest_scale.py)",
        "",
        "Email-sized records (eleven fields, a body of 1,000-1,600 code points, five fields "
        "searchable) ingested by `upsert_records` in ten steps into one fresh database "
        "(autovacuum off). Per step: the library's rate with its statistics upkeep; raw "
        "inserts of the same rows (the write statements the library sent for one batch, "
        "recorded and replayed on the bare driver into the same database: records, fields, "
        "chunks and the search index's rows); the same sample as one row per email in a plain "
        "table; a sample through the library with and without the search index, back to back "
        "in two small databases; and, in a database of its own, the library with the upkeep "
        "switched off (Postgres only; stopped after a time budget).",
    ]
    for backend in ("sqlite", "postgres"):
        variants = found.get(backend, {})
        if "library" not in variants:
            continue
        lines += ["", f"### {BACKEND_TITLES[backend]}", "", *_summary(backend, variants), ""]
        lines += _table(variants["library"], variants.get("no-upkeep", []))
    return lines
