"""The search section of docs/benchmarks.md (benchmarks/test_search.py, issue 13,
docs/performance.md goal 6), from the same run as the rest: `q` with the index against the scan of
every chunk, the first page of a search over the mailbox, the index's size against its text, and
ingestion with the index against without. Cells are found by their `extra_info` coordinates (suites
``q-index``, ``search``, ``index-size``, ``ingest-index``; backend, impl, and for `q` the text kind,
size and position)."""

from __future__ import annotations

import itertools
from typing import Any

from ._format import BACKEND_TITLES, fmt_ratio, fmt_time, ratio, table, verdict

BACKENDS = tuple(BACKEND_TITLES.items())
PLACES = (("end", "match at the end"), ("absent", "absent"), ("start", "match at offset 100"))
TERMS = (("rare", "rare term"), ("common", "common term (every second record)"), ("absent", ""))
LATE_GOAL_S = 0.050
EARLY_GOAL_S = 0.001
PAGE_GOAL_S = 0.050
COMMON_GOAL_S = 0.150
INDEX_GOAL = 3.0
INGEST_GOAL = 0.5

Cell = dict[str, Any]
Cells = dict[tuple[str, ...], Cell]


def _cells(data: dict[str, Any]) -> Cells:
    """(suite, backend, kind, size, position, impl) -> the median and `extra_info` ("" where a
    suite has no such coordinate)."""
    found: Cells = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if info.get("suite") not in ("q-index", "search", "index-size", "ingest-index"):
            continue
        key = tuple(
            str(info.get(name, "")) for name in ("suite", "backend", "kind", "size", "position")
        )
        found[(*key, str(info["impl"]))] = {**info, "median": float(bench["stats"]["median"])}
    return found


def _median(cells: Cells, *key: str) -> float | None:
    cell = cells.get(key)
    return None if cell is None else float(cell["median"])


def _backends(cells: Cells) -> list[tuple[str, str]]:
    present = {key[1] for key in cells}
    return [(name, title) for name, title in BACKENDS if name in present]


def _q_section(cells: Cells) -> list[str]:

    backends = _backends({k: v for k, v in cells.items() if k[0] == "q-index"})
    datasets = sorted(
        {(k[2], k[3], int(v["chars"])) for k, v in cells.items() if k[0] == "q-index"},
        key=lambda d: (d[2], d[0]),
    )
    if not backends or not datasets:
        return []
    headers = ["text", "size", "q"]
    for _, title in backends:
        headers += [f"{title} index", f"{title} scan", "scan / index"]
    rows: list[list[str]] = []
    late: list[tuple[float, str, str, str]] = []
    early: list[tuple[float, str, str, str]] = []
    for kind, size, _ in datasets:
        for place, what in PLACES:
            row = [kind, size, what]
            for backend, _ in backends:
                index = _median(cells, "q-index", backend, kind, size, place, "library")
                scan = _median(cells, "q-index", backend, kind, size, place, "scan")
                row += [fmt_time(index), fmt_time(scan), fmt_ratio(ratio(scan, index))]
                if index is not None:
                    (early if place == "start" else late).append((index, backend, kind, size))
            rows.append(row)
    largest = datasets[-1][1]
    worst_late = max((c for c in late if c[3] == largest), default=None)
    worst_early = max(early, default=None)
    lines = [
        "### `q` with the index against the scan of every chunk",
        "",
        "`index` is `read_field_window(q=...)`: the first 32 chunks scanned, then the search "
        "index asked for the chunks after them, each candidate re-checked on its text. `scan` "
        "is the same match statement scanning every chunk (`use_index=False`): the store "
        "before the index, measured in the same run on the same engine.",
        "",
        *table(headers, rows, "lll" + "rrr" * len(backends)),
    ]
    if worst_late is not None:
        seconds, backend, kind, size = worst_late
        lines.append(
            f"- Late or absent at {largest} (goal ≤ {fmt_time(LATE_GOAL_S)}): "
            f"{verdict(seconds <= LATE_GOAL_S)}, worst {fmt_time(seconds)} ({backend}, {kind})."
        )
    if worst_early is not None:
        seconds, backend, kind, size = worst_early
        lines.append(
            f"- Early matches (goal < {fmt_time(EARLY_GOAL_S)}): "
            f"{verdict(seconds < EARLY_GOAL_S)}, worst {fmt_time(seconds)} "
            f"({backend}, {kind}, {size})."
        )
    return [*lines, ""]


def _search_section(cells: Cells) -> list[str]:

    found = {k: v for k, v in cells.items() if k[0] == "search"}
    backends = _backends(found)
    if not backends:
        return []
    sample = next(iter(found.values()))
    records, body = int(sample["records"]), int(sample.get("body_chars") or 0)
    rows = []
    for term, what in TERMS:
        rows.append(
            [
                what or "absent term (no hit)",
                *(fmt_time(_median(cells, "search", b, "", "", "", term)) for b, _ in backends),
            ]
        )
    lines = [
        f"### `search`, first page, over {records:,} email-sized records",
        "",
        f"Each record has a subject and a body of {body:,} code points of mixed text, both "
        "searchable. A page is 10 hits, each with its proven evidence (offsets, preview, "
        "digest and the read that shows it). The rare term is in one record of 20,000 and "
        "in the third-to-last one, so its page needs the index; the common term fills its "
        "page from the first records of the key order.",
        "",
        *table(
            ["first page, p50", *(title for _, title in backends)], rows, "l" + "r" * len(backends)
        ),
    ]
    for backend, title in backends:
        rare = _median(cells, "search", backend, "", "", "", "rare")
        common = _median(cells, "search", backend, "", "", "", "common")
        if rare is None or common is None:
            continue
        lines.append(
            f"- {title} (goal 14, relevance order, exact top 10): rare ≤ "
            f"{fmt_time(PAGE_GOAL_S)}: {verdict(rare <= PAGE_GOAL_S)}; common ≤ "
            f"{fmt_time(COMMON_GOAL_S)}: {verdict(common <= COMMON_GOAL_S)} "
            f"(common / rare {common / rare:.2f})."
        )
    return [*lines, "", *_reference_rows(cells, backends)]


def _reference_rows(cells: Cells, backends: list[tuple[str, str]]) -> list[str]:
    """The reference's design beside the store's relevance order (`_reference`)."""
    rows = []
    for term, what in TERMS[:2]:
        row = [what]
        for backend, _ in backends:
            store = _median(cells, "search", backend, "", "", "", term)
            ref = _median(cells, "search", backend, "", "", "", f"ref-{term}")
            row += [fmt_time(store), fmt_time(ref), fmt_ratio(ratio(store, ref))]
        rows.append(row)
    if all(len(set(row[1:])) == 1 for row in rows):  # no reference measured
        return []
    headers = ["first page, p50"]
    for _, title in backends:
        headers += [f"{title} store", f"{title} reference", "store / reference"]
    return [
        "The reference's design over the same mailbox in the same run: SQLite FTS5 `bm25()` "
        "over `unicode61` with 200 candidates, Postgres `ts_rank_cd` over a `simple` tsvector "
        "under GIN with 200 candidates (`benchmarks/_reference.py`). The store's page is the "
        "exact top 10 of every hit, with evidence; the reference's is the top of its "
        "candidates, ids only.",
        "",
        *table(headers, rows, "l" + "rrr" * len(backends)),
        "",
    ]


def _size_section(cells: Cells) -> list[str]:

    found = {k: v for k, v in cells.items() if k[0] == "index-size"}
    if not found:
        return []
    rows = []
    for backend, title in _backends(found):
        for what, name in (
            ("fields", "the matrix's big fields"),
            ("mailbox", "the mailbox"),
            ("reference", "the mailbox, reference design"),
        ):
            cell = found.get(("index-size", backend, "", "", "", what))
            if cell is None:
                continue
            index, text = int(cell["index_bytes"]), int(cell["text_bytes"])
            rows.append(
                [
                    title,
                    name,
                    f"{index / 1e6:,.1f}",
                    f"{text / 1e6:,.1f}",
                    f"{fmt_ratio(index / text)} ({verdict(index <= INDEX_GOAL * text)})",
                ]
            )
    return [
        "### Index size against the text it indexes",
        "",
        "SQLite: every page of the FTS5 tables and their side table (`dbstat`); Postgres: the "
        "GIN index. Text: the UTF-8 bytes of every stored chunk. Goal ≤ 3x.",
        "",
        *table(["database", "text", "index MB", "text MB", "index / text"], rows, "llrrr"),
    ]


def _ingest_section(cells: Cells) -> list[str]:

    found = {k: v for k, v in cells.items() if k[0] == "ingest-index"}
    if not found:
        return []
    rows = []
    designs = (("", ""), ("ref-", ", reference design"))
    for (backend, title), (prefix, design) in itertools.product(_backends(found), designs):
        with_index = found.get(("ingest-index", backend, "", "", "", f"{prefix}with-index"))
        without = found.get(("ingest-index", backend, "", "", "", f"{prefix}without-index"))
        if with_index is None or without is None:
            continue
        speed = ratio(without["median"], with_index["median"])
        rows.append(
            [
                f"{title}{design}",
                f"{int(with_index['records']):,}",
                fmt_time(with_index["median"]),
                fmt_time(without["median"]),
                f"{int(with_index['records']) / with_index['median']:,.0f}",
                f"{int(without['records']) / without['median']:,.0f}",
                f"{fmt_ratio(speed)} ({verdict(speed is not None and speed >= INGEST_GOAL)})",
            ]
        )
    return [
        "### Ingestion with the index against without",
        "",
        "Email-sized records per `upsert_records` batch into a fresh store, with the index "
        "against the same store without it (SQLite: the index statements and triggers off; "
        "Postgres: the GIN index dropped). Goal: speed with ≥ 0.5x the speed without. "
        "Relevance order adds no index of its own (it counts occurrences in the stored "
        "chunks). The reference design's rows: its table with its index (FTS5, GIN over a "
        "tsvector) against a plain table of the same rows, one transaction per batch.",
        "",
        *table(
            [
                "database",
                "batch",
                "with, p50",
                "without, p50",
                "with, records/s",
                "without, records/s",
                "with / without speed",
            ],
            rows,
            "lrrrrrr",
        ),
    ]


def render(data: dict[str, Any]) -> list[str]:
    cells = _cells(data)
    if not cells:
        return []
    return [
        "## Search and the search index (issue 13)",
        "",
        "From benchmarks/test_search.py, in this run, both databases side by side.",
        "",
        *_q_section(cells),
        *_search_section(cells),
        *_size_section(cells),
        *_ingest_section(cells),
    ]
