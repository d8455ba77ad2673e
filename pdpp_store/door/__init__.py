"""`pdpp_store.door`: the limits `pdpp-store serve` applies before any request reaches an app.

    limits = Limits(max_head_bytes=16384, ...)             # the configurable bounds (`serve`)
    gate = Gate(limits, names)                              # a head's checks, and MCP streams
    config = uvicorn.Config(app, http=door_protocol(limits, gate))  # heads, timeouts, refusals
    app = DoorMiddleware(app, limits, names, gate)          # bodies, and what CORS must answer

Two layers, both in front of authentication (nothing here reads a token or the database):

- `DoorProtocol`, uvicorn's httptools protocol with bounds: it feeds the HTTP parser at most
  `max_head_bytes` of a request head, so a 100 MB header costs 16 KiB of parsing, not 100 MB,
  and judges each complete head by the `Gate` before any task is made for it.
- `DoorMiddleware`, an ASGI middleware: body sizes as the body is read, the body's deadline,
  the `Gate`'s checks of what the protocol left to it, and the heap frozen once the
  application has started.

One module per concern, each stating its rules, each importing only those listed before it:

    _limits       `Limits`: the bounds, valid once built
    _heap         `keep_heap`: a serving process keeps freed C heap for the next body
    _accept       `door_loop`: the serving loop, whose servers accept new connections in batches
    _refusals     every refusal's status, code and words, and how one is written (envelope,
                  request id, `Retry-After`, `Allow`, `Connection: close`)
    _gate         `Gate`, `DoorNames`, `Streams`: a head's checks (declared length; under `/mcp`
                  `Host`, `Origin`, method, the token's streams), shared by both layers
    _protocol     `DoorProtocol`: heads, deadlines, connections, lingering closes, unread
                  answers, deadlines paced, the `Gate` before any task
    _middleware   `DoorMiddleware`: bodies, their deadline, the `Gate` for what the protocol
                  left, the heap frozen once started

The protocol and the middleware import neither each other nor anything of the servers
(tests/unit/test_layers.py holds both). What answers carry (CORS, gzip) is `door_headers`.
"""

from __future__ import annotations

from pdpp_store.door._accept import ACCEPTED_AT_ONCE, DOOR_LOOP, door_loop
from pdpp_store.door._gate import DoorNames, Gate, Streams, host_name
from pdpp_store.door._heap import HEAP_PAD_BYTES, keep_heap
from pdpp_store.door._limits import Limits
from pdpp_store.door._middleware import DoorMiddleware
from pdpp_store.door._protocol import (
    LINGER_BYTES,
    LINGER_S,
    PACED_REST_S,
    PACED_SLICE_S,
    RECEIVE_BUFFER_BYTES,
    DoorProtocol,
    door_protocol,
)

__all__ = [
    "ACCEPTED_AT_ONCE",
    "DOOR_LOOP",
    "HEAP_PAD_BYTES",
    "LINGER_BYTES",
    "LINGER_S",
    "PACED_REST_S",
    "PACED_SLICE_S",
    "RECEIVE_BUFFER_BYTES",
    "DoorMiddleware",
    "DoorNames",
    "DoorProtocol",
    "Gate",
    "Limits",
    "Streams",
    "door_loop",
    "door_protocol",
    "host_name",
    "keep_heap",
]
