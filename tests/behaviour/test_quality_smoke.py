"""The search quality benchmark (benchmarks/quality) runs end to end on a few messages written
here, on both databases: parsing, loading under the gmail manifest, query generation, the store
and both reference designs, the metrics. Seconds, no download; the real corpus is the
benchmark's (docs/benchmarks.md, "Search quality")."""

from __future__ import annotations

import uuid

import pytest
from _postgres import PostgresServer

from benchmarks.quality.corpus import parse_messages, sample
from benchmarks.quality.queries import make_queries
from benchmarks.quality.run import main

MESSAGES = b"""From alice@example.org Mon Jan  6 10:00:00 2003
From: Alice Walker <alice@example.org>
Subject: Quarterly budget review for the orchard project
Date: Mon, 6 Jan 2003 10:00:00 +0000

The orchard budget needs another review before Friday.
Please bring the irrigation estimates and the harvest
forecast to the meeting.

From bob@example.org Tue Jan  7 11:00:00 2003
From: Bob Marley <bob@example.org>
Subject: Kernel compile fails on sparc
Date: Tue, 7 Jan 2003 11:00:00 +0000

After the upgrade the kernel compile fails with a linker error
on sparc machines; the x86 build is fine. Patch attached.

From carol@example.org Wed Jan  8 12:00:00 2003
From: Carol King <carol@example.org>
Subject: Choir rehearsal moved to Thursday
Date: Wed, 8 Jan 2003 12:00:00 +0000

Rehearsal is moved to Thursday evening because the church hall
is booked for a wedding. Bring the new sheet music.

From dave@example.org Thu Jan  9 13:00:00 2003
From: Dave Brubeck <dave@example.org>
Subject: Spam filter training results
Date: Thu, 9 Jan 2003 13:00:00 +0000

The bayesian filter now catches most spam; false positives
dropped after training on the newsletter folder.
"""


@pytest.mark.postgres
def test_the_quality_benchmark_runs_on_both_databases(pg_server: PostgresServer) -> None:
    mails = parse_messages(sample(MESSAGES))
    assert [m.from_name for m in mails] == [
        "Alice Walker",
        "Bob Marley",
        "Carol King",
        "Dave Brubeck",
    ]
    assert len({m.record_id for m in mails}) == 4
    queries = make_queries(mails, 12, seed=3)
    assert {q.kind for q in queries} == {"subject", "body", "sender", "phrase"}
    database = f"pdpp_quality_smoke_{uuid.uuid4().hex[:8]}"
    try:
        scores = main(
            [
                "--queries",
                "12",
                "--seed",
                "3",
                "--postgres",
                pg_server.conninfo(),
                "--database",
                database,
            ],
            mails=mails,
        )
    finally:
        pg_server.admin().execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    assert len(scores) == 4  # the store and the reference design, on each database
    for name, score in scores.items():
        row = score.row()
        assert score.queries == len(queries), name
        assert all(0.0 <= value <= 1.0 for value in row.values()), name
        # Four messages, every word of a word query in its target: found on the first page.
        for kind in ("subject", "body", "sender"):
            assert row[f"{kind} s@10"] == 1.0, (name, kind)
