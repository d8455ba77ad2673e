"""What every surface shows: the evidence cards and the one way to say "how to read more".

Every operation of the store returns a card from this package; each card has one `to_dict()`
(its JSON rendering, the same on every surface) and a published JSON Schema (`CARD.json_schema()`)
that the tests validate every `to_dict()` against. A `Continuation` names the library operation
that reads more, with its arguments and the resource URI of the same read; surfaces render it
(a tool call for MCP, a link for REST, a command line for the CLI). Nothing here knows a surface.
"""

from .continuation import Continuation
from .grant_schema import FieldSchema, GrantSchema, StreamSchema
from .search import MatchExcerpt, SearchHit, SearchPage

__all__ = [
    "Continuation",
    "FieldSchema",
    "GrantSchema",
    "MatchExcerpt",
    "SearchHit",
    "SearchPage",
    "StreamSchema",
]
