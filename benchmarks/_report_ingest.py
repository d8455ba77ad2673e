"""The report's section on ingestion at scale (`test_ingest_scale.py`): per database, the rate
at each point against an empty database at the same moment, raw inserts of the same rows and a
plain table, with and without the search index, and with the statistics upkeep off.

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


def _table(steps: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| step | records present | library rec/s | into empty rec/s | empty / full "
        "| raw same rows rec/s | library / raw | plain table rec/s | library / plain "
        "| with index / without | then filled |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :--- |",
    ]
    for cell in steps:
        fill = f"{_n(cell['fill_rate'])} rec/s ({cell['fill']})" if cell.get("fill") else "-"
        lines.append(
            f"| {cell['step']} | {_n(cell['present'])} | {_n(cell['rate'])} "
            f"| {_n(cell['empty_rate'])} | {_x(cell['empty_rate'] / cell['rate'])} "
            f"| {_n(cell['raw_rate'])} | {_x(cell['rate'] / cell['raw_rate'])} "
            f"| {_n(cell['plain_rate'])} | {_x(cell['rate'] / cell['plain_rate'])} "
            f"| {_x(cell['unindexed_seconds'] / cell['indexed_seconds'])} | {fill} |"
        )
    return lines


def _no_upkeep_table(steps: list[dict[str, Any]]) -> list[str]:
    lines = ["| records present | rec/s, upkeep off |", "| ---: | ---: |"]
    lines += [f"| {_n(cell['present'])} | {_n(cell['rate'])} |" for cell in steps]
    return lines


def _summary(backend: str, variants: dict[str, list[dict[str, Any]]]) -> list[str]:
    steps = variants["library"]
    first, last = steps[0], steps[-1]
    library = sum(len(c["library_s"]) for c in steps) * first["records"]
    library_rate = library / sum(sum(c["library_s"]) for c in steps)
    raw_rate = library / sum(sum(c["raw_s"]) for c in steps)
    parts = [
        f"**{BACKEND_TITLES.get(backend, backend)}**: small records at "
        f"{_x(library_rate / raw_rate)} of raw inserts of the same rows over the run "
        f"({_n(library_rate)} against {_n(raw_rate)} rec/s; goal at least 0.33x); with "
        f"{_n(last['present'])} records present the library ran at {_n(last['rate'])} rec/s "
        f"against {_n(last['empty_rate'])} into an empty database at the same moment, a ratio "
        f"empty / full of {_x(last['empty_rate'] / last['rate'])} (goal: at most 1.5x), and "
        f"{_x(first['rate'] / last['rate'])} against the first step's {_n(first['rate'])} "
        f"rec/s (the machine's load changing in between)"
    ]
    indexed = sum(c["indexed_seconds"] for c in steps)
    unindexed = sum(c["unindexed_seconds"] for c in steps)
    parts.append(
        f"; for raw inserts of the same rows, first step / last was "
        f"{_x(first['raw_rate'] / last['raw_rate'])} (the database's own share of a slowdown, "
        f"and the load). With the search index, ingestion ran at {_x(unindexed / indexed)} the "
        f"speed without it (the samples of every step, back to back; goal at least 0.5x)"
    )
    off = variants.get("no-upkeep")
    if off:
        parts.append(
            f"; with the statistics upkeep off, {_n(off[-1]['rate'])} rec/s with "
            f"{_n(off[-1]['present'])} present against {_n(off[0]['rate'])} into empty tables"
        )
    return ["".join(parts) + "."]


def _rounds(data: dict[str, Any]) -> str:
    """How many rounds each point's medians were taken over, as the run recorded it."""
    counts = sorted(
        {
            int(bench["extra_info"]["rounds"])
            for bench in data.get("benchmarks", [])
            if bench.get("extra_info", {}).get("suite") == SUITE and "rounds" in bench["extra_info"]
        }
    )
    last = sorted(
        {
            int(bench["extra_info"]["last_rounds"])
            for bench in data.get("benchmarks", [])
            if bench.get("extra_info", {}).get("suite") == SUITE
            and "last_rounds" in bench["extra_info"]
        }
    )
    at_last = " or ".join(f"{count:,}" for count in last)
    return (" or ".join(f"{count:,}" for count in counts) or "some") + (
        f" ({at_last} at the last point)" if at_last else ""
    )


def render(data: dict[str, Any]) -> list[str]:
    found = _variants(data)
    if not any("library" in variants for variants in found.values()):
        return []
    lines = [
        "## Ingestion at scale (benchmarks/test_ingest_scale.py)",
        "",
        "Email-sized records (eleven fields, a body of 1,000-1,600 code points, five fields "
        "searchable) in one fresh database (autovacuum off), measured at each step from "
        "empty to the full count: the first step's records go through `upsert_records` (its "
        "rate is the first 'then filled'), later steps copy those rows inside the database "
        "(records, fields, chunks and the search index's rows, as the library writes them), "
        "about twice as fast as the library: the copies repeat the first step's values under "
        "new record ids. At each point, after a warm-up batch (on Postgres it runs the "
        f"statistics upkeep the fill made due), {_rounds(data)} rounds of: a batch through "
        "the library into the big database; "
        "the same through the library into a fresh empty database (the 'into empty' rate, "
        "taken under the same load); the write statements of that batch replayed on the bare "
        "driver into the big database (raw inserts of the same rows: records, fields, chunks "
        "and the search index's rows); a batch through the library into a fresh database "
        "without the search index; and the batch as one row per email in a plain table. "
        "Medians of the rounds. In a database of its own, the library with the upkeep "
        "switched off (Postgres only; ingested through the library in steps, stopped after a "
        "time budget).",
    ]
    for backend in ("sqlite", "postgres"):
        variants = found.get(backend, {})
        if "library" not in variants:
            continue
        lines += ["", f"### {BACKEND_TITLES[backend]}", "", *_summary(backend, variants), ""]
        lines += _table(variants["library"])
        if variants.get("no-upkeep"):
            lines += ["", *_no_upkeep_table(variants["no-upkeep"])]
    return lines
