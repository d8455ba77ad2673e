"""The door's bounds: one frozen value, each field a `serve` option.

Rules:
1. Every bound is a positive number (an `int` or a `float`, never a `bool`), and
   `max_request_line` is not more than `max_head_bytes`; else building `Limits` raises
   `BadRequest` naming the bound (`param`), so `serve` refuses a bad option with the envelope
   before it opens anything. A `Limits` that exists is valid.
2. The bounds are only stated here: the protocol applies those of heads, connections and writes
   (`_protocol`; `idle_timeout_s` is uvicorn's keep-alive timeout, which `serve` sets), the
   `Gate` a declared length and the token's streams (`_gate`), the middleware a body as it is
   read (`_middleware`). The defaults' reasons are in docs/decisions.md ("The door").
"""

from __future__ import annotations

from dataclasses import dataclass

from pdpp_store import BadRequest

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """The door's bounds (each a `serve` option; docs/decisions.md gives the defaults' reasons)."""

    max_head_bytes: int = 16 * 1024
    max_request_line: int = 8 * 1024
    max_headers: int = 100
    max_body_bytes: int = 1024 * 1024
    max_mcp_body_bytes: int = 4 * 1024 * 1024
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    write_timeout_s: float = 30.0
    max_connections: int = 1000
    max_mcp_streams_per_token: int = 16

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise BadRequest("invalid_request", f"{name} must be a positive number", param=name)
        if self.max_request_line > self.max_head_bytes:
            raise BadRequest(
                "invalid_request",
                "max_request_line must not be more than max_head_bytes",
                param="max_request_line",
            )
