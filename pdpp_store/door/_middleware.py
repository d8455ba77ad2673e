"""`DoorMiddleware`, the door's ASGI layer: a body's bound and deadline, the `Gate`'s checks of
what the protocol left to it, and the heap frozen once the application has started.

Rules:
1. A body sent without a declared length is counted as it is read, and refused 413
   `request_too_large` once it passes the route's bound (`max_mcp_body_bytes` under `/mcp`,
   `max_body_bytes` elsewhere); a declared length is judged by the `Gate` before the app is
   called.
2. A body not received whole within `body_timeout_s` of the app first asking for it is 408
   `request_timeout`.
3. An answer sent before the request's body was read whole closes the connection, so an unread
   body is never drained.
4. A request the protocol did not judge (one from an origin given CORS, or a server without the
   door's protocol) is judged here by the same `Gate`, and counted in its token's streams here.
5. Once the application has started, everything it holds is frozen out of the garbage
   collector's passes (`gc.freeze`): a full pass over a started server's heap (about 190,000
   objects) stalls the loop for 60-180 ms, and a burst of connections triggers one; afterwards
   a pass looks only at what was made since.
6. A refusal raised while the body is read is answered here, unless the app has begun its own
   answer (then it is raised on, to uvicorn).
"""

from __future__ import annotations

import gc

import anyio

from pdpp_store.door._gate import JUDGED, DoorNames, Gate, counted, headers_of, is_mcp
from pdpp_store.door._limits import Limits
from pdpp_store.door._refusals import answer, timeout, too_large
from pdpp_store.http import ASGIApp, Message, Receive, Refused, Scope, Send

__all__ = ["DoorMiddleware"]


class DoorMiddleware:
    """Body bounds and deadline, and the head checks of `Gate` the protocol left to it (rules
    1-4)."""

    def __init__(
        self, app: ASGIApp, limits: Limits, names: DoorNames, gate: Gate | None = None
    ) -> None:
        self.app = app
        self.limits = limits
        self.gate = gate or Gate(limits, names)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, _freezing_once_started(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = headers_of(scope)
        verdict: Refused | str | bool = True
        if not scope.get(JUDGED):
            verdict = self.gate.check(scope, headers)
            if isinstance(verdict, Refused):
                await answer(scope, send, verdict)
                return
        mcp = is_mcp(str(scope.get("path", "")))
        bound = self.limits.max_mcp_body_bytes if mcp else self.limits.max_body_bytes
        declared = headers.get("content-length", "")
        has_body = "transfer-encoding" in headers or declared not in ("", "0")
        body = _Body(self.app, self.limits.body_timeout_s, bound, has_body)
        if isinstance(verdict, str):
            await counted(body, self.gate.streams, verdict, scope, receive, send)
        else:
            await body(scope, receive, send)


class _Body:
    """One request's body under its bound and deadline (rules 1-3, 6)."""

    def __init__(self, app: ASGIApp, timeout_s: float, bound: int, has_body: bool) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.bound = bound
        self.done = not has_body
        self.size = 0
        self.deadline: float | None = None
        self.started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded_receive() -> Message:
            if self.done:
                return await receive()
            if self.deadline is None:
                self.deadline = anyio.current_time() + self.timeout_s
            with anyio.move_on_after(max(0.0, self.deadline - anyio.current_time())) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise timeout("body")
            if message["type"] == "http.request":
                self.size += len(message.get("body", b""))
                if self.size > self.bound:
                    raise too_large(self.bound)
                self.done = not message.get("more_body", False)
            else:
                self.done = True
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.started = True
                if not self.done:  # an unread body is not drained (rule 3)
                    message = {**message, "headers": [*message.get("headers", [])]}
                    message["headers"].append((b"connection", b"close"))
            await send(message)

        try:
            await self.app(scope, bounded_receive, closing_send)
        except Refused as refused:  # raised by bounded_receive, not answered by the app
            if self.started:
                raise
            await answer(scope, send, refused)


def _freezing_once_started(send: Send) -> Send:
    """The lifespan's `send`, freezing the heap as startup completes (rule 5)."""

    async def sending(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            gc.collect()
            gc.freeze()
        await send(message)

    return sending
