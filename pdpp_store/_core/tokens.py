"""Bearer tokens: the tokens file that maps each token to the PDPP grant it carries
(docs/contract.md §10).

    {"tok_alice_0123456789abcdef": {"grant_id": "g1", "streams": [...]}, ...}

Owns: reading and checking that file for the servers (REST and the MCP mount share it). Pure
apart from reading the file: no store, no network.

Rules:
1. A tokens file that loads is valid: a JSON object, at least one entry, every token a bearer
   token (RFC 6750 `token68` characters, at least `MIN_TOKEN_CHARS` long), every value a grant
   that `Grant.from_dict` accepts, and no token written twice (JSON would silently keep the last).
2. Anything else is `invalid_tokens` (400), whose `param` names the place: `tokens` for the file
   as a whole, `tokens[N]` for the N-th entry (0-based, in file order), `tokens[N].<key>` for a
   key of its grant. A token is a secret: no message ever contains one. A path that cannot be
   read (missing, a directory, unreadable), a file over `MAX_TOKENS_FILE_BYTES`, or one that is
   not JSON (not UTF-8, a number past Python's digit limit, nested too deeply) is `tokens` too.
3. The result is a plain `dict[str, Grant]`; a token is a name for a grant, and the grant is
   applied again on every request (expiry and revocation are checked by each read).
4. `read_tokens_json` is the one reader of the file itself (rule 2's `tokens` errors, and the
   object's shape); `load_tokens` and the servers' re-read `pdpp_store.auth.TokensFile` (which
   also takes hashed tokens and stored grants' ids) both start from it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from .errors import BadRequest, StoreError
from .grants import Grant

__all__ = [
    "MAX_TOKENS_FILE_BYTES",
    "MIN_TOKEN_CHARS",
    "load_tokens",
    "read_tokens_json",
    "tokens_from_dict",
]

MIN_TOKEN_CHARS = 16
MAX_TOKENS_FILE_BYTES = 16 * 1024 * 1024
"""A tokens file larger than this is refused unread (a device such as /dev/zero never ends)."""
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def _invalid(message: str, param: str = "tokens") -> BadRequest:
    return BadRequest("invalid_tokens", message, param=param)


def _object(data: object) -> Mapping[Any, object]:
    if not isinstance(data, Mapping):
        raise _invalid("the tokens file must hold a JSON object mapping tokens to grants")
    if not data:
        raise _invalid("the tokens file holds no tokens")
    return data


def tokens_from_dict(data: object) -> dict[str, Grant]:
    """Check a decoded tokens object (see the rules) and return token -> grant."""
    tokens: dict[str, Grant] = {}
    for number, (token, raw_grant) in enumerate(_object(data).items()):
        where = f"tokens[{number}]"
        if not isinstance(token, str) or not _TOKEN68.fullmatch(token):
            raise _invalid(
                f"entry {number}: a token must be made of the characters A-Z a-z 0-9 - . _ ~ + / "
                "(then optional '=' padding)",
                where,
            )
        if len(token) < MIN_TOKEN_CHARS:
            raise _invalid(
                f"entry {number}: a token must be at least {MIN_TOKEN_CHARS} characters long",
                where,
            )
        try:
            tokens[token] = Grant.from_dict(raw_grant)
        except StoreError as error:
            param = where if error.param is None else f"{where}.{error.param}"
            raise _invalid(f"entry {number}: {error.message}", param) from None
    return tokens


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for number, (key, value) in enumerate(pairs):
        if key in seen:
            # Only the top level holds tokens; a repeated key inside a grant is just as wrong.
            raise _invalid(f"a key is written twice in one object (at position {number})")
        seen[key] = value
    return seen


def read_tokens_json(path: str | os.PathLike[str]) -> Mapping[Any, object]:
    """Read a tokens file and decode it: a non-empty JSON object, no key written twice, or
    `invalid_tokens` with `param` `tokens` (rule 2). Its entries are left to the caller."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_TOKENS_FILE_BYTES + 1)
    except OSError as error:  # missing, a directory, unreadable
        raise _invalid(f"the tokens file cannot be read: {error.strerror or error}") from None
    except (TypeError, ValueError) as error:  # not a path at all, or one with a NUL
        raise _invalid(f"the tokens file cannot be read: {error}") from None
    if len(raw) > MAX_TOKENS_FILE_BYTES:
        raise _invalid(f"the tokens file is larger than {MAX_TOKENS_FILE_BYTES:,} bytes")
    try:
        data = json.loads(raw, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as error:
        raise _invalid(f"the tokens file is not valid JSON: {error.msg}") from None
    except UnicodeDecodeError:
        raise _invalid("the tokens file is not valid JSON: it is not UTF-8") from None
    except ValueError:  # an integer beyond Python's digit limit
        raise _invalid("the tokens file is not valid JSON: a number is too long") from None
    except RecursionError:
        raise _invalid("the tokens file is not valid JSON: it is nested too deeply") from None
    return _object(data)


def load_tokens(path: str | os.PathLike[str]) -> dict[str, Grant]:
    """Read and check a tokens file (see the rules); `invalid_tokens` when it is not usable."""
    return tokens_from_dict(read_tokens_json(path))
