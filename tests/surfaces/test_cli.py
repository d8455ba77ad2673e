"""The command line (`pdpp_store.cli`), through click's CliRunner against real databases.

Each command is a thin shell over one library call, so these tests check the shell: arguments in,
JSON or text out, errors as envelopes with the right exit codes. Every test runs on every backend
(`db_url`), except the demo's, which makes its own SQLite file.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from _data import FIXTURES, MAILBOX, body, mixed_text
from click.testing import CliRunner, Result

from pdpp_store import fold
from pdpp_store.cli import cli
from pdpp_store.cli._io import json_lines

GMAIL = json.loads((FIXTURES / "manifests" / "gmail.json").read_text(encoding="utf-8"))
TEXT = mixed_text(5000)  # accents, CJK, combining marks and astral characters
REF = f"{MAILBOX}/message_bodies:b1"


def run(url: str, *args: str, input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", url, *args], input=input, catch_exceptions=False)


def envelope(result: Result) -> dict[str, Any]:
    """The error envelope a failed command printed on stderr (exactly one JSON line)."""
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    error: dict[str, Any] = json.loads(result.stderr)["error"]
    return error


def jsonl(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


@pytest.fixture
def url(db_url: str, tmp_path: Path) -> str:
    """A store with the gmail manifest, connection `MAILBOX` and three bodies (b1 is `TEXT`)."""
    assert run(db_url, "manifest", "add", str(FIXTURES / "manifests" / "gmail.json")).exit_code == 0
    assert run(db_url, "connection", "add", MAILBOX, GMAIL["connector_id"]).exit_code == 0
    path = tmp_path / "bodies.jsonl"
    path.write_text(jsonl(body("b1", TEXT), body("b2", "short"), body("b3", "")), encoding="utf-8")
    assert run(db_url, "ingest", "--quiet", MAILBOX, "message_bodies", str(path)).exit_code == 0
    return db_url


def window(url: str, *args: str) -> dict[str, Any]:
    result = run(url, "read", "field-window", *args)
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def write_grant(tmp_path: Path, *streams: dict[str, Any]) -> str:
    path = tmp_path / "grant.json"
    path.write_text(json.dumps({"grant_id": "g-cli", "streams": list(streams)}), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------- catalogue and ingestion


def test_connection_of_an_unknown_connector_is_an_envelope(url: str) -> None:
    result = run(url, "connection", "add", "cin_x", "https://example.com/no-such-connector")
    assert result.exit_code == 1
    assert envelope(result)["code"] == "invalid_request"
    assert envelope(result)["param"] == "connector_id"


def test_bad_manifest_file_is_a_usage_error(url: str, tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    result = run(url, "manifest", "add", str(path))
    assert result.exit_code == 2
    assert "broken.json is not valid JSON" in result.stderr


def test_ingest_prints_counts_and_reads_stdin(url: str) -> None:
    changed = jsonl(body("b1", TEXT + "!"), body("b2", "short"), body("b4", "new"))
    result = run(url, "ingest", "-q", MAILBOX, "message_bodies", "-", input=changed)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"inserted": 1, "updated": 1, "unchanged": 1}
    assert result.stderr == ""


def test_ingest_shows_progress_on_stderr_unless_quiet(url: str, tmp_path: Path) -> None:
    path = tmp_path / "again.jsonl"
    path.write_text(jsonl(body("b2", "short")), encoding="utf-8")
    shown = run(url, "ingest", MAILBOX, "message_bodies", str(path))
    assert shown.exit_code == 0
    assert "ingesting message_bodies" in shown.stderr
    assert json.loads(shown.stdout) == {"inserted": 0, "updated": 0, "unchanged": 1}
    assert run(url, "ingest", "--quiet", MAILBOX, "message_bodies", str(path)).stderr == ""


@pytest.mark.parametrize(
    ("line", "reason"),
    [("{oops}", "Expecting property name"), ("", "the line is empty"), ("[1", "Expecting")],
)
def test_bad_json_line_names_its_number(url: str, line: str, reason: str) -> None:
    data = jsonl(body("b9", "fine")) + line + "\n" + jsonl(body("b10", "never read"))
    result = run(url, "ingest", "-q", MAILBOX, "message_bodies", "-", input=data)
    assert result.exit_code == 1
    error = envelope(result)
    assert error["code"] == "invalid_record"
    assert error["line"] == 2
    assert "line 2 of <stdin>" in error["message"]
    assert reason in error["message"]
    # the batch with the bad line was not written
    assert envelope(run(url, "read", "record", f"{MAILBOX}/message_bodies:b9"))["code"] == (
        "not_found"
    )


def test_record_the_library_refuses_is_its_envelope(url: str) -> None:
    result = run(url, "ingest", "-q", MAILBOX, "message_bodies", "-", input="[1, 2]\n")
    assert result.exit_code == 1
    error = envelope(result)
    assert error["code"] == "invalid_record"
    assert "record #0" in error["message"]


def test_json_lines_are_read_lazily() -> None:
    advanced: list[int] = []
    data = b'{"a": 1}\n{"b": "\xc3\xa9"}\n'
    lines = json_lines(io.BytesIO(data), advanced.append)
    assert next(lines) == {"a": 1}
    assert advanced == [9]  # nothing beyond the first line has been read
    assert list(lines) == [{"b": "é"}]
    assert sum(advanced) == len(data)


# ---------------------------------------------------------------- field windows


def test_field_window_json_is_the_envelope(url: str) -> None:
    data = window(url, REF, "body_text", "--offset", "10", "--limit", "25")
    assert data["object"] == "field_window"
    assert data["connection_id"] == MAILBOX
    assert data["window"]["text"] == TEXT[10:35]
    assert data["window"]["start_chars"] == 10
    assert data["window"]["total_chars"] == len(TEXT)
    assert data["meta"] == {"warnings": []}


def test_field_window_text_format(url: str) -> None:
    result = run(url, "read", "field-window", REF, "body_text", "--limit", "30", "--format", "text")
    assert result.exit_code == 0
    header, text, cursors = split_text_output(result.stdout)
    assert (header["id"], header["field_path"], header["type"]) == (REF, "body_text", "string")
    assert (header["range"], header["total_chars"], header["complete"]) == ([0, 30], 5000, False)
    assert text == TEXT[:30]
    assert set(cursors) == {"next"}
    assert header["next"] == {
        "tool": "read_record_field",
        "arguments": {"id": REF, "field_path": "body_text", "cursor": cursors["next"]},
    }


def split_text_output(stdout: str) -> tuple[dict[str, Any], str, dict[str, str]]:
    """(header, window text, cursors by name) of `--format text` output: the MCP `content[]`
    text of the same read (a compact JSON header line, then the window's text verbatim)."""
    first, _, text = stdout.removesuffix("\n").partition("\n")
    header: dict[str, Any] = json.loads(first)
    cursors = {
        name: header[name]["arguments"]["cursor"]
        for name in ("next", "previous")
        if header[name] is not None
    }
    return header, text, cursors


def test_cursor_paging_prints_and_accepts_the_next_cursor(url: str) -> None:
    """Page through the whole field in text format; the pages concatenate to the field."""
    args = ["read", "field-window", REF, "body_text", "--format", "text", "--limit", "1500"]
    pages: list[str] = []
    previous: list[str] = []
    cursor: str | None = None
    while True:
        result = run(url, *args, *(["--cursor", cursor] if cursor else []))
        assert result.exit_code == 0, result.stderr
        _, text, cursors = split_text_output(result.stdout)
        pages.append(text)
        if "previous" in cursors:
            previous.append(cursors["previous"])
        cursor = cursors.get("next")
        if cursor is None:
            break
    assert "".join(pages) == TEXT
    assert len(pages) == 4
    assert len(previous) == 3  # every page after the first offers a way back


def test_cursor_paging_in_json(url: str) -> None:
    first = window(url, REF, "body_text", "--limit", "100")
    second = window(url, REF, "body_text", "--cursor", first["window"]["next_cursor"])
    assert second["window"]["start_chars"] == 100
    assert second["window"]["text"] == TEXT[100:200]
    back = window(url, REF, "body_text", "--cursor", second["window"]["previous_cursor"])
    assert back["window"]["text"] == TEXT[:100]


def test_match_window(url: str) -> None:
    target = TEXT[3000:3012]
    result = run(
        url, "read", "field-window", REF, "body_text", "--q", target.upper(),
        "--before", "5", "--after", "7", "--format", "text",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    start = fold(TEXT).find(fold(target))  # the store's folding keeps every length
    data = window(url, REF, "body_text", "--q", target, "--before", "5", "--after", "7")
    assert data["window"]["match_start_chars"] == start
    header, text, _ = split_text_output(result.stdout)
    assert header["match"] == [start, start + len(target)]
    assert text == TEXT[header["range"][0] : header["range"][1]]


def test_clamped_limit_warns_on_stderr_in_text(url: str) -> None:
    result = run(
        url, "read", "field-window", REF, "body_text", "--limit", "99999", "--format", "text"
    )
    assert result.exit_code == 0
    assert result.stderr == "warning: limit_clamped (limit_chars)\n"


def test_record_reference_forms(url: str) -> None:
    uri = json.loads(run(url, "read", "record", REF).stdout)["uri"]
    assert uri.startswith("pdpp://record/")
    by_uri = window(url, uri, "body_text", "--limit", "5")
    legacy = window(url, "message_bodies:b1", "body_text", "--connection", MAILBOX, "--limit", "5")
    assert by_uri["window"]["text"] == legacy["window"]["text"] == TEXT[:5]


def test_legacy_reference_without_connection_is_a_usage_error(url: str) -> None:
    result = run(url, "read", "field-window", "message_bodies:b1", "body_text")
    assert result.exit_code == 2
    assert "--connection" in result.stderr


def test_store_errors_are_envelopes_with_exit_code_1(url: str) -> None:
    result = run(url, "read", "field-window", REF, "body_text", "--offset", "3", "--q", "x")
    assert result.exit_code == 1
    error = envelope(result)
    assert error["code"] == "invalid_window"
    assert error["type"] == "invalid_request_error"
    result = run(url, "read", "field-window", REF, "body_text", "--cursor", "garbage")
    assert result.exit_code == 1
    assert envelope(result)["code"] == "invalid_cursor"


def test_stale_cursor_envelope_carries_the_digest(url: str) -> None:
    first = window(url, REF, "body_text", "--limit", "100")
    changed = jsonl(body("b1", TEXT + " edited"))
    assert run(url, "ingest", "-q", MAILBOX, "message_bodies", "-", input=changed).exit_code == 0
    result = run(url, "read", "field-window", REF, "body_text", "--cursor",
                 first["window"]["next_cursor"])  # fmt: skip
    assert result.exit_code == 1
    error = envelope(result)
    assert error["code"] == "stale_cursor"
    assert error["digest"].startswith("sha256:")


def test_grant_file_limits_fields(url: str, tmp_path: Path) -> None:
    grant = write_grant(
        tmp_path, {"name": "message_bodies", "instance_ids": [MAILBOX], "fields": ["id"]}
    )
    result = run(url, "read", "field-window", REF, "body_text", "--grant", grant)
    assert result.exit_code == 1
    assert envelope(result)["code"] == "field_not_granted"
    view = json.loads(run(url, "read", "record", REF, "--grant", grant).stdout)
    assert view["data"] == {"id": "b1"}


# ---------------------------------------------------------------- records and blobs


def test_read_record_prints_the_projection(url: str) -> None:
    result = run(url, "read", "record", REF)
    assert result.exit_code == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["object"] == "record"
    assert view["id"] == REF
    assert view["version"] == 1
    assert view["data"]["message_id"] == "m-b1"
    ladder = view["content_ladder"]["body_text"]
    assert ladder["preview_status"] == "truncated"
    assert ladder["size_chars"] == len(TEXT)
    assert TEXT.startswith(view["data"]["body_text"])


def test_missing_record_is_not_found(url: str) -> None:
    result = run(url, "read", "record", f"{MAILBOX}/message_bodies:nope")
    assert result.exit_code == 1
    assert envelope(result)["code"] == "not_found"


def test_blob_put_and_info(url: str, tmp_path: Path) -> None:
    pdf = tmp_path / "invoice.pdf"
    pdf.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 8)
    put = run(url, "blob", "put", str(pdf), "--mime-type", "application/pdf")
    assert put.exit_code == 0, put.stderr
    blob_ref = json.loads(put.stdout)
    assert blob_ref["blob_id"].startswith("blob_sha256_")
    assert blob_ref["size_bytes"] == pdf.stat().st_size
    grant = write_grant(tmp_path, {"name": "attachments", "instance_ids": [MAILBOX]})

    hidden = run(url, "blob", "info", blob_ref["blob_id"], "--grant", grant)
    assert hidden.exit_code == 1
    assert envelope(hidden)["code"] == "blob_not_found"  # no visible record references it yet

    attachment = {
        "id": "a1", "message_id": "m-b1", "part_index": "2", "hydration_status": "hydrated",
        "message_received_at": "2026-03-01T10:00:00Z", "blob_ref": blob_ref,
    }  # fmt: skip
    ingest = run(url, "ingest", "-q", MAILBOX, "attachments", "-", input=jsonl(attachment))
    assert ingest.exit_code == 0, ingest.stderr
    info = run(url, "blob", "info", blob_ref["blob_id"], "--grant", grant)
    assert info.exit_code == 0, info.stderr
    assert json.loads(info.stdout) == {"object": "blob", **blob_ref}
    refused = run(url, "read", "field-window", f"{MAILBOX}/attachments:a1", "blob_ref")
    assert envelope(refused)["code"] == "field_not_text"


def test_blob_read_writes_the_bytes_or_says_where_they_lie(url: str, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    blob = tmp_path / "data.bin"
    blob.write_bytes(data)
    blob_ref = json.loads(run(url, "blob", "put", str(blob), "--mime-type", "x/y").stdout)
    attachment = {
        "id": "a1", "message_id": "m-b1", "part_index": "2", "hydration_status": "hydrated",
        "message_received_at": "2026-03-01T10:00:00Z", "blob_ref": blob_ref,
    }  # fmt: skip
    assert (
        run(url, "ingest", "-q", MAILBOX, "attachments", "-", input=jsonl(attachment)).exit_code
        == 0
    )
    grant = write_grant(tmp_path, {"name": "attachments", "instance_ids": [MAILBOX]})
    args = ("blob", "read", blob_ref["blob_id"], "--grant", grant, "--offset", "10")
    raw = run(url, *args, "--length", "20")
    assert raw.exit_code == 0, raw.stderr
    assert raw.stdout_bytes == data[10:30]
    shown = run(url, *args, "--format", "json")
    assert json.loads(shown.stdout) == {
        "object": "blob_range",
        "blob": {"object": "blob", **blob_ref},
        "offset_bytes": 10,
        "length_bytes": len(data) - 10,
        "has_more": False,
    }
    hidden = run(url, "blob", "read", "blob_sha256_" + "0" * 64, "--grant", grant)
    assert envelope(hidden)["code"] == "blob_not_found"


def test_field_info_describes_without_the_value(url: str) -> None:
    result = run(url, "read", "field-info", REF, "body_text")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert (info["path"], info["size_chars"], info["text_like"]) == ("body_text", len(TEXT), True)
    assert TEXT[:50] not in result.stdout
    missing = run(url, "read", "field-info", REF, "nope")
    assert envelope(missing)["code"] == "field_not_found"


def test_resources_read_what_their_uris_name(url: str) -> None:
    view = json.loads(run(url, "read", "record", REF).stdout)
    record = run(url, "read", "resource", view["uri"])
    assert record.exit_code == 0, record.stderr
    assert json.loads(record.stdout) == view
    following = view["content_ladder"]["body_text"]["read"]
    window = run(url, "read", "resource", following["resource_uri"])
    assert window.exit_code == 0, window.stderr
    envelope_ = json.loads(window.stdout)
    assert envelope_["window"]["start_chars"] == 1024
    assert envelope_["window"]["text"] == TEXT[1024 : 1024 + 4096]
    bad = run(url, "read", "resource", "pdpp://record/???")
    assert envelope(bad)["code"] == "invalid_request"


def test_delete_then_the_record_is_not_found(url: str) -> None:
    assert run(url, "delete", MAILBOX, "message_bodies", "b2").exit_code == 0
    gone = run(url, "read", "record", f"{MAILBOX}/message_bodies:b2")
    assert envelope(gone)["code"] == "not_found"
    again = run(url, "delete", MAILBOX, "message_bodies", "b2")
    assert again.exit_code == 1
    assert envelope(again)["code"] == "not_found"


def test_rotating_the_cursor_key_keeps_old_cursors_valid(url: str) -> None:
    first = window(url, REF, "body_text", "--limit", "100")
    assert run(url, "cursor-key", "rotate").exit_code == 0
    after = window(url, REF, "body_text", "--cursor", first["window"]["next_cursor"])
    assert after["window"]["text"] == TEXT[100:200]
    fresh = window(url, REF, "body_text", "--limit", "100")
    assert fresh["window"]["next_cursor"] != first["window"]["next_cursor"]


def test_search_finds_the_record_and_says_how_to_read_the_match(url: str, tmp_path: Path) -> None:
    grant = write_grant(tmp_path, {"name": "message_bodies", "instance_ids": [MAILBOX]})
    term = TEXT[2000:2012].strip() or "short"
    result = run(url, "search", term, "--grant", grant, "--limit", "5")
    assert result.exit_code == 0, result.stderr
    page = json.loads(result.stdout)
    assert page["object"] == "list"
    assert REF in [hit["id"] for hit in page["data"]]
    hit = next(hit for hit in page["data"] if hit["id"] == REF)
    read = hit["evidence_excerpts"][0]["read"]
    assert read["operation"] == "read_field_window"
    arguments = read["arguments"]
    shown = window(url, arguments["record"], arguments["field"], "--q", arguments["q"])
    assert fold(term) in fold(shown["window"]["text"])
    title = {"field": "body_text", "value": TEXT[:200], "complete": len(TEXT) <= 200}
    assert hit["card"]["title"] == title  # the hit's record card
    text = run(url, "search", term, "--grant", grant, "--limit", "5", "--format", "text")
    lines = [json.loads(line) for line in text.stdout.splitlines()]
    (first,) = [line for line in lines[1:] if line["id"] == REF][:1]
    assert (first["title"], first["score"]) == (TEXT[:200], hit["score"])
    nothing = run(url, "search", "zzqqzzqq-no-such-text", "--grant", grant)
    assert json.loads(nothing.stdout)["data"] == []


def test_grant_describe_lists_the_granted_fields(url: str, tmp_path: Path) -> None:
    grant = write_grant(
        tmp_path, {"name": "message_bodies", "instance_ids": [MAILBOX], "fields": ["body_text"]}
    )
    result = run(url, "grant", "describe", "--grant", grant)
    assert result.exit_code == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["object"] == "grant_schema"
    (stream,) = schema["streams"]
    assert [field["path"] for field in stream["fields"]] == ["body_text"]
    assert stream["searchable_fields"] == ["body_text"]
    assert (schema["has_more"], schema["next"]) == (False, None)


def test_grant_describe_pages_the_streams(url: str, tmp_path: Path) -> None:
    grant = write_grant(tmp_path, {"name": "message_bodies"}, {"name": "attachments"})
    first = run(url, "grant", "describe", "--grant", grant, "--limit", "1")
    assert first.exit_code == 0, first.stderr
    page = json.loads(first.stdout)
    assert [s["name"] for s in page["streams"]] == ["attachments"]
    assert page["next"]["arguments"] == {"after": "attachments", "limit": 1}
    rest = run(url, "grant", "describe", "--grant", grant, "--limit", "1", "--after", "attachments")
    assert [s["name"] for s in json.loads(rest.stdout)["streams"]] == ["message_bodies"]
    bad = run(url, "grant", "describe", "--grant", grant, "--limit", "0")
    assert bad.exit_code == 1
    assert "limit" in bad.stderr


def test_blob_info_requires_a_grant(url: str) -> None:
    result = run(url, "blob", "info", "blob_sha256_00")
    assert result.exit_code == 2
    assert "--grant" in result.stderr


# ---------------------------------------------------------------- the global --db


def test_db_comes_from_the_environment(url: str) -> None:
    result = CliRunner(env={"PDPP_STORE_URL": url}).invoke(cli, ["read", "record", REF])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["id"] == REF


def test_a_store_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a SQLite database, not even its header" * 100)
    cases = {
        "not a url": "invalid_request",
        # A file in a directory that does not exist: the caller's URL is wrong (a 400).
        f"sqlite:///{tmp_path}/no/dir/x.db": "invalid_request",
        # A file that is there but is no database: the storage is at fault (a 503).
        f"sqlite:///{garbage}": "storage_unavailable",
    }
    for bad, code in cases.items():
        result = run(bad, "read", "record", REF)
        assert result.exit_code == 1
        assert json.loads(result.stderr)["error"]["code"] == code
        assert "Traceback" not in result.stderr


def test_help_lists_the_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("manifest", "connection", "ingest", "read", "blob", "demo"):
        assert command in result.stdout


# ---------------------------------------------------------------- the demo


def test_demo_walks_every_step_of_the_ladder(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert (tmp_path / "demo.db").exists()
    for step in range(8):
        assert f"({step}) " in out
    # the question comes before the search: two of Zoë's messages in March, newest first
    asked = out.index("(0) query_records")
    assert asked < out.index("(0) search")
    assert "2 match" in out
    newest, older = out.index("18e2f9a0c41d7b01  {"), out.index("18e2f9a0c41d7b05  {")
    assert asked < newest < older
    answered = out[asked : out.index("(0) read_record")]
    assert "18e2f9a0c41d7b06  {" not in answered  # Zoë's February message is outside the month
    # ranked search: Zoë's three reconciliation messages, best first (the shortest subject)
    assert out.index("(0) query_records") < out.index("(0) search q='reconciliation'")
    ranked = re.findall(r"score (\d\.\d{3})  (18e2f9a0c41d7b0\d)  \{", out)
    assert [record for _, record in ranked] == [f"18e2f9a0c41d7b0{n}" for n in (6, 5, 1)]
    scores = [float(score) for score, _ in ranked]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > scores[-1]
    hit = re.search(r"evidence: body_text ([\d,]+)\N{EN DASH}([\d,]+) of", out)
    assert hit is not None
    read = re.search(r"match at ([\d,]+)\N{EN DASH}([\d,]+): the same place", out)
    assert read is not None
    assert read.groups() == hit.groups()  # the continuation shows the evidence's match
    following = re.search(r"match at ([\d,]+)\N{EN DASH}[\d,]+ of the window", out)
    assert following is not None
    assert int(following[1].replace(",", "")) > int(hit[1].replace(",", ""))
    for code in ("field_not_granted", "field_not_text", "stale_cursor"):
        assert f'"code": "{code}"' in out
    assert '"preview_status": "truncated"' in out
    match = re.search(r"first match \(case-insensitive\) at ([\d,]+)", out)
    assert match is not None
    assert int(match[1].replace(",", "")) > 2_000_000
    assert "has_more False" in out  # paged to the very end
    assert "b'%PDF-1.7'" in out
    assert max(len(line) for line in out.splitlines()) < 600  # never a long value


@pytest.mark.postgres
def test_demo_on_postgres(pg_db_url: str) -> None:
    result = CliRunner().invoke(cli, ["demo", "--db", pg_db_url], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert '"code": "stale_cursor"' in result.stdout


def test_demo_in_a_temporary_directory_cleans_up() -> None:
    result = CliRunner().invoke(cli, ["demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    path = re.search(r"^pdpp-store demo on sqlite:///(\S+)$", result.stdout, re.MULTILINE)
    assert path is not None
    assert not Path(path[1]).exists()


def test_demo_runs_again_on_the_same_database(tmp_path: Path) -> None:
    for _ in range(2):
        result = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path)])
        assert result.exit_code == 0, result.output
    assert "1 unchanged" in result.stdout or "4 unchanged" in result.stdout


def test_demo_refuses_db_and_dir_together(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "--db", "sqlite://", "--dir", str(tmp_path)])
    assert result.exit_code == 2


def test_read_field_window_occurrence_and_next_match(url: str, tmp_path: Path) -> None:
    path = tmp_path / "rep.jsonl"
    path.write_text(jsonl(body("rep", "one two one two one")), encoding="utf-8")
    assert run(url, "ingest", "--quiet", MAILBOX, "message_bodies", str(path)).exit_code == 0
    ref = f"{MAILBOX}/message_bodies:rep"
    third = window(url, ref, "body_text", "--q", "ONE", "--occurrence", "3", "--before", "0")
    assert third["window"]["match_start_chars"] == 16
    assert third["window"]["next_match_cursor"] is None
    first = window(url, ref, "body_text", "--q", "two", "--before", "0", "--after", "0")
    follow = first["window"]["next_match_cursor"]
    second = window(url, ref, "body_text", "--cursor", follow)
    assert (second["window"]["match_start_chars"], second["window"]["text"]) == (12, "two")
    shown = run(url, "read", "field-window", ref, "body_text", "--q", "two", "--format", "text")
    assert shown.exit_code == 0, shown.stderr
    bad = run(url, "read", "field-window", ref, "body_text", "--occurrence", "2")
    assert bad.exit_code == 1
    assert envelope(bad)["param"] == "occurrence"
