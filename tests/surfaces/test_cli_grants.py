"""`pdpp-store grant add|list|revoke` (through click's CliRunner, on every database): the
owner keeps grants in the store and takes them back; a revoked grant is refused by the next
read, from any process; bad input is the library's typed error on stderr, exit code 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pdpp_store import Forbidden, Store
from pdpp_store.cli import cli

GRANT = {"grant_id": "g-cli", "streams": [{"name": "message_bodies"}]}


def run(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False)


def test_grant_add_list_revoke(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "grant.json"
    path.write_text(json.dumps(GRANT), encoding="utf-8")
    added = run(db_url, "grant", "add", str(path))
    assert added.exit_code == 0, added.output
    card = json.loads(added.stdout)
    assert (card["grant_id"], card["status"], card["grant"]) == ("g-cli", "active", GRANT)

    listed = json.loads(run(db_url, "grant", "list").stdout)
    assert [one["grant_id"] for one in listed] == ["g-cli"]
    assert json.loads(run(db_url, "grant", "list", "--grant-id", "g-none").stdout) == []

    revoked = run(db_url, "grant", "revoke", "g-cli")
    assert revoked.exit_code == 0, revoked.output
    assert json.loads(revoked.stdout)["status"] == "revoked"
    with Store.open(db_url) as store, pytest.raises(Forbidden) as refused:
        store.describe_grant(store.list_grants("g-cli")[0].grant)
    assert refused.value.code == "grant_revoked"

    again = run(db_url, "grant", "add", str(path))
    assert again.exit_code == 1
    assert json.loads(again.stderr)["error"]["code"] == "grant_exists"
    unknown = run(db_url, "grant", "revoke", "g-nobody")
    assert unknown.exit_code == 1
    assert json.loads(unknown.stderr)["error"]["code"] == "grant_not_found"
    path.write_text(json.dumps({"grant_id": "g-bad"}), encoding="utf-8")
    bad = run(db_url, "grant", "add", str(path))
    assert bad.exit_code == 1
    assert json.loads(bad.stderr)["error"]["code"] == "invalid_grant"
