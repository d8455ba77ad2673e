"""The report writes its blocks into docs/benchmarks.md and keeps every other byte
(`_report_document` Rules 1-5): over the project's own document, and over made-up ones."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from . import report
from ._report_document import MarkerError, Spliced, end, splice, start

DOCUMENT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

_BLOCK = re.compile(
    r"^<!-- report-([a-z0-9-]+):start -->\n.*?^<!-- report-\1:end -->$", re.MULTILINE | re.DOTALL
)


def _outside(text: str) -> str:
    """`text` with each report block cut down to its name: what the report must not change."""
    return _BLOCK.sub(lambda block: f"[report-{block.group(1)}]", text)


def _blocks(text: str) -> dict[str, str]:
    return {block.group(1): block.group(0) for block in _BLOCK.finditer(text)}


def _run(tmp_path: Path) -> Path:
    """A made-up run: one window cell of the size matrix and one cell of the wide section."""
    cells: list[dict[str, Any]] = [
        {
            "fullname": "benchmarks/test_windows.py::test_window[made-up]",
            "extra_info": {
                "suite": "window",
                "backend": "sqlite",
                "kind": "ascii",
                "size": "10k",
                "chars": 10_000,
                "position": "start",
                "impl": "library-offset",
            },
            "stats": {"median": 0.000123, "rounds": 5},
        },
        {
            "fullname": "benchmarks/test_wide.py::test_wide[made-up]",
            "extra_info": {
                "suite": "wide",
                "backend": "sqlite",
                "op": "first-page",
                "keys": 100,
                "impl": "library",
            },
            "stats": {"median": 0.000456, "rounds": 5},
        },
    ]
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps({"datetime": "2031-01-02T03:04:05", "benchmarks": cells}), encoding="utf-8"
    )
    return path


def test_the_projects_document_keeps_what_people_wrote(tmp_path: Path) -> None:
    """docs/benchmarks.md as committed, regenerated from another run: every byte outside the
    report's blocks (the dated sections, the other benchmarks' blocks) is kept, and each block
    holds this run's text, no longer the committed run's."""
    out = tmp_path / "docs"
    out.mkdir()
    before = DOCUMENT.read_text(encoding="utf-8")
    (out / "benchmarks.md").write_text(before, encoding="utf-8")

    report.main([str(_run(tmp_path)), "--out", str(out)])

    after = (out / "benchmarks.md").read_text(encoding="utf-8")
    assert _outside(after) == _outside(before)
    assert "### Session 11: the word index" in _outside(after)  # a hand-written section
    assert "<!-- read-audit:start -->" in _outside(after)  # another benchmark's block
    old, new = _blocks(before), _blocks(after)
    assert list(old) == list(new) == list(report.BLOCKS)
    assert "Run 2026-11-24" in old["matrix"]
    assert "Run 2031-01-02T03:04:05" in new["matrix"]
    assert "Run 2026-11-24" not in after
    assert "456 µs" in new["wide"]  # the made-up cell
    assert "| 10,000 |" in old["wide"]
    assert "| 10,000 |" not in new["wide"]
    for name in ("fronts", "search", "ingest"):  # none of their cells in the run: emptied
        assert old[name].count("\n") > 10
        assert new[name] == f"{start(name)}\n{end(name)}"
    assert (out / "bench-sqlite.png").exists()

    report.main([str(_run(tmp_path)), "--out", str(out)])  # and again: the same document
    assert (out / "benchmarks.md").read_text(encoding="utf-8") == after


HAND = "# Notes\n\nWritten by hand.  \n\n\n### Session 1: figures\n\n| a | b |\n|---|---:|\n"


def test_blocks_are_replaced_in_place_and_the_rest_kept_byte_for_byte() -> None:
    document = (
        HAND
        + f"{start('one')}\nold one\n{end('one')}\n"
        + "between, quoting a marker: `<!-- report-two:start -->`\n"
        + f"\n{start('two')}\n\nold two\n\n{end('two')}"
        + "\n\ntrailing text without a newline"
    )
    spliced = splice(document, [("one", "new one\n"), ("two", "\n\nnew two")])
    assert spliced == Spliced(
        HAND
        + f"{start('one')}\nnew one\n{end('one')}\n"
        + "between, quoting a marker: `<!-- report-two:start -->`\n"
        + f"\n{start('two')}\nnew two\n{end('two')}"
        + "\n\ntrailing text without a newline",
        (),
    )


def test_a_new_block_lands_after_the_block_rendered_before_it() -> None:
    document = (
        f"intro\n\n{start('b')}\nold b\n{end('b')}\nhand\n\n{start('d')}\nold d\n{end('d')}\n"
    )
    blocks = [("a", "new a"), ("b", "new b"), ("c", "new c"), ("d", "new d"), ("e", "new e")]
    assert splice(document, blocks).text == (
        f"intro\n\n{start('a')}\nnew a\n{end('a')}\n\n"
        f"{start('b')}\nnew b\n{end('b')}\n\n{start('c')}\nnew c\n{end('c')}\nhand\n\n"
        f"{start('d')}\nnew d\n{end('d')}\n\n{start('e')}\nnew e\n{end('e')}\n"
    )


def test_blocks_moved_by_hand_stay_where_they_are() -> None:
    document = f"{start('b')}\nold b\n{end('b')}\nhand\n{start('a')}\nold a\n{end('a')}\n"
    assert splice(document, [("a", "A"), ("b", "B")]).text == (
        f"{start('b')}\nB\n{end('b')}\nhand\n{start('a')}\nA\n{end('a')}\n"
    )


def test_a_new_document_is_the_blocks_in_order_and_an_empty_block_keeps_its_place() -> None:
    for blank in ("", "\n \n"):
        assert splice(blank, [("a", "A\n"), ("b", ""), ("c", "C")]).text == (
            f"{start('a')}\nA\n{end('a')}\n\n{start('b')}\n{end('b')}\n\n"
            f"{start('c')}\nC\n{end('c')}\n"
        )


def test_a_block_no_longer_rendered_is_kept_and_named() -> None:
    document = f"{start('gone')}\nold\n{end('gone')}\n{start('a')}\nold a\n{end('a')}\n"
    assert splice(document, [("a", "A")]) == Spliced(
        f"{start('gone')}\nold\n{end('gone')}\n{start('a')}\nA\n{end('a')}\n", ("gone",)
    )


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ("# Benchmarks\n\nhand-written, no markers\n", "none of the report's blocks"),
        (f"{start('gone')}\nx\n{end('gone')}\n", "none of the report's blocks"),
        (f"{start('a')}\nx\n", "without <!-- report-a:end -->"),
        (f"x\n{end('a')}\n", "without <!-- report-a:start --> before it"),
        (f"{end('a')}\n{start('a')}\nx\n{end('a')}\n", "without <!-- report-a:start -->"),
        (f"{start('a')}\n{start('b')}\n{end('b')}\n{end('a')}\n", "before <!-- report-a:end"),
        (f"{start('a')}\n{end('a')}\n{start('a')}\n{end('a')}\n", "report-a twice"),
    ],
)
def test_markers_that_do_not_pair_up_are_refused(document: str, why: str) -> None:
    with pytest.raises(MarkerError, match=re.escape(why)):
        splice(document, [("a", "A"), ("b", "B")])


def test_the_report_refuses_before_writing_anything(tmp_path: Path) -> None:
    out = tmp_path / "docs"
    out.mkdir()
    written = "# Benchmarks\n\nWritten by hand, before any marker.\n"
    (out / "benchmarks.md").write_text(written, encoding="utf-8")
    with pytest.raises(SystemExit, match="none of the report's blocks is marked"):
        report.main([str(_run(tmp_path)), "--out", str(out)])
    assert (out / "benchmarks.md").read_text(encoding="utf-8") == written
    assert sorted(path.name for path in out.iterdir()) == ["benchmarks.md"]
