"""`TokensFile`: the server's tokens file as a resolver, read again whenever it changes.

    {"tok_alice_0123456789abcdef": {"grant_id": "g1", "streams": [...]},   a grant carried inline
     "tok_bob_0123456789abcdef": "g2",                                    a stored grant, by id
     "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": "g3"}
                                                                           a token kept hashed

Rules:
1. The file is checked as a whole when the resolver is made (a bad file is `invalid_tokens`
   naming the entry, and nothing starts) and read again on the first request after it changes
   (its inode, size, modification or change time differ): an edit applies without a restart.
2. A file that turns bad while serving fails closed: every request is `tokens_unavailable`
   (503) until the file is good again; the server logs the entry at fault (never a token).
3. A key is a bearer token (RFC 6750 `token68`, at least 16 characters), or `sha256:` and the
   64 lowercase hex digits of the token's SHA-256, so the file need not hold the secret. A
   value is a grant (its JSON), or a stored grant's id (a string, or an object holding only
   `grant_id`), which the served store must hold (`pdpp_store.auth` rule 2).
4. A presented token is compared with every entry in constant time (its SHA-256 with the
   hashed ones), so a refusal takes as long whatever the token.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pdpp_store import AsyncStore, BadRequest, Grant, StoreError, Unavailable, read_tokens_json
from pdpp_store.http import Access

from ._common import StoredGrants, invalid_token, missing_token

__all__ = ["TokensFile", "hash_token"]

MIN_TOKEN_CHARS = 16
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_HASHED = re.compile(r"sha256:([0-9a-f]{64})")

log = logging.getLogger("pdpp_store.auth")


def hash_token(token: str) -> str:
    """The key a tokens file may hold instead of `token` (rule 3)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def _invalid(message: str, param: str = "tokens") -> BadRequest:
    return BadRequest("invalid_tokens", message, param=param)


@dataclass(frozen=True, slots=True)
class _Entries:
    plain: tuple[tuple[bytes, Grant | str], ...]
    hashed: tuple[tuple[bytes, Grant | str], ...]

    def find(self, presented: str) -> Grant | str | None:
        found: Grant | str | None = None
        candidate = presented.encode()
        for token, target in self.plain:
            if hmac.compare_digest(token, candidate):
                found = target
        digest = hashlib.sha256(candidate).digest()
        for hashed, target in self.hashed:
            if hmac.compare_digest(hashed, digest):
                found = target
        return found


def _target(value: object, number: int) -> Grant | str:
    where = f"tokens[{number}]"
    named = (
        value["grant_id"] if isinstance(value, Mapping) and set(value) == {"grant_id"} else value
    )
    if isinstance(value, str) or named is not value:
        if not isinstance(named, str) or not named or "\x00" in named:
            raise _invalid(f"entry {number}: a grant id must be a non-empty string", where)
        return named
    try:
        return Grant.from_dict(value)
    except StoreError as error:
        param = where if error.param is None else f"{where}.{error.param}"
        raise _invalid(f"entry {number}: {error.message}", param) from None


def _entries(data: Mapping[Any, object]) -> _Entries:
    plain: list[tuple[bytes, Grant | str]] = []
    hashed: list[tuple[bytes, Grant | str]] = []
    for number, (key, value) in enumerate(data.items()):
        where = f"tokens[{number}]"
        digest = _HASHED.fullmatch(key) if isinstance(key, str) else None
        if digest is not None:
            hashed.append((bytes.fromhex(digest.group(1)), _target(value, number)))
            continue
        if not isinstance(key, str) or not _TOKEN68.fullmatch(key):
            raise _invalid(
                f"entry {number}: a token must be made of the characters A-Z a-z 0-9 - . _ ~ + / "
                "(then optional '=' padding), or be sha256: and 64 lowercase hex digits",
                where,
            )
        if len(key) < MIN_TOKEN_CHARS:
            raise _invalid(
                f"entry {number}: a token must be at least {MIN_TOKEN_CHARS} characters long",
                where,
            )
        plain.append((key.encode(), _target(value, number)))
    return _Entries(tuple(plain), tuple(hashed))


def _read(path: str) -> _Entries:
    return _entries(read_tokens_json(path))  # the file and its JSON: as `load_tokens` reads it


_Signature = tuple[int, int, int, int] | None


def _signature(path: str) -> _Signature:
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


class TokensFile:
    """A tokens file as a `pdpp_store.http.Resolver` (see the rules)."""

    authorization_servers: Sequence[str] = ()

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._signature = _signature(self._path)
        self._entries = _read(self._path)  # rule 1: a bad file starts nothing
        self._broken: StoreError | None = None
        self._stored = StoredGrants()

    def _current(self) -> _Entries:
        signature = _signature(self._path)
        if signature != self._signature:
            self._signature = signature
            try:
                self._entries = _read(self._path)
                self._broken = None
                log.info("tokens file read again: %d entries", self.size)
            except StoreError as error:
                self._broken = error
                log.warning("tokens file unusable, refusing every token: %s", error.param)
        if self._broken is not None:
            raise Unavailable(
                "tokens_unavailable",
                "the server's tokens file is not usable now; every token is refused until it is "
                "fixed",
            )
        return self._entries

    @property
    def size(self) -> int:
        return len(self._entries.plain) + len(self._entries.hashed)

    async def lookup(self, presented: str, store: AsyncStore) -> Access | None:
        target = self._current().find(presented)
        if target is None:
            return None
        if isinstance(target, Grant):
            return Access(target)
        return Access(await self._stored.grant(target, store))

    async def resolve(self, presented: str | None, store: AsyncStore) -> Access:
        if presented is None:
            raise missing_token()
        found = await self.lookup(presented, store)
        if found is None:
            raise invalid_token()
        return found
