"""Statements cached per shape: what `query_records`' pages and counts (`query` Rule 6), its
changes walk (`changes` Rule 6) and search's filtered statements (`search` Rule 6) share, so
the caches are one idea written once.

Rules:
1. A request's shape is its stream grant's (`visibility.GrantShape`: which optional terms it
   has) and its filter's (`filters.FilterShape`: each clause's operator and value kinds), never
   a value: `shaped` gives both shapes and the parameters of both (`g_*` for the grant, `q_f<n>_*`
   for the filter), which a statement built for the shapes takes by name. So no value, granted
   or not, is ever statement text, and the statement a request gets is chosen by the request
   and the grant only, never by stored data. A statement over several stream grants and
   filters (search's groups) names each one's parameters with a prefix of its own (`g<i>_*`,
   `q<n>_f<m>_*`), its shapes the same.
2. A builder cached per shape takes `per_shape`: a bounded cache (`PER_SHAPE` entries each), since
   the shapes are unbounded in number (an `in` list's length is part of its shape); a shape past
   the bound is built again, as every statement was before the caches.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

from pdpp_store._core.filters import Filter
from pdpp_store._core.grants import StreamGrant

from .filters import FilterShape, filter_shape
from .visibility import GrantShape, grant_terms

__all__ = ["PER_SHAPE", "per_shape", "shaped"]

PER_SHAPE: Final = 256
"""Shapes each cached builder keeps (Rule 2)."""

per_shape = lru_cache(maxsize=PER_SHAPE)
"""The cache of a statement builder keyed by shapes (Rule 2)."""


def shaped(grant: StreamGrant, filter: Filter) -> tuple[GrantShape, FilterShape, dict[str, Any]]:
    """The grant's and the filter's shapes, and the parameters of both (Rule 1): a new dict the
    caller may add its own parameters to."""
    shape, terms = grant_terms(grant)
    filtered, params = filter_shape(filter)
    params.update(terms)
    return shape, filtered, params
