"""Building a frozen value without its `__init__`, for the library's own hot paths.

A frozen dataclass's `__init__` sets each field through `object.__setattr__` (its own
`__setattr__` refuses), which costs about 90 ns a field; a slot's own setter costs half that. A
builder made from `slot_setters` sets every field and checks nothing: it is only for values
whose rules hold by construction, and a test holds each builder to the class's constructor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["slot_setters"]


def slot_setters(cls: type, names: tuple[str, ...]) -> tuple[Callable[[Any, Any], None], ...]:
    """The setters of a slotted dataclass's fields `names`, which must be all its fields in
    order: a field added to the class breaks the import, not a card."""
    declared = tuple(field.name for field in dataclasses.fields(cls))
    if declared != names:
        raise TypeError(f"{cls.__name__} has fields {declared}, not {names}")
    return tuple(cls.__dict__[name].__set__ for name in names)
