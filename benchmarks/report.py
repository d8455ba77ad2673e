"""Render a pytest-benchmark JSON run into docs/benchmarks.md and one PNG plot per database.

    python -m benchmarks.report RUN.json [MORE.json ...] [--out DIR]

Every number comes from RUN.json: medians (p50) per case, and ratios between designs measured
side by side in one run. Several files are merged (`merge_runs`): a run made apart, such as the
hour-long ingestion to 1,000,000 records, joins the rest, and the report names every run.
Cases are found by their `extra_info` coordinates (see `_measure`), never by parsing names.

The report writes blocks into DIR/benchmarks.md, never the whole file (`_report_document`,
Rules 1-5): the size matrix (block `matrix`) and each of `SECTIONS` (block of its name) between
`<!-- report-NAME:start -->` and `<!-- report-NAME:end -->` lines, replaced in place by the next
run; every byte outside them (sections of figures and analysis written by hand, the blocks of
`serve_load`, `audit_serve`, `quality` and the datasets) is kept. A file with text but none of
the report's markers, or with markers that do not pair up, is refused before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from . import _report_fronts, _report_ingest, _report_search, _report_wide
from ._format import (
    BACKEND_TITLES,
    BACKENDS,
    fmt_ratio,
    fmt_tick,
    fmt_time,
    ratio,
    table,
    verdict,
)
from ._report_document import MarkerError, check, splice

KINDS = ("ascii", "mixed")
POSITIONS = ("start", "middle", "end")
NEEDLES = ("start", "boundary", "end", "absent")
MB = 1_000_000

Key = tuple[str, ...]

SECTIONS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "wide": _report_wide.render,
    "fronts": _report_fronts.render,
    "search": _report_search.render,
    "ingest": _report_ingest.render,
}
"""The report's further sections, rendered after the size matrix in this order, each into the
block of its name (`report-wide`, ...): each takes the pytest-benchmark JSON of the run and
returns its markdown lines, finding its cells by their `extra_info` coordinates (one module per
topic, `benchmarks/_report_<topic>.py`); no lines leave its block empty until a run has them."""

BLOCKS = ("matrix", *SECTIONS)
"""The report's blocks in docs/benchmarks.md, in their order: the size matrix, then `SECTIONS`."""


@dataclass(frozen=True, slots=True)
class Case:
    suite: str
    backend: str
    kind: str
    size: str
    chars: int
    position: str
    impl: str
    median: float
    rounds: int
    info: dict[str, Any]


_MATRIX_KEYS = frozenset({"suite", "backend", "kind", "size", "chars", "impl"})


class Run:
    """The cases of one run, addressable by (suite, backend, kind, size, position, impl)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.cases: dict[Key, Case] = {}
        for bench in data.get("benchmarks", []):
            info = bench.get("extra_info") or {}
            if not info.keys() >= _MATRIX_KEYS:
                continue  # not a cell of the size matrix (a section of `SECTIONS` reads it)
            case = Case(
                info["suite"],
                info["backend"],
                info["kind"],
                info["size"],
                int(info["chars"]),
                info.get("position", ""),
                info["impl"],
                float(bench["stats"]["median"]),
                int(bench["stats"]["rounds"]),
                info,
            )
            self.cases[self._key(case)] = case

    @staticmethod
    def _key(case: Case) -> Key:
        return (case.suite, case.backend, case.kind, case.size, case.position, case.impl)

    def get(self, *key: str) -> Case | None:
        """The case at (suite, backend, kind, size, position, impl); position "" if none."""
        return self.cases.get(key)

    def median(self, *key: str) -> float | None:
        case = self.get(*key)
        return case.median if case else None

    def sizes(self, suite: str, backend: str | None = None) -> list[tuple[str, int]]:
        found = {
            (c.size, c.chars)
            for c in self.cases.values()
            if c.suite == suite and (backend is None or c.backend == backend)
        }
        return sorted(found, key=lambda item: item[1])

    def backends(self) -> list[str]:
        present = {c.backend for c in self.cases.values()}
        return [b for b in BACKENDS if b in present]


# ------------------------------------------------------------------------ formatting


# ------------------------------------------------------------------------ sections

BASELINE_HEADERS = ("naive", "naive / library", "reference", "reference / library")
LIBRARY_HEADERS = ("library", "raw floor", "library / floor", *BASELINE_HEADERS)


def baseline_cells(m: dict[str, float | None], library: float | None) -> list[str]:
    """The naive peer's and the reference design's p50, each with its ratio to the library's."""
    cells = []
    for impl in ("naive", "reference"):
        cells += [fmt_time(m[impl]), fmt_ratio(ratio(m[impl], library))]
    return cells


def window_rows(run: Run, backend: str) -> list[list[str]]:
    rows = []
    for kind in KINDS:
        for size, _ in run.sizes("window", backend):
            for position in POSITIONS:
                m = {
                    impl: run.median("window", backend, kind, size, position, impl)
                    for impl in (
                        "library-offset",
                        "library-cursor",
                        "floor-offset",
                        "floor-cursor",
                        "naive",
                        "reference",
                    )
                }
                if m["library-offset"] is None:
                    continue
                lib = m["library-offset"]
                rows.append(
                    [
                        kind,
                        size,
                        position,
                        fmt_time(lib),
                        fmt_time(m["library-cursor"]),
                        fmt_time(m["floor-offset"]),
                        fmt_ratio(ratio(lib, m["floor-offset"])),
                        fmt_ratio(ratio(m["library-cursor"], m["floor-cursor"])),
                        *baseline_cells(m, lib),
                    ]
                )
    return rows


WINDOW_HEADERS = (
    "text",
    "size",
    "window at",
    "library (offset)",
    "library (cursor)",
    "raw floor",
    "offset / floor",
    "cursor / floor",
    *BASELINE_HEADERS,
)


def library_rows(
    run: Run, backend: str, suite: str, places: Sequence[str] = ("",)
) -> list[list[str]]:
    """A row per text kind, size and place (a match's needle; none for a record, `("",)`): the
    library's p50 against the raw floor, the naive peer and the reference design
    (`LIBRARY_HEADERS`)."""
    rows = []
    for kind in KINDS:
        for size, _ in run.sizes(suite, backend):
            for place in places:
                m = {
                    impl: run.median(suite, backend, kind, size, place, impl)
                    for impl in ("library", "floor", "naive", "reference")
                }
                lib = m["library"]
                if lib is None:
                    continue
                rows.append(
                    [
                        kind,
                        size,
                        *([place] if place else []),
                        fmt_time(lib),
                        fmt_time(m["floor"]),
                        fmt_ratio(ratio(lib, m["floor"])),
                        *baseline_cells(m, lib),
                    ]
                )
    return rows


MATCH_HEADERS = ("text", "size", "needle", *LIBRARY_HEADERS)
RECORD_HEADERS = ("text", "size", *LIBRARY_HEADERS)


def throughput(case: Case | None) -> tuple[float, float] | None:
    """(MB/s of UTF-8, records/s) of an ingestion case."""
    if case is None or case.median <= 0:
        return None
    return case.info["utf8_bytes"] / MB / case.median, case.info["records"] / case.median


def ingest_rows(run: Run, backend: str) -> list[list[str]]:
    rows = []
    for kind in KINDS:
        for size, _ in run.sizes("ingest-field", backend):
            lib = run.get("ingest-field", backend, kind, size, "", "library")
            raw = run.get("ingest-field", backend, kind, size, "", "raw-insert")
            lib_tp, raw_tp = throughput(lib), throughput(raw)
            if lib is None or lib_tp is None:
                continue
            rows.append(
                [
                    kind,
                    size,
                    f"{lib.info['utf8_bytes'] / MB:,.2f}",
                    fmt_time(lib.median),
                    f"{lib_tp[0]:.1f}",
                    f"{raw_tp[0]:.1f}" if raw_tp else "n/a",
                    fmt_ratio(ratio(raw_tp[0], lib_tp[0])) if raw_tp else "n/a",
                    str(lib.rounds),
                ]
            )
    return rows


INGEST_HEADERS = (
    "text",
    "field size",
    "UTF-8 MB",
    "library p50",
    "library MB/s",
    "raw INSERT MB/s",
    "raw / library",
    "rounds",
)


def small_rows(run: Run, backend: str) -> list[list[str]]:
    rows = []
    for case in sorted(run.cases.values(), key=lambda c: c.kind):
        if case.suite != "ingest-small" or case.backend != backend:
            continue
        tp = throughput(case)
        assert tp is not None
        rows.append(
            [
                case.kind,
                f"{case.info['records']:,} x {case.chars // case.info['records']:,} chars",
                fmt_time(case.median),
                f"{tp[1]:,.0f}",
                f"{tp[0]:.2f}",
            ]
        )
    return rows


# ------------------------------------------------------------------------ targets


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    goal: str
    measure: Callable[[Run, str], tuple[str, bool | None]]


def _largest_smallest(run: Run, suite: str, backend: str) -> tuple[str, str] | None:
    sizes = run.sizes(suite, backend)
    if len(sizes) < 2:
        return None
    return sizes[-1][0], sizes[0][0]


def flat(run: Run, backend: str) -> tuple[str, bool | None]:
    ends = _largest_smallest(run, "window", backend)
    if ends is None:
        return "needs two sizes", None
    big, small = ends
    worst: tuple[float, str] = (0.0, "")
    for impl in ("library-offset", "library-cursor"):
        for kind in KINDS:
            for position in POSITIONS:
                value = ratio(
                    run.median("window", backend, kind, big, position, impl),
                    run.median("window", backend, kind, small, position, impl),
                )
                if value is not None and value > worst[0]:
                    worst = (value, f"{impl.split('-')[1]}, {kind}, {position}")
    return f"worst {big}/{small}: {fmt_ratio(worst[0])} ({worst[1]})", worst[0] <= 1.5


def near_floor(run: Run, backend: str) -> tuple[str, bool | None]:
    values = []
    for case in run.cases.values():
        if case.suite == "window" and case.backend == backend and case.impl.startswith("library"):
            floor = run.median(
                "window",
                backend,
                case.kind,
                case.size,
                case.position,
                case.impl.replace("library", "floor"),
            )
            value = ratio(case.median, floor)
            if value is not None:
                values.append(value)
    if not values:
        return "no data", None
    values.sort()
    median = values[len(values) // 2]
    return f"median {fmt_ratio(median)}, worst {fmt_ratio(values[-1])}", values[-1] <= 3


def against(baseline: str) -> Callable[[Run, str], tuple[str, bool | None]]:
    def check(run: Run, backend: str) -> tuple[str, bool | None]:
        sizes = run.sizes("window", backend)
        if not sizes:
            return "no data", None
        big = sizes[-1][0]
        values = []
        for kind in KINDS:
            for position in POSITIONS:
                value = ratio(
                    run.median("window", backend, kind, big, position, baseline),
                    run.median("window", backend, kind, big, position, "library-offset"),
                )
                if value is not None:
                    values.append((value, f"{kind}, {position}"))
        if not values:
            return "no data", None
        low = min(values)
        ok = low[0] >= 1000 if big == "100m" else None
        return f"at {big}: least {fmt_ratio(low[0])} ({low[1]})", ok

    return check


def early_match(run: Run, backend: str) -> tuple[str, bool | None]:
    values = [
        c.median
        for c in run.cases.values()
        if c.suite == "match"
        and c.backend == backend
        and c.position == "start"
        and c.impl == "library"
    ]
    if not values:
        return "no data", None
    return f"worst p50 {fmt_time(max(values))}", max(values) < 1e-3


def late_match(run: Run, backend: str) -> tuple[str, bool | None]:
    sizes = run.sizes("match", backend)
    if not sizes:
        return "no data", None
    big = sizes[-1][0]
    values = [
        (c.median, f"{c.kind}, {c.position}")
        for c in run.cases.values()
        if c.suite == "match"
        and c.backend == backend
        and c.size == big
        and c.position in ("end", "absent")
        and c.impl == "library"
    ]
    worst = max(values)
    ok = worst[0] <= 0.6 if big == "100m" else None
    return f"at {big}: worst {fmt_time(worst[0])} ({worst[1]})", ok


TARGETS = (
    Target("flat", "window p50 at the largest field within 1.5x of the smallest", flat),
    Target("floor", "library window within 3x of the raw-SQL floor", near_floor),
    Target("naive", "≥ 1000x faster than the naive peer at 100 MB", against("naive")),
    Target("reference", "≥ 1000x faster than the reference design at 100 MB", against("reference")),
    Target("early match", "a match near the start in < 1 ms", early_match),
    Target("late match", "a match at the end of 100 MB ≈ one chunk scan (≤ 0.6 s)", late_match),
)


# ------------------------------------------------------------------------ plots


def plot(run: Run, backend: str, path: Path) -> None:
    lines = (
        ("library-offset", "library, offset", "C0", "-"),
        ("library-cursor", "library, cursor", "C2", "-"),
        ("floor-offset", "raw-SQL floor (same statements)", "C7", "--"),
        ("naive", "naive peer (whole value, slice in Python)", "C3", "-"),
        ("reference", "reference design (JSON document + substr)", "C1", "-"),
    )
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharey=True)
    for axis, kind in zip(axes, KINDS, strict=True):
        sizes = run.sizes("window", backend)
        for impl, title, colour, style in lines:
            xs, ys = [], []
            for size, chars in sizes:
                values = [
                    run.median("window", backend, kind, size, position, impl)
                    for position in POSITIONS
                ]
                present = [v for v in values if v is not None]
                if present:
                    xs.append(chars)
                    ys.append(max(present))
            if xs:
                axis.plot(xs, ys, style, color=colour, marker="o", label=title)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: fmt_tick(value)))
        axis.set_title(f"{kind} text")
        axis.set_xlabel("field size (code points)")
        axis.grid(True, which="both", alpha=0.3)
        axis.set_xticks([chars for _, chars in sizes], [size for size, _ in sizes])
    axes[0].set_ylabel("p50 latency (worst of start / middle / end)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle(f"{BACKEND_TITLES[backend]}: reading a 4096-character window")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------ the document


def machine_line(data: dict[str, Any]) -> str:
    parts = data.get("parts") or [data]
    lines = (
        [_part_line(parts[0], "Run")]
        if len(parts) == 1
        else [
            f"Merged from {len(parts)} runs (a later run's cell replaces an earlier one's):",
            *(_part_line(part, f"({n}) run") for n, part in enumerate(parts, 1)),
        ]
    )
    return " ".join(lines) + (
        " A load above the CPU count means other processes competed for the CPUs."
        if any(part.get("machine_info", {}).get("load_average") for part in parts)
        else ""
    )


def _part_line(data: dict[str, Any], what: str) -> str:
    machine = data.get("machine_info", {})
    cpu = machine.get("cpu", {})
    commit = data.get("commit_info", {})
    dirty = " (with uncommitted changes)" if commit.get("dirty") else ""
    cells = f", {len(data.get('benchmarks', []))} cells" if "parts" not in data else ""
    line = (
        f"{what} {data.get('datetime', '?')} on "
        f"{cpu.get('brand_raw', machine.get('processor', '?'))}"
        f" ({cpu.get('count', '?')} CPUs), Python {machine.get('python_version', '?')}, "
        f"commit `{str(commit.get('id', '?'))[:10]}`{dirty} at its start{cells}."
    )
    load = machine.get("load_average")
    if load:
        line += (
            " Load average at its end (1, 5, 15 min): "
            + ", ".join(f"{value:.1f}" for value in load)
            + "."
        )
    return line


def merge_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several pytest-benchmark runs as one (e.g. a long ingestion run made apart from the
    rest): their cells together, a later run's cell replacing an earlier one of the same name,
    and each run's own details kept in `parts` for the machine line."""
    if len(runs) == 1:
        return runs[0]
    cells: dict[str, dict[str, Any]] = {}
    for run in runs:
        for bench in run.get("benchmarks", []):
            cells[bench["fullname"]] = bench
    return {**runs[-1], "benchmarks": list(cells.values()), "parts": list(runs)}


def render_matrix(run: Run, out: Path, note: str = "") -> list[str]:
    """The block `matrix`: the document's title, the run, the designs compared, the targets and
    the size matrix per database (its plots written into `out`)."""
    lines = [
        "# Benchmarks",
        "",
        "Each block between a `<!-- report-NAME:start -->` and its `<!-- report-NAME:end -->` "
        "line (in this file's source) is generated by `benchmarks/run` from pytest-benchmark "
        "JSON and rewritten by the next run: do not edit inside one. Everything outside them is "
        "kept as written: the dated sections of figures and explanations below, and the blocks "
        "the other benchmarks write.",
        machine_line(run.data),
        *([note] if note else []),
        "",
        "Every time is a median (p50) of warm rounds; ratios compare designs measured side by "
        "side in the same run. Sizes count code points. `mixed` text is prose mixing ASCII "
        "with é, ü, ß, CJK and astral emoji (about 1.2 UTF-8 bytes per code point). "
        "Windows are 4096 code points; the middle window does not start on a chunk boundary.",
        "",
        "The designs compared:",
        "",
        "- **library**: `Store.read_field_window` (offset or cursor selector), "
        "`read_field_window(q=...)` and `Store.read_record` through the sync public API.",
        "- **raw floor**: the very statements and parameters the library sent for that read "
        "(captured by the boundary audit), replayed on a bare DBAPI connection in the same "
        "transaction framing. library / floor is the cost of the library around its SQL.",
        "- **naive**: `SELECT body` of the whole value from one column, sliced (or lower-cased "
        "and searched) in Python.",
        "- **reference**: the PDPP reference's design: the record as one JSON document "
        "(`jsonb` on Postgres), the field extracted with `json_extract` / `->>`, cut with "
        "`substr`, matched with `instr`/`strpos` on `lower()`.",
        "",
        "Baselines run on an autocommit connection (no BEGIN/COMMIT), so their ratios are "
        "conservative.",
        "",
        "## Targets",
        "",
    ]
    backends = run.backends()
    lines += table(
        ["target", "goal", *(BACKEND_TITLES[b] for b in backends)],
        [
            [
                target.name,
                target.goal,
                *(
                    f"{verdict(ok)}: {text}"
                    for text, ok in (target.measure(run, b) for b in backends)
                ),
            ]
            for target in TARGETS
        ],
    )
    for backend in backends:
        title = BACKEND_TITLES[backend]
        image = f"bench-{backend}.png"
        plot(run, backend, out / image)
        lines += [f"## {title}", "", f"![{title} window latency against field size]({image})", ""]
        lines += [f"### {title}: window reads", ""]
        lines += table(WINDOW_HEADERS, window_rows(run, backend), "lllrrrrrrrrr")
        lines += [f"### {title}: match windows (`q`)", ""]
        lines += [
            "Needles: near the start (offset 100), across the chunk boundary nearest the middle, "
            "ending at the last code point, and absent (`query_not_found`).",
            "",
        ]
        lines += table(MATCH_HEADERS, library_rows(run, backend, "match", NEEDLES), "lllrrrrrrr")
        lines += [f"### {title}: record projection (`read_record`)", ""]
        lines += table(RECORD_HEADERS, library_rows(run, backend, "record"), "llrrrrrrr")
        lines += [f"### {title}: ingestion", ""]
        lines += [
            "One record with one large field per round (`upsert_records`, fresh id each "
            "round), against one raw INSERT of the same value into a plain column.",
            "",
        ]
        lines += table(INGEST_HEADERS, ingest_rows(run, backend), "llrrrrrr")
        lines += table(
            ["text", "batch", "p50 per batch", "records/s", "MB/s"],
            small_rows(run, backend),
            "llrrr",
        )
    return lines


def render_blocks(run: Run, out: Path, note: str = "") -> list[tuple[str, str]]:
    """Each of `BLOCKS` with its text, in order (`_report_document.splice` writes them)."""
    return [
        ("matrix", "\n".join(render_matrix(run, out, note))),
        *((name, "\n".join(section(run.data))) for name, section in SECTIONS.items()),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs",
        type=Path,
        nargs="+",
        metavar="run",
        help="pytest-benchmark JSON (--benchmark-json); of several, a later one's cell wins",
    )
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where to write")
    parser.add_argument("--note", default="", help="a remark printed under the run's details")
    args = parser.parse_args(argv)
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in args.runs]
    for path, data in zip(args.runs, runs, strict=True):
        if not data.get("benchmarks"):
            raise SystemExit(f"{path}: no benchmarks in this run (was pytest-benchmark disabled?)")
    run = Run(merge_runs(runs))
    target = args.out / "benchmarks.md"
    old = target.read_text(encoding="utf-8") if target.exists() else ""
    try:
        check(old, BLOCKS)  # before the plots are written: a refusal writes nothing
        args.out.mkdir(parents=True, exist_ok=True)
        spliced = splice(old, render_blocks(run, args.out, args.note))
    except MarkerError as error:
        raise SystemExit(f"{target}: {error}; nothing written") from None
    for name in spliced.stale:
        print(f"{target}: block report-{name} is no longer rendered; kept", file=sys.stderr)
    target.write_text(spliced.text, encoding="utf-8")


if __name__ == "__main__":
    main()
