"""`pdpp-store audit list|export|prune` (through click's CliRunner, on every database): the
command line's own reads are recorded as the `cli` surface's; the owner lists them filtered by
grant and time, exports them as JSON Lines (paging past one page), prunes them; bad filters are
the library's typed errors on stderr, exit code 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _data import MAILBOX, body, ref_id, setup_mailbox
from click.testing import CliRunner, Result

from pdpp_store import Grant, Store
from pdpp_store.cli import audit as audit_commands
from pdpp_store.cli import cli

GRANT = {"grant_id": "g-cli-audit", "streams": [{"name": "message_bodies"}]}


def run(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False)


def _filled(url: str) -> None:
    with Store.open(url) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, "message_bodies", [body("e1", "an overdue invoice")])


def test_cli_reads_are_listed_exported_and_pruned(db_url: str, tmp_path: Path) -> None:
    _filled(db_url)
    grant = tmp_path / "grant.json"
    grant.write_text(json.dumps(GRANT), encoding="utf-8")
    read = run(db_url, "read", "record", ref_id("e1"), "--grant", str(grant))
    assert read.exit_code == 0, read.output
    with Store.open(db_url) as store:  # the library's read, under another grant
        store.read_record(Grant.owner(MAILBOX, "message_bodies"), ref_id("e1"))

    listed = json.loads(run(db_url, "audit", "list").stdout)
    assert [(e["surface"], e["grant_id"]) for e in listed] == [
        ("cli", "g-cli-audit"),
        ("library", Grant.owner(MAILBOX, "message_bodies").grant_id),
    ]
    assert listed[0]["record_ids"] == [f"{MAILBOX}/message_bodies:e1"]
    mine = json.loads(run(db_url, "audit", "list", "--grant-id", "g-cli-audit").stdout)
    assert [e["audit_id"] for e in mine] == [listed[0]["audit_id"]]
    later = json.loads(run(db_url, "audit", "list", "--since", "2999-01-01").stdout)
    assert later == []
    paged = json.loads(run(db_url, "audit", "list", "--after-id", str(mine[0]["audit_id"])).stdout)
    assert [e["audit_id"] for e in paged] == [listed[1]["audit_id"]]

    exported = run(db_url, "audit", "export", "--until", "2999-01-01")
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert lines == listed
    assert "invoice" not in exported.stdout  # never a value

    kept = run(db_url, "audit", "prune", "--older-than", "3600")
    assert json.loads(kept.stdout) == {"object": "read_audit", "pruned": 0}
    pruned = run(db_url, "audit", "prune", "--older-than", "0")
    assert json.loads(pruned.stdout) == {"object": "read_audit", "pruned": 2}
    assert json.loads(run(db_url, "audit", "list").stdout) == []


def test_export_pages_past_one_page(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _filled(db_url)
    with Store.open(db_url) as store:
        for _ in range(5):
            store.read_record(Grant.owner(MAILBOX, "message_bodies"), ref_id("e1"))
    monkeypatch.setattr(audit_commands, "_PAGE", 2)
    exported = run(db_url, "audit", "export")
    ids = [json.loads(line)["audit_id"] for line in exported.stdout.splitlines()]
    assert len(ids) == 5
    assert ids == sorted(set(ids))


def test_bad_filters_are_typed_errors(db_url: str) -> None:
    for args, param in (
        (("audit", "list", "--since", "last week"), "since"),
        (("audit", "list", "--limit", "0"), "limit"),
        (("audit", "export", "--until", "never"), "until"),
        (("audit", "prune", "--older-than", "-5"), "older_than"),
    ):
        refused = run(db_url, *args)
        assert refused.exit_code == 1, (args, refused.output)
        assert json.loads(refused.stderr)["error"]["param"] == param
