"""MCP over Streamable HTTP against the library call (PERFORMANCE.md goal 16), in process: the
serve-load read (a 4096-code-point field window at a random offset of a 1,000,000-code-point
field) as `AsyncStore.read_field_window` and as a `read_record_field` `tools/call` POSTed to
`pdpp_store.mcp.http_app` straight through ASGI (no socket, no client library), with its fast
path for `tools/call` and without it (the SDK's stateless transport), on each database.

    python -m benchmarks.mcp_http [--smoke] [--rounds N] [--out docs/benchmarks.md]
                                  [--sqlite-only]

Method: many short rounds; each round times the three back to back on the same offsets (each
path first in turn), so a burst of other work on a shared machine moves all three alike; the
table gives each path's median time per call over rounds and the median over rounds of each
round's own ratio to the library call. Every answer is checked to carry the window's text.

Rules:
1. One event loop, one store, one app per database; nothing else runs on the loop.
2. The full run rewrites the block between `<!-- mcp-http:start -->` and `<!-- mcp-http:end -->`
   in docs/benchmarks.md; `--smoke` prints the table and checks the answers, never the times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.serve_load import (
    CONNECTION,
    FIELD_CHARS,
    GRANT,
    STREAM,
    TOKEN,
    WINDOW,
    _databases,
    _offsets,
    _seed,
    write_block,
)
from pdpp_store import AsyncStore, Grant
from pdpp_store.mcp import _http as mcp_http
from pdpp_store.mcp import http_app

START = "<!-- mcp-http:start -->"
END = "<!-- mcp-http:end -->"
PATHS = ("library", "MCP, SDK transport", "MCP, fast path")
RECORD = f"{CONNECTION}/{STREAM}:big"


@dataclass
class Run:
    database: str
    per_call_us: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PATHS})
    load_before: str = ""
    load_after: str = ""

    def ratios(self, path: str) -> list[float]:
        library = self.per_call_us["library"]
        return [mine / base for mine, base in zip(self.per_call_us[path], library, strict=True)]


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def _scope(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


async def _post(app: Any, body: bytes) -> bytes:
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(body), receive, send)
    assert sent[0]["status"] == 200, sent
    return b"".join(m.get("body", b"") for m in sent[1:])


async def _measure_one(database: str, url: str, rounds: int, per_round: int) -> Run:
    await _seed(url)
    run = Run(database, load_before=_load())
    store = await AsyncStore.open(url)
    grant = Grant.from_dict(GRANT)
    app = http_app(store, {TOKEN: grant})
    offsets = _offsets(per_round, seed=16)
    bodies = [
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {
                    "name": "read_record_field",
                    "arguments": {
                        "id": RECORD,
                        "field_path": "body_text",
                        "offset_chars": offset,
                        "limit_chars": WINDOW,
                    },
                },
            }
        ).encode()
        for n, offset in enumerate(offsets)
    ]

    async def library(n: int) -> str:
        window = await store.read_field_window(
            grant, RECORD, "body_text", offset_chars=offsets[n], limit_chars=WINDOW
        )
        return window.text

    async def over_mcp(n: int, fast: bool) -> str:
        mcp_http.FAST_TOOL_CALLS = fast
        try:
            answer = json.loads(await _post(app, bodies[n]))
        finally:
            mcp_http.FAST_TOOL_CALLS = True
        text: str = answer["result"]["structuredContent"]["window"]["text"]
        return text

    calls: dict[str, Callable[[int], Awaitable[str]]] = {
        PATHS[0]: library,
        PATHS[1]: lambda n: over_mcp(n, fast=False),
        PATHS[2]: lambda n: over_mcp(n, fast=True),
    }
    try:
        async with app.router.lifespan_context(app):
            expected = [await library(n) for n in range(per_round)]
            assert all(len(text) == WINDOW for text in expected)
            for path in PATHS:  # warm every path, and check each answers the same windows
                assert [await calls[path](n) for n in range(per_round)] == expected, path
            for r in range(rounds):
                order = PATHS[r % 3 :] + PATHS[: r % 3]
                for path in order:
                    began = time.perf_counter()
                    for n in range(per_round):
                        await calls[path](n)
                    run.per_call_us[path].append((time.perf_counter() - began) / per_round * 1e6)
    finally:
        await store.close()
    run.load_after = _load()
    return run


def measure(smoke: bool, sqlite_only: bool, rounds: int) -> list[Run]:
    per_round = 20 if smoke else 200
    with (
        tempfile.TemporaryDirectory(prefix="pdpp-mcp-http-") as directory,
        _databases(Path(directory), sqlite_only) as found,
    ):
        return [
            asyncio.run(_measure_one(database, url, rounds, per_round)) for database, url in found
        ]


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter] or ordered
    return f"{statistics.median(ordered):.2f}x ({middle[0]:.2f}-{middle[-1]:.2f}x)"


def render(runs: list[Run], rounds: int) -> str:
    x = "\N{MULTIPLICATION SIGN}"
    lines = [
        START,
        "## MCP over Streamable HTTP against the library call (goal 16)",
        "",
        "Generated by `python -m benchmarks.mcp_http`: the serve-load field window (4096 code "
        f"points at a random offset of a {FIELD_CHARS:,}-code-point field) as the library call "
        "`AsyncStore.read_field_window` and as a `read_record_field` `tools/call` POSTed to "
        "`pdpp_store.mcp.http_app` through ASGI in the same process (bearer token, body checks, "
        "audit context; no socket, no client library), answered by the SDK's stateless "
        "transport and by the app's fast path for `tools/call`. Method: "
        f"{rounds} rounds, each timing the three back to back on the same offsets, each first "
        "in turn; times are the median over rounds of the mean time per call, ratios the median "
        "of each round's own ratio to the library call (the middle half's range in brackets). "
        f"Goal 16: within 2{x} of the library call.",
        "",
        "| database | library | MCP, SDK transport | ratio | MCP, fast path | ratio "
        "| load average before | after |",
        "|---|---:|---:|---|---:|---|---|---|",
    ]
    for run in runs:
        times = {p: statistics.median(v) for p, v in run.per_call_us.items()}
        lines.append(
            f"| {run.database} | {times[PATHS[0]]:.0f} µs | {times[PATHS[1]]:.0f} µs "
            f"| {_spread(run.ratios(PATHS[1]))} | {times[PATHS[2]]:.0f} µs "
            f"| {_spread(run.ratios(PATHS[2]))} | {run.load_before} | {run.load_after} |"
        )
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small counts; check, don't write")
    parser.add_argument("--sqlite-only", action="store_true", help="skip Postgres")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 30)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.smoke else 30)
    runs = measure(args.smoke, args.sqlite_only, rounds)
    block = render(runs, rounds)
    print(block)
    if not args.smoke:
        write_block(args.out, block, START, END)


if __name__ == "__main__":
    main()
