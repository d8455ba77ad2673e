"""Query parameters and request headers: declared once, documented and parsed from the one list.

    WINDOW = Params(Param("field", str, "...", required=True), Param("offset_chars", int, ...))
    route(..., openapi_extra=WINDOW.openapi())       # the OpenAPI `parameters`
    values = WINDOW.parse(request)                   # {"field": "body", "offset_chars": None, ...}

Why not FastAPI's `Query()`: its per-parameter machinery cost about 0.3 ms per field-window
request (a dozen parameters) on this machine, more than the library's own read; a plain parse
of the query string costs a few microseconds and lets every refusal be the library's kind.

Rules:
1. A query parameter that is not declared, or a declared one given twice (unless it is a list),
   is `invalid_request` naming it (at most `MAX_NAME_IN_MESSAGE` characters of it).
2. A required one that is missing is `invalid_request` ("is required"). An integer must be
   written as one (`-?[0-9]+`, at most `MAX_INTEGER_DIGITS` digits): otherwise
   `invalid_window` on the field-window route, `invalid_request` elsewhere.
3. Bounds are documented here but checked by the library, so their messages and the order of
   checks (docs/contract.md §7) stay the library's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

from pdpp_store import BadRequest

__all__ = ["MAX_NAME_IN_MESSAGE", "Param", "Params", "query_items"]

MAX_NAME_IN_MESSAGE = 64
MAX_INTEGER_DIGITS = 64
_INTEGER = re.compile(rf"[+-]?[0-9]{{1,{MAX_INTEGER_DIGITS}}}")


def query_items(request: Request) -> list[tuple[str, str]]:
    """The request's query items, in order: what `request.query_params.multi_items()` gives
    (Starlette's own parse, the same call), without building its multidict, which cost half
    the parse of a field window's query."""
    query = request.scope.get("query_string", b"")
    return parse_qsl(query.decode("latin-1"), keep_blank_values=True)


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: type  # int, str or list (a repeatable string)
    description: str
    required: bool = False
    where: str = "query"  # or "header"
    bounds: dict[str, Any] = field(default_factory=dict)  # JSON Schema keywords, documented

    def openapi(self) -> dict[str, Any]:
        schema: dict[str, Any]
        if self.kind is int:
            schema = {"type": "integer", **self.bounds}
        elif self.kind is list:
            schema = {"type": "array", "items": {"type": "string", **self.bounds}}
        else:
            schema = {"type": "string", **self.bounds}
        return {
            "name": self.name,
            "in": self.where,
            "required": self.required,
            "description": self.description,
            "schema": schema,
        }


class Params:
    """The declared parameters of one route (see the module's rules)."""

    def __init__(self, *params: Param, window: bool = False) -> None:
        self.params = params
        self.window = window  # integer errors are `invalid_window` (rule 2)
        self.query = {p.name: p for p in params if p.where == "query"}
        self.headers = [p for p in params if p.where == "header"]

    def openapi(self) -> dict[str, Any]:
        return {"parameters": [param.openapi() for param in self.params]}

    def parse(self, request: Request) -> dict[str, Any]:
        return self.parse_items(request, query_items(request))

    def parse_items(self, request: Request, items: list[tuple[str, str]]) -> dict[str, Any]:
        """`parse` over the query items given (a route that reads some items itself passes the
        rest); headers are the request's."""
        values: dict[str, Any] = dict.fromkeys(self.query)
        for name, raw in items:
            param = self.query.get(name)
            shown = name[:MAX_NAME_IN_MESSAGE]
            if param is None:
                raise BadRequest(
                    "invalid_request", f"unknown query parameter {shown!r}", param=shown
                )
            if param.kind is list:
                values[name] = [*(values[name] or ()), raw]
                continue
            if values[name] is not None:
                raise BadRequest(
                    "invalid_request",
                    f"query parameter {shown!r} is given more than once",
                    param=shown,
                )
            values[name] = self._integer(name, raw) if param.kind is int else raw
        for param in self.query.values():
            if param.required and values[param.name] is None:
                raise BadRequest("invalid_request", f"{param.name} is required", param=param.name)
        for param in self.headers:
            values[param.name] = request.headers.get(param.name)
        return values

    def _integer(self, name: str, raw: str) -> int:
        if not _INTEGER.fullmatch(raw):
            code = "invalid_window" if self.window else "invalid_request"
            message = f"{name} must be an integer (of at most {MAX_INTEGER_DIGITS} digits)"
            raise BadRequest(code, message, param=name)
        return int(raw)
