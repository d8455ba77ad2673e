"""`pdpp_store.access_log`: the servers' access log, without personal data (docs/contract.md §14).

    app = AccessLog(app)      # what `pdpp_store.serve` runs under uvicorn, whose own access
                              # log (the full URL: search terms, filters, record ids) is off

Rules:
1. One line per HTTP request, when its answer has been sent: method, the route's template
   (`/v1/streams/{stream}/records/{record_id}/field-window`, never the path as requested),
   status, milliseconds taken and the request id (`X-Request-Id`, which the client holds too, so
   a user reporting a problem and the operator reading the log meet on it).
2. Never a query string, a path parameter, a header, a body or a token: a record id, a search
   term, a filter value or a bearer token in a log would be personal data (or a secret) written
   where nobody governs it.
3. A path no route matched is logged as `(unmatched)`; a mounted app (the MCP server at `/mcp`)
   by where it is mounted.
4. Lines go to the `uvicorn.pdpp_store.access` logger, so uvicorn's own logging configuration
   (its handler, format and `--log-level`) shows them like its other lines.
"""

from __future__ import annotations

import logging
import time
from collections.abc import MutableMapping
from typing import Any

from pdpp_store.http import ASGIApp, Message, Receive, Scope, Send, request_id

__all__ = ["AccessLog", "route_template"]

log = logging.getLogger("uvicorn.pdpp_store.access")


def route_template(scope: MutableMapping[str, Any]) -> str:
    """What the log names a request's target by (rules 1 and 3), read from `scope` after the
    application routed it."""
    route = getattr(scope.get("route"), "path", None)  # the innermost route matched
    root = scope.get("root_path")
    root = root if isinstance(root, str) else ""
    if isinstance(route, str):
        template = root + route  # a mounted app's routes are relative to where it is mounted
        if template:
            return template
        path = scope.get("path")  # a mount point matched exactly (`/mcp`): no parameters
        if not scope.get("path_params") and isinstance(path, str):
            return path
    return root or "(unmatched)"


class AccessLog:
    """The access log middleware (see the rules)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = request_id(scope)
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            log.info(
                "%s %s %d %.1fms %s",
                scope.get("method", "?"),
                route_template(scope),
                status,
                (time.perf_counter() - started) * 1000,
                given,
            )
