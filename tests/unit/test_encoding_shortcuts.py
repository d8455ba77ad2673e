"""The encoder's shortcuts for ingestion speed give exactly what the long way gives: a stored
digest or instant that changed would make every stored record look changed (or drop it from a
time-constrained grant)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.grants import normalize_instant
from pdpp_store._core.values import canonical_json, field_identity

PATHS = ["plain", 'quote"d', "back\\slash", "tab\tnew\nline", "\x01\x1f\x7f", "\u2028\u2029"]
PATHS += ["é名前", "\U0001f600", "</script>", " spaced ", "a/b.c[0]"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", list(FieldKind))
def test_a_field_identity_is_its_canonical_json(path: str, kind: FieldKind) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    assert field_identity(path, kind.value, digest) == canonical_json([path, kind.value, digest])


@given(st.text(min_size=1).filter(lambda s: "\x00" not in s))
def test_any_path_s_identity_is_its_canonical_json(path: str) -> None:
    assert field_identity(path, "text", "sha256:ab") == canonical_json([path, "text", "sha256:ab"])


def _the_long_way(value: str) -> str | None:
    """`normalize_instant` without its early refusal."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
    try:
        parsed = parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ").rjust(27, "0")


INSTANTS = ["2026-03-01", "2026-03-01T10:00:00Z", "20260301T100000+0530", "2026-W09-7"]
INSTANTS += ["0001-01-01T00:00:00-01:00", "9999-12-31T23:59:59+01:00", "2026-03-01 10:00"]
NOT_INSTANTS = ["", "hello", " 2026-03-01", "+2026-03-01", "٢٠٢٦-03-01", "²⁰²⁶-03-01", "T10:00"]
NOT_INSTANTS += ["10:00", "2026", "202", "2026-13-01", "Sun, 01 Mar 2026 10:00:00 +0000"]
NOT_INSTANTS += ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]  # out of range in UTC


@pytest.mark.parametrize("value", INSTANTS + NOT_INSTANTS)
def test_an_instant_is_read_as_fromisoformat_reads_it(value: str) -> None:
    assert normalize_instant(value) == _the_long_way(value)
    assert (normalize_instant(value) is not None) == (value in INSTANTS)


@given(st.text(max_size=40))
def test_any_string_s_instant_is_read_as_fromisoformat_reads_it(value: str) -> None:
    expected = _the_long_way(value) if value else None
    assert normalize_instant(value) == expected
