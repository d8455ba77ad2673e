"""The serve-load section's summary sentence, on made-up figures: its "under 32 clients"
requests/s is the same server's as its "at one client" (one worker), not the two-worker row's
that `measure` appends last."""

from __future__ import annotations

from .serve_load import Figures, render


def _figures(label: str, requests_per_second: float) -> Figures:
    return Figures(label, [0.001] * 100, 100 / requests_per_second, 0)


def test_summary_compares_one_worker_with_one_worker() -> None:
    rows = [
        _figures("library (in process)", 10_000),
        _figures("REST app in process (no socket)", 3_000),
        _figures("REST, 1 client", 1_000),
        _figures("REST, 8 clients", 1_500),
        _figures("REST, 32 clients", 1_600),
        _figures("REST, 8 clients, 2 workers", 2_500),
        _figures("REST, 32 clients, 2 workers", 2_900),
    ]
    summary = next(line for line in render([("SQLite", rows)]).splitlines() if "Under" in line)
    assert "1,600 requests/s (1,000 at one client)" in summary, summary
