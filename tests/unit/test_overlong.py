"""Values a hostile caller can build that Python itself cannot print (issue 26, item 6): an
integer past the 4,300-digit limit of `str` makes `repr` raise `ValueError`, so no message may
quote one as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdpp_store import StoreError, load_tokens
from pdpp_store._core import tokens as tokens_module
from pdpp_store._core.errors import shown

HUGE = 10**5000


def test_shown_describes_an_integer_too_long_to_print() -> None:
    with pytest.raises(ValueError, match="4300 digits"):
        repr(HUGE)
    assert shown(HUGE) == "<an integer of about 5,001 digits>"
    assert shown(-HUGE) == "<a negative integer of about 5,001 digits>"
    assert shown(12) == "12"
    assert shown(True) == "True"
    assert shown("x") == "'x'"


def test_a_tokens_file_over_the_size_limit_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens_module, "MAX_TOKENS_FILE_BYTES", 64)
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tok_owner_000000000000000": {"x": "y" * 64}}), encoding="utf-8")
    with pytest.raises(StoreError) as caught:
        load_tokens(path)
    assert (caught.value.code, caught.value.param) == ("invalid_tokens", "tokens")
    assert "larger than 64 bytes" in caught.value.message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[" + "9" * 5000 + "]", "a number is too long"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": 1, "a": 2}', "written twice"),
    ],
)
def test_a_tokens_file_python_cannot_decode_is_invalid_tokens(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(StoreError) as caught:
        load_tokens(path)
    assert (caught.value.code, caught.value.param) == ("invalid_tokens", "tokens")
    assert said in caught.value.message
