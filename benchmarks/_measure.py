"""How the benchmarks measure: the size matrix, the slow-case policy, and one `measure` call.

Environment:
    PDPP_BENCH_SIZES        field sizes in code points, e.g. ``10k,1m`` (default: the full matrix
                            ``10k,1m,10m,100m``)
    PDPP_BENCH_SLOW_ROUNDS  rounds of a slow case (default 3; the smoke run uses 1)

Rules:
1. A case whose cost grows with the field (the naive and reference baselines, a library match
   that scans, the floor of such a match, ingestion) runs as `benchmark.pedantic` with a fixed,
   small number of rounds once the field reaches `SLOW_FROM_CHARS`: seconds per call make
   pytest-benchmark's calibration pointless. Everything else is calibrated as usual.
2. Every measurement carries its coordinates in `extra_info` (suite, backend, kind, size, chars,
   and position/needle and impl) and a `group` that holds the designs compared with each other,
   so `report.py` computes ratios from one run without parsing names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_benchmark.fixture import BenchmarkFixture

from ._text import KINDS, parse_sizes

__all__ = [
    "DATASETS",
    "SIZES",
    "SLOW_FROM_CHARS",
    "SLOW_ROUNDS",
    "Dataset",
    "in_rounds",
    "label",
    "measure",
    "size_id",
]

T = TypeVar("T")

SIZES = parse_sizes(os.environ.get("PDPP_BENCH_SIZES") or "10k,1m,10m,100m")
SLOW_ROUNDS = int(os.environ.get("PDPP_BENCH_SLOW_ROUNDS") or 3)
SLOW_FROM_CHARS = 10_000_000


def size_id(size: tuple[str, int]) -> str:
    return size[0]


@dataclass(frozen=True, slots=True)
class Dataset:
    """One benchmarked field: a text kind at a size (`label` as in ``10m``, `chars` exact)."""

    kind: str
    label: str
    chars: int

    def __str__(self) -> str:
        return f"{self.kind}-{self.label}"

    def coordinates(self) -> dict[str, object]:
        return {"kind": self.kind, "size": self.label, "chars": self.chars}


DATASETS = tuple(Dataset(kind, label, chars) for kind in KINDS for label, chars in SIZES)


def label(benchmark: BenchmarkFixture, group: str, **info: object) -> None:
    """Name the comparison a measurement belongs to and record its coordinates."""
    benchmark.group = group
    benchmark.extra_info.update(info)


def measure(
    benchmark: BenchmarkFixture,
    run: Callable[[], T],
    *,
    group: str,
    slow: bool = False,
    **info: object,
) -> T:
    """Time `run` under `group`: calibrated, or `SLOW_ROUNDS` plain rounds when `slow`."""
    label(benchmark, group, **info)
    if slow:
        return in_rounds(benchmark, run, rounds=SLOW_ROUNDS)
    calibrated: T = benchmark(run)
    return calibrated


Setup = Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]


def in_rounds(
    benchmark: BenchmarkFixture,
    target: Callable[..., T],
    *,
    rounds: int,
    setup: Setup | None = None,
) -> T:
    """`benchmark.pedantic`: `rounds` plain rounds, each fed by `setup` when given."""
    pedantic: Callable[..., T] = benchmark.pedantic  # untyped in pytest-benchmark
    return pedantic(target, setup=setup, rounds=rounds, iterations=1)
