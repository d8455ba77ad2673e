"""The error tree: every failure the store reports is a `StoreError`.

    StoreError                      code, http_status, param, details
    ├── BadRequest (400)            invalid_window, invalid_field_path, invalid_cursor,
    │                               invalid_request, invalid_record, invalid_manifest,
    │                               invalid_grant, invalid_identifier, invalid_filter
    ├── Forbidden (403)             grant_stream_not_allowed, field_not_granted,
    │                               grant_expired, grant_revoked
    ├── NotFound (404)              not_found, field_not_found, query_not_found,
    │                               stream_not_declared, connection_not_found, blob_not_found
    ├── Conflict (409)              stale_cursor, ambiguous_connection, conflicting_connection_id
    ├── Unprocessable (422)         field_not_text
    └── Unavailable (503)           storage_unavailable, storage_busy, storage_error
                                    (and write_conflict is a Conflict: retry)

Rules:
1. `code` is stable and machine-readable; `message` is for people and names the parameter, field
   or record where that is safe (never the content of a field the grant does not cover).
2. Database exceptions are translated in exactly one place (`_runtime.errors.translating`, the
   context manager every boundary enters); no other module catches SQLAlchemy or DBAPI errors.
3. `details` carries extra, safe, JSON-ready facts (the current digest of a stale cursor, a
   binary field's metadata) and is rendered under the error envelope.
4. A caller's value named in a message goes through `shown`, which cannot fail: an integer past
   Python's digit limit for `str` (4,300) would make `repr` raise `ValueError` instead of the
   typed error being raised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "NotFound",
    "StoreError",
    "Unavailable",
    "Unprocessable",
    "shown",
]

_SHOWN_BITS = 1024
"""Integers longer than this (about 300 digits) are described, not written out, by `shown`."""


def shown(value: object) -> str:
    """`repr(value)` for a message, except an integer too long to write (rule 4): then how many
    digits it has, roughly, and its sign."""
    if isinstance(value, int) and not isinstance(value, bool):
        bits = abs(value).bit_length()
        if bits > _SHOWN_BITS:  # never converted to text
            digits = int(bits * math.log10(2)) + 1
            sign = "a negative" if value < 0 else "an"
            return f"<{sign} integer of about {digits:,} digits>"
    return repr(value)


class StoreError(Exception):
    """Root of every error raised by `pdpp_store`."""

    http_status: ClassVar[int] = 500
    error_type: ClassVar[str] = "store_error"

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.details: dict[str, Any] = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        """The wire envelope: `{"error": {"type", "code", "message", "param"?, ...details}}`."""
        body: dict[str, Any] = {
            "type": self.error_type,
            "code": self.code,
            "message": self.message,
        }
        if self.param is not None:
            body["param"] = self.param
        body.update(self.details)
        return {"error": body}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class BadRequest(StoreError):
    http_status = 400
    error_type = "invalid_request_error"


class Forbidden(StoreError):
    http_status = 403
    error_type = "permission_error"


class NotFound(StoreError):
    http_status = 404
    error_type = "not_found_error"


class Conflict(StoreError):
    http_status = 409
    error_type = "conflict_error"


class Gone(StoreError):
    """What the request names is no longer kept (a changes bookmark older than the history)."""

    http_status = 410
    error_type = "gone_error"


class Unprocessable(StoreError):
    http_status = 422
    error_type = "unprocessable_error"


class Unavailable(StoreError):
    """The database could not be reached or refused the operation; the request may be retried."""

    http_status = 503
    error_type = "api_error"
