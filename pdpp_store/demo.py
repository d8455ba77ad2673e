"""`pdpp-store demo`: a realistic mailbox and chat, and the content ladder walked as an agent would.

Owns only the walkthrough. It registers two real connector manifests shipped as package data
(`_data/`, Apache-2.0, see `_data/LICENSE-NOTE`), ingests generated records, and calls the public
`Store` API step by step, printing each step compactly through `echo`: a title, its time in ms,
and small JSON excerpts. No value longer than a few dozen characters is ever printed, least of
all the multi-megabyte email body.

Rules:
1. The data is deterministic (a seeded generator), so every run prints the same offsets.
2. Only the public API is used, as an agent would: ids and blob ids are taken from what the
   store returned (the content ladder), not from the generator.
3. Like every surface, it imports public names only (a test walks the imports).
4. Running twice on one database works: manifests and connections are re-registered as they are,
   records come back `unchanged` (or `updated` where step 7 edited one).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from functools import partial
from importlib.resources import files
from time import perf_counter
from typing import Any, TypeVar

from sqlalchemy.engine import make_url

from . import FieldWindow, Grant, RecordRef, Store, StoreError, UpsertResult

__all__ = ["BIG_BODY_CHARS", "UNIQUE_PHRASE", "big_body", "run_demo"]

T = TypeVar("T")
Echo = Callable[[str], None]

GMAIL_CONNECTION = "cin_gmail_demo"
CHAT_CONNECTION = "cin_chatgpt_demo"
BIG_BODY_CHARS = 3_000_000
UNIQUE_PHRASE = "invoice INV-2026-0042 is overdue"
_TAIL_CHARS = 10_000  # text after the unique phrase, so that paging to the end takes a few pages
_EXCERPT_CHARS = 56


def _manifest(name: str) -> dict[str, Any]:
    text = files("pdpp_store").joinpath("_data", name).read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


# ---------------------------------------------------------------- deterministic data

_PEOPLE = (
    "Zoë Müller", "José Álvarez", "Søren Ødegaard", "Priya Raman", "François Dubois",
    "Łukasz Wiśniewski", "Chiara Bianchi", "Kwame Mensah", "Aiko Tanaka", "Jürgen Weiß",
)  # fmt: skip
_PLACES = ("Lisbon", "München", "Zürich", "Kraków", "São Paulo", "Malmö", "Reykjavík", "Montréal")
_TOPICS = (
    "the Q1 vendor reconciliation", "the data-retention review", "the café supplier contract",
    "the Lisbon offsite budget", "the Zürich office lease", "the customer-support rota",
    "the migration to the new ledger", "the naïve FX-rate assumption",
)  # fmt: skip
_MONTHS = ("January", "February", "March")
_SENTENCES = (
    "On {date}, {person} confirmed that {topic} is on track, pending sign-off from {other}.",
    "{person} flagged a discrepancy of €{amount} in {topic}; see invoice {invoice} for details.",
    "Quick note from {place}: we met {other} about {topic} and agreed on next steps 😀.",
    "Please review the attached summary before {date}; {person} will circulate the minutes.",
    "{other} wrote: “Thanks — the numbers for {topic} look right, but let's re-check the rates.”",
    "The payment of €{amount} for {invoice} cleared on {date} (reference {ref}).",
    "Reminder: the workshop in {place} starts at {hour}:00; {person} brings the über-long agenda.",
    "{person} suggested archiving the threads about {topic} older than {date} ✅.",
    "Attached 📎 is the spreadsheet {other} asked for; the totals changed after {date}.",
    "I'll be in {place} until {date}, so please copy {other} on anything about {topic}.",
)


def _sentence(rng: random.Random) -> str:
    person, other = rng.sample(_PEOPLE, 2)
    return rng.choice(_SENTENCES).format(
        person=person,
        other=other,
        topic=rng.choice(_TOPICS),
        place=rng.choice(_PLACES),
        date=f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} 2026",
        amount=f"{rng.randint(100, 99_999):,}.{rng.randint(0, 99):02d}",
        invoice=f"INV-2025-{rng.randint(1, 9999):04d}",  # never the unique 2026 invoice
        ref=f"{rng.getrandbits(32):08X}",
        hour=rng.randint(8, 17),
    )


def _paragraphs(rng: random.Random, chars: int) -> Iterator[str]:
    """Paragraphs of 3 to 6 sentences until about `chars` characters have been produced."""
    produced = 0
    while produced < chars:
        paragraph = " ".join(_sentence(rng) for _ in range(rng.randint(3, 6)))
        produced += len(paragraph) + 2
        yield paragraph


def big_body(chars: int = BIG_BODY_CHARS, seed: int = 2026) -> str:
    """A prose-like email body of about `chars` code points with `UNIQUE_PHRASE` near the end."""
    rng = random.Random(seed)
    head = "\n\n".join(_paragraphs(rng, chars - _TAIL_CHARS))
    closing = (
        f"Final reminder from accounts: {UNIQUE_PHRASE} since 15 March 2026 — please settle the "
        "€12,480.00 balance of INV-2026-0042 before the end of the month."
    )
    tail = "\n\n".join(_paragraphs(rng, _TAIL_CHARS))
    return f"Dear all,\n\n{head}\n\n{closing}\n\n{tail}\n\nBest regards,\nZoë Müller\n"


def _pdf_bytes() -> bytes:
    """A small, PDF-like invoice (header, objects, a text stream, trailer)."""
    lines = [f"({i:02d}  Consulting, March 2026  {i * 310:>8,}.00 EUR) Tj T*" for i in range(1, 40)]
    content = f"BT /F1 11 Tf 72 760 Td 14 TL (Invoice INV-2026-0042) Tj T* {' '.join(lines)} ET"
    return (
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"
        b"1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
        b"2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n"
        b"3 0 obj << /Type /Page /Parent 2 0 R /Contents 4 0 R >> endobj\n"
        + f"4 0 obj << /Length {len(content)} >> stream\n{content}\nendstream endobj\n".encode()
        + b"trailer << /Root 1 0 R >>\n%%EOF\n"
    )


_MAIL = (
    # (id, from, subject, received_at, labels)
    ("18e2f9a0c41d7b01", "Zoë Müller <zoe.mueller@example.de>",
     "Quarterly vendor reconciliation — Q1 2026", "2026-03-30T08:14:05Z", ["INBOX", "IMPORTANT"]),
    ("18e2f9a0c41d7b02", "José Álvarez <jose.alvarez@example.pt>",
     "Re: Offsite in Lisbon 🇵🇹", "2026-03-28T17:42:51Z", ["INBOX"]),
    ("18e2f9a0c41d7b03", "Søren Ødegaard <soren@example.no>",
     "Your March statement is ready", "2026-03-02T06:00:00Z", ["INBOX", "CATEGORY_UPDATES"]),
    ("18e2f9a0c41d7b04", "Priya Raman <priya.raman@example.in>",
     "Lunch on Thursday? 🍜", "2026-02-17T11:20:13Z", ["INBOX", "STARRED"]),
    ("18e2f9a0c41d7b05", "Zoë Müller <zoe.mueller@example.de>",
     "Vendor list for the reconciliation", "2026-03-12T09:30:00Z", ["INBOX"]),
    ("18e2f9a0c41d7b06", "Zoë Müller <zoe.mueller@example.de>",
     "Kick-off: Q1 reconciliation", "2026-02-03T16:05:00Z", ["INBOX"]),
)  # fmt: skip
_SENDER = "Zoë Müller"
_MONTH = {"gte": "2026-03-01T00:00:00Z", "lt": "2026-04-01T00:00:00Z"}


def _body_record(index: int, text: str) -> dict[str, Any]:
    msg_id, _, subject, received_at, _ = _MAIL[index]
    return {
        "id": msg_id, "message_id": msg_id, "message_received_at": received_at,
        "body_text": text, "body_html": f"<html><body><p>{subject}</p></body></html>",
        "body_text_bytes": len(text.encode()), "body_html_bytes": None,
        "body_source": "text_plain", "content_languages": ["en"], "charset": "utf-8",
    }  # fmt: skip


def _mailbox(body: str, blob_ref: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The gmail records: messages, their bodies (the first one is `body`), one attachment."""
    rng = random.Random(7)
    messages, bodies = [], []
    for index, (msg_id, sender, subject, received_at, labels) in enumerate(_MAIL):
        name, email = sender.removesuffix(">").split(" <")
        text = body if index == 0 else "\n\n".join(_paragraphs(rng, 600 + 400 * index))
        messages.append(
            {
                "id": msg_id, "thread_id": f"thr_{msg_id[-4:]}", "subject": subject,
                "from_name": name, "from_email": email, "to": ["me@example.com"], "cc": [],
                "bcc": [], "reply_to": [], "date": received_at, "received_at": received_at,
                "message_id": f"<{msg_id}@mail.example.com>", "in_reply_to": None,
                "references": [], "size_bytes": len(text.encode()) + 2048, "labels": labels,
                "is_draft": False, "is_flagged": "STARRED" in labels, "is_seen": index > 0,
                "is_answered": False, "has_attachments": index == 0,
                "snippet": text[:140].replace("\n", " "),
            }
        )  # fmt: skip
        bodies.append(_body_record(index, text))
    first_id, received_at = _MAIL[0][0], _MAIL[0][3]
    attachment = {
        "id": f"{first_id}.2", "message_id": first_id, "filename": "INV-2026-0042.pdf",
        "content_type": "application/pdf", "size_bytes": blob_ref["size_bytes"],
        "content_id": None, "is_inline": False, "encoding": "base64", "part_index": "2",
        "message_received_at": received_at, "blob_ref": blob_ref,
        "content_sha256": blob_ref["sha256"], "hydration_status": "hydrated",
        "hydration_error": None,
    }  # fmt: skip
    return {"messages": messages, "message_bodies": bodies, "attachments": [attachment]}


def _chat() -> list[dict[str, Any]]:
    """A ChatGPT conversation flattened to messages; one assistant answer is long."""
    rng = random.Random(11)
    turns = [
        ("user", "Help me plan a 3-day team offsite in Lisbon for 12 people, budget €9,000."),
        ("assistant", "\n\n".join(_paragraphs(rng, 6000))),
        ("user", "Can you make day 2 lighter? José can't stand long walks 😅"),
        ("assistant", "Sure — day 2 starts at 10:00 with a tram ride to Belém, pastéis included."),
        ("user", "Perfect. Draft the invitation email for Zoë to send."),
        ("assistant", "Subject: Lisbon offsite, 12 to 14 May 🇵🇹\n\nHi all, …"),
    ]  # fmt: skip
    out: list[dict[str, Any]] = []
    for index, (role, content) in enumerate(turns):
        msg_id = f"msg-{index + 1:02d}"
        out.append(
            {
                "id": msg_id, "conversation_id": "conv-lisbon-offsite",
                "parent_id": f"msg-{index:02d}" if index else None,
                "children_ids": [f"msg-{index + 2:02d}"] if index + 1 < len(turns) else [],
                "role": role, "content": content, "content_type": "text",
                "model_slug": "gpt-4o" if role == "assistant" else None,
                "create_time": f"2026-03-{20 + index // 2:02d}T09:{index * 7:02d}:00Z",
                "finish_reason": "stop" if role == "assistant" else None,
                "citations": [], "tool_calls": [], "attachment_ids": [], "on_current_branch": True,
            }
        )  # fmt: skip
    return out


def _agent_grant() -> Grant:
    """What the user granted the agent: some fields of three gmail streams, from 2026 on."""
    since = {"since": "2026-01-01T00:00:00Z"}
    return Grant.from_dict(
        {
            "grant_id": "grt_demo_assistant",
            "status": "active",
            "streams": [
                {
                    "name": "messages",
                    "instance_ids": [GMAIL_CONNECTION],
                    "fields": ["id", "thread_id", "subject", "from_name", "received_at"],
                    "time_constraint": {"field": "received_at", **since},
                },
                {
                    "name": "message_bodies",
                    "instance_ids": [GMAIL_CONNECTION],
                    "fields": ["id", "message_id", "message_received_at", "body_text"],
                    "time_constraint": {"field": "message_received_at", **since},
                },
                {
                    "name": "attachments",
                    "instance_ids": [GMAIL_CONNECTION],
                    "fields": ["id", "filename", "content_type", "size_bytes", "blob_ref"],
                },
            ],
        }
    )


def _chat_grant() -> Grant:
    return Grant.from_dict(
        {
            "grant_id": "grt_demo_chat",
            "streams": [
                {
                    "name": "messages",
                    "instance_ids": [CHAT_CONNECTION],
                    "fields": ["id", "conversation_id", "role", "content", "create_time"],
                }
            ],
        }
    )


# ---------------------------------------------------------------- printing


def _short(value: Any, width: int = _EXCERPT_CHARS) -> Any:
    """`value` with every long string cut to `width` characters and long lists to 4 items."""
    if isinstance(value, str) and len(value) > width:
        return f"{value[:width]}…(+{len(value) - width:,} chars)"
    if isinstance(value, dict):
        return {key: _short(item, width) for key, item in value.items()}
    if isinstance(value, list):
        items = [_short(item, width) for item in value[:4]]
        return [*items, f"…(+{len(value) - 4} items)"] if len(value) > 4 else items
    return value


def _json(value: Any, width: int = _EXCERPT_CHARS) -> str:
    return json.dumps(_short(value, width), ensure_ascii=False)


def _timed(call: Callable[[], T]) -> tuple[T, float]:
    start = perf_counter()
    result = call()
    return result, (perf_counter() - start) * 1000


def _refused(call: Callable[[], object]) -> tuple[StoreError, float]:
    start = perf_counter()
    try:
        call()
    except StoreError as error:
        return error, (perf_counter() - start) * 1000
    raise AssertionError("the demo expected this read to be refused")


def _counts(result: UpsertResult) -> str:
    return ", ".join(f"{count} {key}" for key, count in result.to_dict().items())


def _range(window: FieldWindow) -> str:
    return f"{window.start_chars:,}\N{EN DASH}{window.end_chars:,} of {window.total_chars:,} chars"


class _Walk:
    """The walkthrough: setup, then steps (0) to (7), each printed as it completes; (0) asks a
    question (`query_records`) before it searches."""

    def __init__(self, store: Store, echo: Echo) -> None:
        self.store = store
        self.echo = echo
        self.store_ms = 0.0
        self.grant, self.chat_grant = _agent_grant(), _chat_grant()
        self.big = RecordRef(GMAIL_CONNECTION, "message_bodies", _MAIL[0][0])
        self.attachment = RecordRef(GMAIL_CONNECTION, "attachments", f"{_MAIL[0][0]}.2")
        self.long_chat = RecordRef(CHAT_CONNECTION, "messages", "msg-02")

    def title(self, text: str, ms: float, *, store_call: bool = True) -> None:
        if store_call:
            self.store_ms += ms
        self.echo(f"{text:<84} {ms:>9.1f} ms")

    def line(self, text: str) -> None:
        self.echo(f"    {text}")

    def window(self, **selector: Any) -> tuple[FieldWindow, float]:
        """A window of the big email body under the agent's grant, timed."""
        read = partial(self.store.read_field_window, self.grant, self.big, "body_text")
        return _timed(partial(read, **selector))

    def run(self) -> None:
        self.setup()
        self.echo("")
        self.echo(f"The agent holds grant {self.grant.grant_id!r}, which covers only:")
        for stream in self.grant.streams:
            self.line(f"{stream.name}: {', '.join(sorted(stream.fields or ()))}")
        self.echo("")
        self.ask()
        self.search()
        self.project()
        early_cursor = self.at_offset()
        self.page(self.match())
        self.not_granted()
        self.blob()
        self.stale(early_cursor)
        self.echo("")
        self.echo(f"{'total time in store calls':<84} {self.store_ms:>9.1f} ms")

    def setup(self) -> None:
        store = self.store
        self.echo("Setup")
        gmail, chatgpt = _manifest("gmail.json"), _manifest("chatgpt.json")

        def register() -> None:
            store.register_manifest(gmail)
            store.register_manifest(chatgpt)
            store.add_connection(GMAIL_CONNECTION, gmail["connector_id"])
            store.add_connection(CHAT_CONNECTION, chatgpt["connector_id"])

        _, ms = _timed(register)
        self.title("  register_manifest gmail, chatgpt; add_connection x2", ms)
        body, ms = _timed(big_body)
        size = f"{len(body):,} chars, {len(body.encode()) / 1e6:.1f} MB of UTF-8"
        self.title(f"  generated the big email body: {size}", ms, store_call=False)
        blob, ms = _timed(partial(store.put_blob, _pdf_bytes(), "application/pdf"))
        self.title(f"  put_blob INV-2026-0042.pdf: {blob.size_bytes:,} bytes, {blob.mime_type}", ms)
        batches = [
            (GMAIL_CONNECTION, stream, records)
            for stream, records in _mailbox(body, blob.as_ref()).items()
        ]
        batches.append((CHAT_CONNECTION, "messages", _chat()))
        for connection, stream, records in batches:
            result, ms = _timed(partial(store.upsert_records, connection, stream, records))
            self.title(f"  upsert_records {connection}/{stream}: {_counts(result)}", ms)

    def ask(self) -> None:
        """(0) The first rung is a question, not a record id: what the grant lets the agent ask
        of `messages` (discovery), then the newest messages from a sender in a month (a filter
        on the sender and a range on the order field), then the evidence the newest one opens."""
        schema, ms = _timed(partial(self.store.describe_grant, self.grant, stream="messages"))
        stream = schema.streams[0]
        self.title("(0) describe_grant stream='messages': what may be asked", ms)
        order = stream.order
        self.line(
            f"{stream.record_count} visible records, ordered by {order.field} from "
            f"{order.oldest} to {order.newest}; last written {stream.last_written_at}"
        )
        asked = {name: list(ops) for name, ops in stream.filters.items() if name == "from_name"}
        self.line(f"filters include {_json(asked)} and {order.field}: ranges")
        question = {"from_name": _SENDER, order.field or "received_at": _MONTH}
        ask = partial(
            self.store.query_records, self.grant, "messages", filter=question, count="exact"
        )
        page, ms = _timed(partial(ask, limit=5))
        self.title("(0) query_records: the newest messages from Zoë in March 2026", ms)
        self.line(f"filter {_json(question, 40)}")
        self.line(f"{page.count} match, {_json(page.order.to_dict())}")
        for row in page.records:
            card = row.card.to_dict()
            slots = {slot: card[slot]["value"] for slot in ("time", "title") if slot in card}
            self.line(f"{row.ref.id}  {_json(slots)}")
        if not page.records:
            return
        newest = page.records[0]
        record, ms = _timed(partial(self.store.read_record, self.grant, newest.ref.id))
        self.title("(0) read_record of the newest: the row's own read call", ms)
        self.line(f"{_json(newest.read.to_dict(), 40)}")
        shown = record.to_dict()["data"]
        self.line(f"granted fields {_json(sorted(shown))}, subject {_json(shown.get('subject'))}")
        body = RecordRef(GMAIL_CONNECTION, "message_bodies", newest.ref.record_id)
        view, ms = _timed(partial(self.store.read_record, self.grant, body))
        ladder = view.to_dict()["content_ladder"].get("body_text", {})
        self.title("(0) read_record of its body: the evidence, a preview and its ladder", ms)
        self.line(
            f"body_text {ladder.get('size_chars', 0):,} chars, preview "
            f"{ladder.get('preview_status')}, read on: {_json(ladder.get('read'), 40)}"
        )

    def search(self) -> None:
        """(0) The first rung: a question, not a record id. Search, ranked (best first, each hit
        with its score and card), then the proven evidence of a hit, the read it names, and
        the next occurrence of the same term."""
        ranked, ms = _timed(
            partial(self.store.search, self.grant, "reconciliation", streams=["messages"])
        )
        self.title("(0) search q='reconciliation' in messages: best first, by relevance", ms)
        for hit in ranked.hits:
            card = hit.card.to_dict() if hit.card is not None else {}
            slots = {slot: card[slot]["value"] for slot in ("time", "title") if slot in card}
            self.line(f"score {hit.score or 0.0:.3f}  {hit.record_id}  {_json(slots)}")
        q = "INV-2026-0042 overdue"
        page, ms = _timed(partial(self.store.search, self.grant, q, limit=5))
        self.title(f"(0) search q={q!r} under the grant", ms)
        if not page.hits:
            self.line("no hits")
            return
        for hit in page.hits:
            self.line(
                f"hit {hit.id}: matched_fields {', '.join(e.field_path for e in hit.excerpts)}"
            )
        excerpt = page.hits[0].excerpts[0]
        self.line(
            f"evidence: {excerpt.field_path} {excerpt.match_start_chars:,}\N{EN DASH}"
            f"{excerpt.match_end_chars:,} of {excerpt.total_chars:,} chars, digest "
            f"{excerpt.digest[:19]}…"
        )
        self.line(
            f"preview {excerpt.start_chars:,}\N{EN DASH}{excerpt.end_chars:,} (unmarked): "
            f"{_json(excerpt.preview_text, 72)}"
        )
        self.line(f"read: {_json(excerpt.read.to_dict(), 40)}")
        args = dict(excerpt.read.arguments)
        read = partial(
            self.store.read_field_window, self.grant, args.pop("record"), args.pop("field")
        )
        window, ms = _timed(partial(read, **args))
        self.title("    read_field_window with the evidence's own arguments", ms)
        self.line(
            f"window {_range(window)}, match at {window.match_start_chars:,}\N{EN DASH}"
            f"{window.match_end_chars:,}: the same place, digest {window.field.digest[:19]}…"
        )
        if window.next_match_cursor is None:
            return
        following, ms = _timed(partial(read, cursor=window.next_match_cursor))
        self.title("    read_field_window with next_match_cursor: the next occurrence", ms)
        assert following.match_start_chars is not None
        at = following.match_start_chars - following.start_chars
        around = following.text[max(0, at - 30) : at + len(excerpt.term) + 30]
        self.line(
            f"match at {following.match_start_chars:,}\N{EN DASH}{following.match_end_chars:,}"
            f" of the window {_range(following)}: …{json.dumps(around, ensure_ascii=False)}…"
        )

    def project(self) -> None:
        """(1) A projected record: granted fields only, long text as a preview plus ladder."""
        view, ms = _timed(partial(self.store.read_record, self.grant, self.big.id))
        record = view.to_dict()
        ladder = record["content_ladder"]["body_text"]
        self.title("(1) read_record: the big email body, projected under the grant", ms)
        self.line(f"{record['id']}  revision {record['revision'][:23]}…")
        self.line(f"data has the granted fields only: {', '.join(record['data'])}")
        self.line(f"data.body_text (a preview): {_json(record['data']['body_text'], 40)}")
        self.line(f"content_ladder.body_text: {_json(ladder, 24)}")
        chat, ms = _timed(partial(self.store.read_record, self.chat_grant, self.long_chat))
        answer = chat.to_dict()["content_ladder"]["content"]
        self.title("    and a long ChatGPT answer, under the chat grant", ms)
        self.line(f"content: {answer['size_chars']:,} chars, {answer['preview_status']}; "
                  f"continue with {_json(answer['read']['arguments'], 24)}")  # fmt: skip

    def at_offset(self) -> str | None:
        """(2) A window at an offset; its next_cursor is kept for step (7)."""
        at = 1_000_000
        window, ms = self.window(offset_chars=at, limit_chars=400)
        self.title(f"(2) read_field_window at offset_chars={at:,}, limit_chars=400", ms)
        self.line(f"{_range(window)}: {_json(window.text, 64)}")
        self.line(f"next_cursor {_json(window.next_cursor, 24)}")
        return window.next_cursor

    def match(self) -> FieldWindow:
        """(3) A match-centred window for the phrase near the end of the body."""
        q = "inv-2026-0042 IS OVERDUE"
        window, ms = self.window(q=q, before_chars=60, after_chars=60)
        self.title(f"(3) read_field_window q={q!r}, 60 chars either side", ms)
        match = f"{window.match_start_chars:,}\N{EN DASH}{window.match_end_chars:,}"
        self.line(f"first match (case-insensitive) at {match} of {window.total_chars:,} chars")
        self.line(f"window {_range(window)}: {json.dumps(window.text, ensure_ascii=False)}")
        return window

    def page(self, window: FieldWindow) -> None:
        """(4) Paging with next_cursor from the match window to the end of the field."""
        lines: list[str] = []
        total_ms = 0.0
        while window.next_cursor is not None:
            window, ms = self.window(cursor=window.next_cursor, limit_chars=4096)
            total_ms += ms
            lines.append(f"page {len(lines) + 1}: {_range(window)}, has_more {window.has_more}, "
                         f"next_cursor {_json(window.next_cursor, 16)}  [{ms:.1f} ms]")  # fmt: skip
        self.title(
            f"(4) paging on with next_cursor, limit_chars=4096: {len(lines)} windows", total_ms
        )
        for text in lines:
            self.line(text)
        self.line(f"the field ends with {json.dumps(window.text[-26:], ensure_ascii=False)}; "
                  f"previous_cursor {_json(window.previous_cursor, 16)}")  # fmt: skip

    def not_granted(self) -> None:
        """(5) A field the grant does not cover: refused before any record row is read."""
        read = partial(self.store.read_field_window, self.grant, self.big, "body_html")
        error, ms = _refused(read)
        self.title("(5) read_field_window of body_html, which the grant does not cover", ms)
        self.line(_json(error.to_dict(), 80))

    def blob(self) -> None:
        """(6) The attachment: its blob_ref is metadata-only; the blob through the grant."""
        store, grant = self.store, self.grant
        view, ms = _timed(partial(store.read_record, grant, self.attachment))
        ladder = view.to_dict()["content_ladder"]["blob_ref"]
        self.title("(6) read_record of the PDF attachment: blob_ref is metadata-only", ms)
        self.line(f"content_ladder.blob_ref: {_json(ladder, 24)}")
        info, ms = _timed(partial(store.blob_info, grant, ladder["blob_id"]))
        self.title("    blob_info(blob_id taken from the ladder)", ms)
        self.line(_json(info.to_dict(), 24))
        head, ms = _timed(partial(store.read_blob_range, grant, info.blob_id, 0, 8))
        self.title("    read_blob_range(offset_bytes=0, length_bytes=8)", ms)
        self.line(f"{head.data!r}, has_more {head.has_more}")
        error, ms = _refused(partial(store.read_field_window, grant, self.attachment, "blob_ref"))
        self.title("    read_field_window of blob_ref: refused, with the metadata", ms)
        self.line(_json(error.to_dict(), 24))

    def stale(self, early_cursor: str | None) -> None:
        """(7) The email changes; a cursor minted before the change is stale."""
        edited = _body_record(0, big_body() + "\nP.S. Paid on 2 April 2026, thanks!\n")
        write = partial(self.store.upsert_records, self.big.connection_id, self.big.stream)
        result, ms = _timed(partial(write, [edited]))
        self.title(f"(7) the email is re-synced with a P.S.: {_counts(result)}", ms)
        error, ms = _refused(partial(self.window, cursor=early_cursor))
        self.title("    read_field_window with the next_cursor kept from step (2)", ms)
        self.line(_json(error.to_dict(), 80))


def run_demo(url: str, echo: Echo) -> None:
    """Open the store at `url`, load the demo data and walk the content ladder, printing it."""
    echo(f"pdpp-store demo on {make_url(url).render_as_string(hide_password=True)}")
    echo("")
    with Store.open(url) as store:
        _Walk(store, echo).run()
