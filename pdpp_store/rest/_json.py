"""`IntegralJSONResponse`: Starlette's `JSONResponse`, its body encoded by `pydantic_core`.

Starlette encodes with `json.dumps(..., ensure_ascii=False, allow_nan=False, separators=(",",
":"))`, about 20 µs for a field window's card (its keys, then its UTF-8); `pydantic_core.to_json`
(FastAPI's own encoder for models, installed with it) writes the same bytes in about 4 µs.

Rules:
1. Only for a body made of JSON's own values with no float: dicts with string keys, lists,
   strings, integers, booleans and None. `pydantic_core` spells floats otherwise (`1e-7`, not
   `1e-07`), writes `NaN` where Starlette refuses it, and encodes values Starlette refuses
   (dates, UUIDs). A field window's card is such a body (its schema has no number that is not an
   integer, and its cursors, names and text are strings; a test holds the schema to that).
2. For such a body the bytes are Starlette's: strings of any code point escaped alike, integers
   of any size, keys in their order (a property test). What `pydantic_core` cannot encode (a lone
   surrogate) is handed to Starlette's encoder, so it fails as it did.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from starlette.responses import JSONResponse

__all__ = ["IntegralJSONResponse"]

_TO_JSON = pydantic_core.to_json
_REFUSED = pydantic_core.PydanticSerializationError


class IntegralJSONResponse(JSONResponse):
    """A `JSONResponse` whose body holds no float (rule 1), encoded by `pydantic_core`."""

    def render(self, content: Any) -> bytes:
        try:
            return _TO_JSON(content)
        except _REFUSED:  # rule 2: Starlette's own encoder, and its error
            return super().render(content)
