"""The tokens file (`pdpp_store.load_tokens`): token -> grant, or one clear `invalid_tokens`
error that names the place and never the token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pdpp_store import BadRequest, Grant, load_tokens, tokens_from_dict

TOKEN = "tok_alice_0123456789abcdef"
GRANT = {"grant_id": "g1", "streams": [{"name": "message_bodies", "instance_ids": ["cin_a"]}]}


def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "tokens.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def test_a_valid_file_maps_tokens_to_grants(tmp_path: Path) -> None:
    other = "Zm9vYmFyYmF6cXV4MTIzNA=="
    tokens = load_tokens(write(tmp_path, json.dumps({TOKEN: GRANT, other: GRANT})))
    assert tokens == {TOKEN: Grant.from_dict(GRANT), other: Grant.from_dict(GRANT)}


@pytest.mark.parametrize(
    ("content", "param", "words"),
    [
        ("[]", "tokens", "JSON object"),
        ("{}", "tokens", "no tokens"),
        ("{nope", "tokens", "not valid JSON"),
        (b"\xff\xfe", "tokens", "not valid JSON"),
        (json.dumps({"short": GRANT}), "tokens[0]", "at least 16"),
        (json.dumps({TOKEN + " x": GRANT}), "tokens[0]", "characters"),
        (
            json.dumps({TOKEN: GRANT, TOKEN + "2": {"streams": []}}),
            "tokens[1].grant_id",
            "grant_id",
        ),
        (
            json.dumps({TOKEN: {**GRANT, "streams": [{"name": ""}]}}),
            "tokens[0].streams[0].name",
            "name",
        ),
        (f'{{"{TOKEN}": {json.dumps(GRANT)}, "{TOKEN}": {json.dumps(GRANT)}}}', "tokens", "twice"),
    ],
)
def test_a_bad_file_is_invalid_tokens_naming_the_place(
    tmp_path: Path, content: str | bytes, param: str, words: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        load_tokens(write(tmp_path, content))
    error = caught.value
    assert (error.code, error.http_status, error.param) == ("invalid_tokens", 400, param)
    assert words in error.message
    assert TOKEN not in error.message
    assert "short" not in error.message


def test_a_missing_file_is_invalid_tokens(tmp_path: Path) -> None:
    with pytest.raises(BadRequest) as caught:
        load_tokens(tmp_path / "absent.json")
    assert caught.value.code == "invalid_tokens"
    assert "cannot be read" in caught.value.message


def test_tokens_from_dict_refuses_non_string_keys() -> None:
    odd: Any = {1: GRANT}
    with pytest.raises(BadRequest) as caught:
        tokens_from_dict(odd)
    assert caught.value.param == "tokens[0]"
