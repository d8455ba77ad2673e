"""The read audit's cost (PERFORMANCE.md goal 15): the same read through `pdpp-store serve` with
the audit on and with it off (`serve --no-audit`), at 1 and 32 concurrent clients, on each
database, measured so that a shared, noisy machine moves both sides alike.

    python -m benchmarks.audit_serve [--smoke] [--rounds N] [--out docs/benchmarks.md]
                                     [--sqlite-only]

The read is `serve_load`'s (a 4096-code-point field window at a random offset of a
1,000,000-code-point field, `GET /v1/.../field-window`, over keep-alive loopback connections
from a minimal HTTP/1.1 client), against two servers of the same store started side by side,
one auditing and one not.

Method (why: on a machine whose load comes and goes, two long runs one after the other measure
the load, not the audit):
1. Many short rounds, alternating: each round measures the audited server and the other one
   back to back, each first in every other round, on the same requests. Each round gives its
   own ratios (audited over not audited: p50 latency, and time per request, which is inverse
   throughput); the table reports the median over rounds, with the middle half's range and
   the extremes, so a burst of other work spoils a round or two, not the figure.
2. The servers' own CPU time per request, from the kernel's count for each server process
   (utime + stime of `/proc/<pid>/stat` before the first round; the process's whole rusage
   when it has ended, so the audit's last flush at close counts too): what the audit costs
   the machine, which other processes' load barely moves.
3. The load average is read at the start and at the end of each database's run.

Rules:
1. Loopback only, bounded counts, a time cap per part (`serve_load`'s); the servers are ended
   by their pids.
2. The full run rewrites the block between `<!-- read-audit:start -->` and
   `<!-- read-audit:end -->` in docs/benchmarks.md; `--smoke` prints the table and checks that
   every level answered without errors and that the audited server recorded its reads, never
   how fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks.serve_load import (
    GRANT,
    TOKEN,
    Figures,
    _clients,
    _databases,
    _free_port,
    _seed,
    write_block,
)
from pdpp_store import Store

START = "<!-- read-audit:start -->"
END = "<!-- read-audit:end -->"
LEVELS = (1, 32)
PER_ROUND = {1: 200, 32: 640}
"""Requests per server per round: about a third of a second of a quiet machine's work each."""
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    port: int
    pid: int
    cpu_at_start: float = 0.0
    cpu_seconds: float = 0.0
    requests: int = 0


@dataclass
class Level:
    clients: int
    p50_ratios: list[float] = field(default_factory=list)
    time_ratios: list[float] = field(default_factory=list)
    on: list[Figures] = field(default_factory=list)
    off: list[Figures] = field(default_factory=list)


@dataclass
class Run:
    database: str
    load_before: str
    load_after: str = ""
    levels: list[Level] = field(default_factory=list)
    cpu_on_ms: float = 0.0
    cpu_off_ms: float = 0.0
    recorded: int = 0


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def _cpu(pid: int) -> float:
    """The CPU seconds a running process has used (user + system)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        parts = stat.read().rpartition(")")[2].split()
    return (int(parts[11]) + int(parts[12])) / TICKS


@contextmanager
def _server(
    url: str, directory: Path, options: tuple[str, ...], into: list[Server]
) -> Iterator[Server]:
    """`pdpp-store serve` (one process) on a free port; when it has ended (SIGINT, by its pid),
    its whole CPU time is read from its rusage into `cpu_seconds`."""
    tokens = directory / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: GRANT}), encoding="utf-8")
    port = _free_port()
    cli = Path(sys.executable).with_name("pdpp-store")
    command = [str(cli), "--db", url, "serve", "--tokens", str(tokens), "--port", str(port)]
    log_path = directory / f"audit-serve-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=log)
    server = Server(port, process.pid)
    into.append(server)
    try:
        deadline = time.monotonic() + 120  # a loaded 2-core machine starts a server slowly
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("pdpp-store serve did not start")
            try:
                httpx.get(
                    f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource", timeout=1
                )
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield server
    finally:
        os.kill(process.pid, signal.SIGINT)
        deadline = time.monotonic() + 15
        while True:
            pid, _, usage = os.wait4(process.pid, os.WNOHANG)
            if pid == process.pid:
                server.cpu_seconds = usage.ru_utime + usage.ru_stime - server.cpu_at_start
                process.returncode = 0  # reaped here: Popen must not wait for it again
                break
            if time.monotonic() > deadline:
                os.kill(process.pid, signal.SIGKILL)
                deadline = time.monotonic() + 15
            time.sleep(0.05)
        errors = [
            line
            for line in log_path.read_text(errors="replace").splitlines()
            if "Traceback" in line or "ERROR" in line
        ]
        if errors:
            print(f"audit_serve: the server logged errors: {errors[:5]}", file=sys.stderr)


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, mid, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, mid, high


def measure(smoke: bool, sqlite_only: bool, rounds: int) -> list[Run]:
    counts = {1: 40, 32: 128} if smoke else PER_ROUND
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="pdpp-audit-") as temporary,
        _databases(Path(temporary), sqlite_only) as databases,
    ):
        for name, url in databases:
            asyncio.run(_seed(url))
            servers: list[Server] = []
            run = Run(name, _load())
            with (
                _server(url, Path(temporary), (), servers) as on,
                _server(url, Path(temporary), ("--no-audit",), servers) as off,
            ):
                for clients in LEVELS:  # warm both (statement caches, connections, the page cache)
                    for server in (on, off):
                        asyncio.run(_clients(server.port, clients, counts[clients]))
                for server in (on, off):
                    server.cpu_at_start = _cpu(server.pid)
                for clients in LEVELS:
                    level = Level(clients)
                    for number in range(rounds):
                        pair = [(on, level.on), (off, level.off)]
                        for server, figures in pair if number % 2 == 0 else pair[::-1]:
                            figures.append(
                                asyncio.run(_clients(server.port, clients, counts[clients]))
                            )
                            server.requests += len(figures[-1].latencies)
                        a, b = level.on[-1], level.off[-1]
                        level.p50_ratios.append(a.p50_ms / b.p50_ms)
                        level.time_ratios.append(b.per_second / a.per_second)
                    run.levels.append(level)
            run.load_after = _load()
            run.cpu_on_ms = on.cpu_seconds / on.requests * 1000
            run.cpu_off_ms = off.cpu_seconds / off.requests * 1000
            with Store.open(url) as owner:  # the audited server's reads are recorded
                run.recorded = len(owner.list_audit(limit=1000))
            if run.recorded == 0:
                raise SystemExit(f"audit_serve: the audited server recorded nothing on {name}")
            runs.append(run)
    return runs


def _ratio(values: list[float]) -> str:
    x = "\N{MULTIPLICATION SIGN}"
    low, mid, high = _quartiles(values)
    return f"**{mid:.2f}{x}** ({low:.2f}-{high:.2f}; {min(values):.2f}-{max(values):.2f})"


def render(runs: list[Run], rounds: int) -> str:
    x = "\N{MULTIPLICATION SIGN}"
    lines = [
        START,
        "## The read audit's cost (goal 15)",
        "",
        "Generated by `python -m benchmarks.audit_serve`: the field-window read of the serve-load "
        "table (4096 code points at a random offset of a 1,000,000-code-point field) as "
        "`GET /v1/streams/{stream}/records/{id}/field-window` to two `pdpp-store serve` "
        "processes of the same store, one recording the read audit (the default) and one "
        "started with `--no-audit`. Method: "
        f"{rounds} short rounds per level, each measuring both servers back to back on the same "
        f"requests ({PER_ROUND[1]} at 1 client, {PER_ROUND[32]} at 32), each first in every "
        "other round; each round gives its own ratio, audited over not audited, and the table "
        "gives the **median** over rounds, then the middle half's range and the extremes. A "
        "burst of other work on the shared machine spoils a round or two, not the median. "
        "*Server CPU per read* is each server process's own CPU time (user + system, from the "
        "kernel, the audit's writer and its last flush included) over the requests it answered "
        "in all rounds: what the audit costs, which other processes' load barely moves. "
        f"Goal: at most 1.15{x} at 1 and at 32 clients. The load average (1 / 5 / 15 minutes) "
        "was read before and after each database's run.",
        "",
        "| database | clients | p50 ratio: median (middle half; extremes) "
        "| time-per-read ratio: median (middle half; extremes) | audited p50 | not audited p50 "
        "| errors |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for run in runs:
        for level in run.levels:
            on_p50 = statistics.median(f.p50_ms for f in level.on)
            off_p50 = statistics.median(f.p50_ms for f in level.off)
            errors = sum(f.errors for f in level.on + level.off)
            lines.append(
                f"| {run.database} | {level.clients} | {_ratio(level.p50_ratios)} "
                f"| {_ratio(level.time_ratios)} | {on_p50:.2f} ms | {off_p50:.2f} ms | {errors} |"
            )
    lines += [
        "",
        "| database | server CPU per read, audited | not audited | ratio | load average before "
        "| after |",
        "|---|---:|---:|---:|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.database} | {run.cpu_on_ms:.3f} ms | {run.cpu_off_ms:.3f} ms "
            f"| {run.cpu_on_ms / run.cpu_off_ms:.2f}{x} | {run.load_before} | {run.load_after} |"
        )
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small counts; check, don't write")
    parser.add_argument("--sqlite-only", action="store_true", help="skip Postgres")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per level (default 24)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.smoke else 24)
    runs = measure(args.smoke, args.sqlite_only, rounds)
    block = render(runs, rounds)
    print(block)
    failed = [
        (run.database, level.clients)
        for run in runs
        for level in run.levels
        if any(f.errors for f in level.on + level.off)
    ]
    if failed:
        raise SystemExit(f"audit_serve: errors: {failed}")
    if not args.smoke:
        write_block(args.out, block, START, END)


if __name__ == "__main__":
    main()
