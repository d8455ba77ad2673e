"""`pdpp_store.auth`: the tokens file's entries (hashed, by id, inline) and what a token's claims
name, without a server (the served behaviour is in tests/surfaces/test_grants_served.py and
test_oauth_tokens.py)."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from pdpp_store import BadRequest, Grant, StoreError
from pdpp_store.auth import TokensFile, hash_token
from pdpp_store.auth._common import grant_named_by
from pdpp_store.http import Unauthenticated

GRANT = {"grant_id": "g-inline", "streams": [{"name": "messages"}]}
PLAIN = "tok_plain_000000000000000"
HASHED = "tok_hashed_00000000000000"


def _file(tmp_path: Path, tokens: Any) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(tokens), encoding="utf-8")
    return path


def _resolve(tokens: TokensFile, token: str | None) -> Grant:
    return asyncio.run(tokens.resolve(token, None)).grant  # type: ignore[arg-type]


def test_plain_and_hashed_tokens_carry_their_grants(tmp_path: Path) -> None:
    tokens = TokensFile(_file(tmp_path, {PLAIN: GRANT, hash_token(HASHED): GRANT}))
    assert _resolve(tokens, PLAIN) == Grant.from_dict(GRANT)
    assert _resolve(tokens, HASHED) == Grant.from_dict(GRANT)
    for refused, code in ((None, "missing_token"), ("tok_other_0000000000000", "invalid_token")):
        with pytest.raises(Unauthenticated) as error:
            _resolve(tokens, refused)
        assert error.value.code == code
    with pytest.raises(Unauthenticated):  # the hash itself is not a token
        _resolve(tokens, hash_token(HASHED))
    assert pickle.loads(pickle.dumps(tokens)).size == 2  # workers get it whole


@pytest.mark.parametrize(
    ("tokens", "param"),
    [
        ({"short": "g1"}, "tokens[0]"),
        ({"sha256:abc": "g1"}, "tokens[0]"),
        ({"sha256:" + "A" * 64: "g1"}, "tokens[0]"),
        ({PLAIN: ""}, "tokens[0]"),
        ({PLAIN: {"grant_id": 7}}, "tokens[0]"),
        ({PLAIN: "g1", HASHED: {"grant_id": "g2", "streams": "x"}}, "tokens[1].streams"),
        ({}, "tokens"),
        ([], "tokens"),
    ],
)
def test_a_bad_file_is_invalid_tokens_naming_the_entry(
    tmp_path: Path, tokens: Any, param: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        TokensFile(_file(tmp_path, tokens))
    assert (refused.value.code, refused.value.param) == ("invalid_tokens", param)
    assert PLAIN not in refused.value.message


def test_an_edit_applies_and_a_bad_edit_fails_closed(tmp_path: Path) -> None:
    path = _file(tmp_path, {PLAIN: GRANT})
    tokens = TokensFile(path)
    assert _resolve(tokens, PLAIN).grant_id == "g-inline"
    path.write_text(json.dumps({HASHED: {**GRANT, "grant_id": "g-new"}}), encoding="utf-8")
    assert _resolve(tokens, HASHED).grant_id == "g-new"
    with pytest.raises(Unauthenticated):
        _resolve(tokens, PLAIN)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(StoreError) as broken:
        _resolve(tokens, HASHED)
    assert (broken.value.code, broken.value.http_status) == ("tokens_unavailable", 503)
    path.unlink()
    with pytest.raises(StoreError):
        _resolve(tokens, HASHED)


def test_claims_name_a_grant_by_id_or_carry_it() -> None:
    assert grant_named_by({"grant_id": "g1"}) == "g1"
    carried = grant_named_by(
        {"authorization_details": [{"type": "other"}, {"type": "pdpp_grant", **GRANT}]}
    )
    assert carried == Grant.from_dict(GRANT)
    assert (
        grant_named_by({"authorization_details": [{"type": "pdpp_grant", "grant_id": "g2"}]})
        == "g2"
    )
    assert grant_named_by(
        {"grant_id": "g-inline", "authorization_details": [{"type": "pdpp_grant", **GRANT}]}
    )
    for claims in (
        {},
        {"grant_id": 7},
        {"authorization_details": "x"},
        {"authorization_details": [{"type": "pdpp_grant"}]},
        {"authorization_details": [{"type": "pdpp_grant", "grant_id": "g", "streams": 1}]},
        {
            "authorization_details": [
                {"type": "pdpp_grant", **GRANT},
                {"type": "pdpp_grant", **GRANT},
            ]
        },
        {"grant_id": "g-other", "authorization_details": [{"type": "pdpp_grant", **GRANT}]},
    ):
        with pytest.raises(Unauthenticated) as refused:
            grant_named_by(claims)
        assert refused.value.code == "invalid_token", claims
