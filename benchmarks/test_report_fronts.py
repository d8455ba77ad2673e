"""The fronts section's verdict on reads/s from 1 to 4 to 16 tasks, on made-up cells: growth,
a fall within the rounds' spread (flat), and a fall beyond it."""

from __future__ import annotations

from typing import Any

import pytest

from ._report_fronts import _cells, _growth


def _run(medians_ms: list[float], iqr_ms: float) -> dict[str, Any]:
    return {
        "benchmarks": [
            {
                "extra_info": {
                    "suite": "fronts",
                    "front": "async",
                    "backend": "sqlite",
                    "impl": "library",
                    "tasks": tasks,
                    "reads": 256,
                },
                "stats": {"median": median / 1000, "iqr": iqr_ms / 1000},
            }
            for tasks, median in zip((1, 4, 16), medians_ms, strict=True)
        ]
    }


@pytest.mark.parametrize(
    ("medians_ms", "iqr_ms", "verdict"),
    [
        ([10.0, 9.0, 8.0], 0.1, "25,600 → 28,444 → 32,000"),
        ([10.0, 10.0, 10.1], 0.2, "(flat: each fall within the rounds' spread)"),
        ([10.0, 10.0, 10.1], 0.05, "(falls)"),
        ([10.0, 12.0, 9.0], 0.2, "(falls)"),
    ],
)
def test_growth_names_a_fall_only_beyond_the_spread(
    medians_ms: list[float], iqr_ms: float, verdict: str
) -> None:
    shown = _growth(_cells(_run(medians_ms, iqr_ms)), "sqlite", "library")
    assert shown.endswith(verdict)
    assert ("(" in shown) == ("(" in verdict)
