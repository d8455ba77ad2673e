"""Helpers of the bite tests (tests/gate): a proof is run against a deliberately broken variant
of the library, which must fail it. Statement builders cache what they build, so a variant
patched in must not meet a statement cached before it, nor leave its own behind."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import pdpp_store._sql


def clear_statement_caches() -> None:
    """Empty every `functools` cache of the statement builders (`pdpp_store._sql.*`)."""
    for info in pkgutil.iter_modules(pdpp_store._sql.__path__, "pdpp_store._sql."):
        for value in list(vars(importlib.import_module(info.name)).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


def breakable_monkeypatch(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The body of a `breakable` fixture: `monkeypatch`, with the statement caches cleared
    before the broken variant lives and again after it is undone."""
    clear_statement_caches()
    try:
        yield monkeypatch
    finally:
        monkeypatch.undo()
        clear_statement_caches()
