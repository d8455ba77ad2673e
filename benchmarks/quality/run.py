"""Run the quality benchmark: `python -m benchmarks.quality [--queries N] [--backends ...]`.

Loads the corpus (`corpus`) under the real gmail manifest into a fresh store per backend, makes
the seeded known-item queries (`queries`), asks every system (`systems`) for the first page of
10 and prints success@1, success@10 and MRR@10 per system, overall and per kind of query, as a
Markdown table. `--smoke` runs the same code on a few messages written in the test suite's
smoke test instead of the corpus (seconds; no download).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pdpp_store import Store

from .corpus import Mail, load_corpus, records
from .queries import KINDS, Query, make_queries
from .systems import STREAMS, Fts5Reference, StoreSearch, System, TsvectorReference, first_rank

__all__ = ["Score", "evaluate", "main", "open_store", "systems_for"]

PAGE = 10
CONNECTION = "quality_mail"
GMAIL = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "manifests" / "gmail.json"
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
POSTGRES_DATABASE = "pdpp_quality_bench"
START = "<!-- search-quality:start -->"
END = "<!-- search-quality:end -->"


@dataclass
class Score:
    """success@1, success@10 and MRR@10 of one system over a list of queries."""

    queries: int = 0
    at1: int = 0
    at10: int = 0
    reciprocal: float = 0.0
    by_kind: dict[str, list[int]] = field(default_factory=dict)

    def add(self, kind: str, rank: int | None) -> None:
        self.queries += 1
        hit = rank is not None and rank <= PAGE
        self.at1 += rank == 1
        self.at10 += hit
        self.reciprocal += 1 / rank if rank is not None and hit else 0.0
        seen = self.by_kind.setdefault(kind, [0, 0])
        seen[0] += 1
        seen[1] += hit

    def row(self) -> dict[str, float]:
        n = max(self.queries, 1)
        answer = {
            "success@1": self.at1 / n,
            "success@10": self.at10 / n,
            "MRR@10": self.reciprocal / n,
        }
        for kind, (count, found) in sorted(self.by_kind.items()):
            answer[f"{kind} s@10"] = found / max(count, 1)
        return answer


def open_store(url: str, mails: Sequence[Mail]) -> Store:
    """A fresh store at `url` holding `mails` under the gmail manifest."""
    store = Store.open(url)
    manifest = json.loads(GMAIL.read_text(encoding="utf-8"))
    store.register_manifest(manifest)
    store.add_connection(CONNECTION, manifest["connector_id"])
    messages, bodies = records(mails)
    for stream, rows in (("messages", messages), ("message_bodies", bodies)):
        for start in range(0, len(rows), 500):
            store.upsert_records(CONNECTION, stream, rows[start : start + 500])
    return store


def _postgres_url(admin: str, database: str) -> tuple[str, str]:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(
                sql.Identifier(database)
            )
        )
    conninfo = admin.rsplit("/", 1)[0] + "/" + database
    return conninfo.replace("postgresql://", "postgresql+psycopg://", 1), conninfo


def systems_for(
    backend: str,
    mails: Sequence[Mail],
    workdir: Path,
    admin: str,
    database: str = POSTGRES_DATABASE,
) -> list[System]:
    """The store and the reference design on `backend`, both loaded with `mails`."""
    messages, bodies = records(mails)
    loaded: dict[str, list[dict[str, Any]]] = {"messages": messages, "message_bodies": bodies}
    assert set(loaded) == set(STREAMS)
    if backend == "sqlite":
        store = open_store(f"sqlite:///{workdir / 'store.sqlite'}", mails)
        return [
            StoreSearch("pdpp-store, SQLite", store, CONNECTION),
            Fts5Reference(str(workdir / "ref.sqlite"), loaded),
        ]
    url, conninfo = _postgres_url(admin, database)
    store = open_store(url, mails)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return [
        StoreSearch("pdpp-store, Postgres", store, CONNECTION),
        TsvectorReference(conninfo, loaded),
    ]


def evaluate(systems: Sequence[System], queries: Sequence[Query]) -> dict[str, Score]:
    scores = {system.name: Score() for system in systems}
    for query in queries:
        for system in systems:
            scores[system.name].add(
                query.kind, first_rank(system.ranked(query.q, PAGE), query.target)
            )
    return scores


def table(scores: dict[str, Score]) -> str:
    columns = ["success@1", "success@10", "MRR@10", *(f"{k} s@10" for k in KINDS)]
    lines = ["| system | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, score in scores.items():
        row = score.row()
        lines.append(f"| {name} | " + " | ".join(f"{row.get(c, 0.0):.3f}" for c in columns) + " |")
    return "\n".join(lines)


def _write_block(path: Path, messages: int, queries: int, seed: int, rows: str) -> None:
    """Rewrite the block between `START` and `END` in `path` (added at the end if absent)."""
    block = "\n".join(
        [
            START,
            "## Search quality: known-item queries on a real mailbox (issue 22)",
            "",
            f"`python -m benchmarks.quality --out docs/benchmarks.md`: {messages} messages of the"
            " SpamAssassin public corpus (benchmarks/quality/corpus.py: source, licence,"
            f" checksum) under the gmail manifest, {queries} seeded known-item queries (seed"
            f" {seed}; subject words, body words, sender plus topic, quoted phrases in equal"
            " shares), first page of 10. A query succeeds when the wanted message (either of"
            " its `messages` and `message_bodies` records) is on the page.",
            "",
            rows,
            END,
        ]
    )
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if START in old and END in old:
        new = old[: old.index(START)] + block + old[old.index(END) + len(END) :]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new, encoding="utf-8")


def main(
    argv: Sequence[str] | None = None, mails: Sequence[Mail] | None = None
) -> dict[str, Score]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality")
    parser.add_argument("--queries", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument(
        "--postgres", default=POSTGRES_ADMIN, help="libpq URI of a maintenance database"
    )
    parser.add_argument("--database", default=POSTGRES_DATABASE, help="dropped and made anew")
    parser.add_argument("--out", type=Path, help="a report whose search quality block to rewrite")
    args = parser.parse_args(argv)
    started = time.monotonic()
    corpus = list(mails) if mails is not None else load_corpus()
    queries = make_queries(corpus, args.queries, args.seed)
    print(f"{len(corpus)} messages, {len(queries)} queries (seed {args.seed})", file=sys.stderr)
    scores: dict[str, Score] = {}
    with tempfile.TemporaryDirectory(prefix="pdpp-quality-") as work:
        for backend in args.backends.split(","):
            systems = systems_for(backend.strip(), corpus, Path(work), args.postgres, args.database)
            scores.update(evaluate(systems, queries))
            for system in systems:
                closing = getattr(system, "close", None) or getattr(
                    getattr(system, "store", None), "close", None
                )
                if closing is not None:
                    closing()
    print(table(scores))
    if args.out is not None:
        _write_block(args.out, len(corpus), len(queries), args.seed, table(scores))
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return scores
