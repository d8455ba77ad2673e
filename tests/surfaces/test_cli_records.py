"""`pdpp-store records list` (query_records) and `grant describe --stream` (discovery) on every
database: the library's cards as JSON, the MCP `content[]` text with `--format text`, and bad
input a typed envelope on stderr naming the parameter (exit 1), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from _data import MAILBOX
from test_cli import envelope, run, url, write_grant  # noqa: F401 (a fixture)

BODIES = "message_bodies"


def test_records_list_pages_filters_and_counts(url: str, tmp_path: Path) -> None:  # noqa: F811
    grant = write_grant(tmp_path, {"name": BODIES, "instance_ids": [MAILBOX]})
    first = run(
        url, "records", "list", BODIES, "--grant", grant, "--limit", "2", "--count", "exact"
    )
    assert first.exit_code == 0, first.stderr
    page = json.loads(first.stdout)
    assert (page["object"], page["stream"], page["count"]) == (
        "list",
        BODIES,
        {"kind": "exact", "value": 3},
    )
    assert len(page["data"]) == 2
    rest = run(
        url,
        "records",
        "list",
        BODIES,
        "--grant",
        grant,
        "--limit",
        "2",
        "--count",
        "exact",
        "--cursor",
        page["next_cursor"],
    )
    ids = [row["record_id"] for row in page["data"] + json.loads(rest.stdout)["data"]]
    assert sorted(ids) == ["b1", "b2", "b3"]
    only = run(
        url, "records", "list", BODIES, "--grant", grant,
        "--filter", json.dumps({"id": {"in": ["b2", "b3"]}}),
        "--order", "asc", "--fields", "id,charset",
    )  # fmt: skip
    rows = json.loads(only.stdout)["data"]
    assert [row["record_id"] for row in rows] == ["b2", "b3"]
    assert set(rows[0]["data"]) == {"id", "charset"}
    text = run(url, "records", "list", BODIES, "--grant", grant, "--limit", "2", "--format", "text")
    lines = [json.loads(line) for line in text.stdout.splitlines()]
    assert lines[0]["results"] == 2
    assert lines[0]["next"]["tool"] == "query_records"
    assert all(line["fetch"]["tool"] == "fetch" for line in lines[1:])
    changes = run(url, "records", "list", BODIES, "--grant", grant, "--changes-since", "beginning")
    assert changes.exit_code == 0, changes.stderr


def test_records_list_bad_input_is_an_envelope(url: str, tmp_path: Path) -> None:  # noqa: F811
    grant = write_grant(tmp_path, {"name": BODIES, "fields": ["id", "body_text"]})
    cases = [
        (["--filter", "{not json"], "invalid_filter", "filter"),
        (["--filter", json.dumps({"charset": "x"})], "field_not_granted", "filter"),
        (["--fields", "charset"], "field_not_granted", "fields"),
        (["--limit", "0"], "invalid_request", "limit"),
        (["--order", "sideways"], "invalid_request", "order"),
        (["--count", "some"], "invalid_request", "count"),
        (["--cursor", "zz"], "invalid_cursor", "cursor"),
    ]
    for options, code, param in cases:
        result = run(url, "records", "list", BODIES, "--grant", grant, *options)
        assert result.exit_code == 1, (options, result.output)
        error = envelope(result)
        assert (error["code"], error.get("param")) == (code, param), options
    other = run(url, "records", "list", "attachments", "--grant", grant)
    assert envelope(other)["code"] == "grant_stream_not_allowed"


def test_grant_describe_one_stream_with_figures(url: str, tmp_path: Path) -> None:  # noqa: F811
    grant = write_grant(tmp_path, {"name": BODIES}, {"name": "attachments"})
    result = run(url, "grant", "describe", "--grant", grant, "--stream", BODIES)
    assert result.exit_code == 0, result.stderr
    (stream,) = json.loads(result.stdout)["streams"]
    assert (stream["name"], stream["record_count"]) == (BODIES, 3)
    assert stream["order"]["field"] == "message_received_at"
    text = run(url, "grant", "describe", "--grant", grant, "--format", "text")
    lines = [json.loads(line) for line in text.stdout.splitlines()]
    listed = {line["stream"]: line for line in lines[1:]}
    assert listed[BODIES]["records"] == 3
    assert listed[BODIES]["list"] == {"tool": "query_records", "arguments": {"stream": BODIES}}
    refused = run(url, "grant", "describe", "--grant", grant, "--stream", "messages")
    assert envelope(refused)["code"] == "grant_stream_not_allowed"
