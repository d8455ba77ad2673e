"""`rest/_json`: a field window's card is encoded by `pydantic_core`, byte for byte as Starlette's
`JSONResponse` encodes it; and the window's links quote as `urllib.parse.quote` quotes.

- Any body of JSON's own values without a float (any code point, lone surrogates included,
  integers of any size, nesting, key order): the same bytes, or the same error.
- The field-window answer's schema (the OpenAPI component, every reference followed) holds no
  number that is not an integer, so its card is such a body (`_json` rule 1).
- Served, on every database: first, middle, last and match windows are the bytes Starlette
  writes for the same answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any
from urllib.parse import quote

import pytest
from _rest import OWNER, TEXT, Site, served, window_path
from hypothesis import example, given
from hypothesis import strategies as st
from starlette.responses import JSONResponse

from pdpp_store.rest import create_app
from pdpp_store.rest._json import IntegralJSONResponse
from pdpp_store.rest._routes import _quoted

BODY = "body_text"

_ANY_TEXT = st.text(st.characters(exclude_categories=()))  # surrogates too
_TEXT = st.one_of(st.text(), _ANY_TEXT, st.sampled_from(["", "\x00\x1f\x7f\u2028", '"\\/']))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    _TEXT,
)
_BODIES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=20,
)


def _rendered(response_class: type[JSONResponse], body: Any) -> bytes | type[BaseException]:
    try:
        return bytes(response_class(body).body)
    except Exception as refused:  # the error's kind is the answer here
        return type(refused)


@given(_BODIES)
def test_a_body_without_floats_is_starlette_s_bytes(body: Any) -> None:
    assert _rendered(IntegralJSONResponse, body) == _rendered(JSONResponse, body)


def test_a_lone_surrogate_fails_as_starlette_fails() -> None:
    body = {"text": "a\ud800b"}
    assert _rendered(JSONResponse, body) is UnicodeEncodeError
    assert _rendered(IntegralJSONResponse, body) is UnicodeEncodeError


@given(st.one_of(_TEXT, st.text("Az09_.~-/ %?&=+#:@!é\x00", max_size=8)))
@example("a\ud800")  # not UTF-8: both refuse it
def test_a_link_part_is_quoted_as_quote_quotes_it(text: str) -> None:
    """Any text, and texts near the edge of what `quote` leaves alone (reserved characters,
    escapes, a non-ASCII letter among unreserved ones)."""
    assert _outcome(_quoted, text) == _outcome(partial(quote, safe=""), text)


def _outcome(quoting: Callable[[str], str], text: str) -> str | type[BaseException]:
    """What `quoting` gives `text`, or the kind of error it raises (a lone surrogate is not
    UTF-8: both refuse it alike)."""
    try:
        return quoting(text)
    except Exception as refused:  # the error's kind is the answer here
        return type(refused)


def _types(schema: Any, components: dict[str, Any], seen: set[str]) -> set[str]:
    """Every `type` the schema names, its references followed."""
    found: set[str] = set()
    if isinstance(schema, dict):
        target = schema.get("$ref")
        if isinstance(target, str):
            name = target.rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                found |= _types(components[name], components, seen)
        kind = schema.get("type")
        found |= {kind} if isinstance(kind, str) else set(kind or ())
        for key, value in schema.items():
            if key not in ("type", "$ref"):
                found |= _types(value, components, seen)
    elif isinstance(schema, list):
        for value in schema:
            found |= _types(value, components, seen)
    return found


async def test_a_field_window_answer_holds_no_float(db_url: str) -> None:
    async with served(db_url) as site:
        document = create_app(site.store, {}).openapi()
    components = document["components"]["schemas"]
    types = _types(components["FieldWindowResponse"], components, set())
    assert "integer" in types  # the walk reaches the window's offsets
    assert "number" not in types


@pytest.fixture
async def site(db_url: str) -> AsyncIterator[Site]:
    async with served(db_url) as opened:
        yield opened


@pytest.mark.parametrize(
    "params",
    [
        {"field": BODY},
        {"field": BODY, "offset_chars": 1000, "limit_chars": 500},
        {"field": BODY, "offset_chars": len(TEXT) - 7},
        {"field": BODY, "q": TEXT[3000:3006], "before_chars": 20, "after_chars": 20},
    ],
    ids=["first", "middle", "last", "match"],
)
async def test_a_served_window_is_the_bytes_starlette_writes(
    site: Site, params: dict[str, Any]
) -> None:
    response = await site.get(OWNER, window_path(), params)
    assert response.status_code == 200
    card = response.json()
    assert card["object"] == "field_window"
    assert response.content == JSONResponse(card).body
    assert response.headers["Content-Length"] == str(len(response.content))
