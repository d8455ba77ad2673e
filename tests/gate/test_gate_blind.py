"""P0 gate: the proofs can fail. The audit's silence is what the bounded and search proofs rest
on, so they must tell silence from blindness: with the store's read path blinded (its execution
point, `_runtime.Statements.received`, tells no observer the rows it fetched), every read of the
bounded proof and the search proof FAIL, on each database, where they pass on the real library.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from test_gate_bounded import READS, check_bounded, load_big
from test_search_gate import check_search_gate, load

from pdpp_store import Store
from pdpp_store._runtime import Plan, Statements
from pdpp_store._runtime import executor as runtime
from pdpp_store._sql.requests import Rows


@pytest.fixture
def sync_store(db_url: str) -> Iterator[Store]:
    with Store.open(db_url) as opened:
        yield opened


def _blind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blind the read path: its rows reach the store, and no observer hears of them."""
    real = Statements.received

    def received(
        self: Statements, plan: Plan, raw: Sequence[Sequence[Any]], description: Any
    ) -> Rows | None:
        observers = runtime._observers
        runtime._observers = ()
        try:
            return real(self, plan, raw, description)
        finally:
            runtime._observers = observers

    monkeypatch.setattr(Statements, "received", received)


def test_a_blind_audit_fails_every_read_of_the_bounded_proof(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = load_big(sync_store, 300_000, 200_000)
    made = {name: make(sync_store, big) for name, make in READS.items()}
    for read, returned in made.values():
        check_bounded(sync_store, read, returned)
    _blind(monkeypatch)
    for name, (read, returned) in made.items():
        with pytest.raises(AssertionError, match="the audit saw no row"):
            check_bounded(sync_store, read, returned)
        assert read() is not None, name  # the blinded store still answers


def test_a_blind_audit_fails_the_search_proof(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(sync_store)
    check_search_gate(sync_store)
    _blind(monkeypatch)
    with pytest.raises(AssertionError, match="the audit saw no row holding the excerpt"):
        check_search_gate(sync_store)
