"""Every evidence card a test sees is checked against its published JSON Schema.

    check_card(value)        validate `value.to_dict()` against its card's `JSON_SCHEMA`
    check_error(error)       validate a `StoreError`'s envelope against `evidence.ERROR_SCHEMA`
    CardChecking(front)      a store front whose every call checks what it returns or raises

The `store` fixture of `conftest.py` hands every behaviour test a `CardChecking` front, so each
card produced anywhere in the behaviour suite (every read path, on both databases and both
fronts) is validated on the way out, and `CHECKED` counts them by card name.

Rules:
1. The proxy adds no behaviour: arguments pass through untouched, results and errors come back
   as they were, after the check. Attributes that are not callables pass through.
2. A value whose class is not a card (None, a bool) is not checked; a card returned inside a
   tuple or list is.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from pdpp_store import StoreError
from pdpp_store.evidence import CARDS, ERROR_SCHEMA

__all__ = ["CHECKED", "CardChecking", "check_card", "check_error"]

CHECKED: Counter[str] = Counter()
"""How many of each card (and `Error` envelopes) were validated in this session."""

_CARD_NAMES = {card.__name__: card for card in CARDS}


@cache
def _validator(name: str) -> Draft202012Validator:
    schema = ERROR_SCHEMA if name == "Error" else _CARD_NAMES[name].JSON_SCHEMA
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _validate(name: str, rendered: Any) -> None:
    errors = sorted(_validator(name).iter_errors(rendered), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(part) for part in errors[0].absolute_path)
        raise AssertionError(
            f"{name}.to_dict() does not match its JSON Schema at /{where}: {errors[0].message}"
        )
    CHECKED[name] += 1


def check_card(value: Any) -> Any:
    """Validate `value` (a card, or a list or tuple of them) and return it unchanged."""
    if isinstance(value, list | tuple):
        for item in value:
            check_card(item)
        return value
    name = type(value).__name__
    if name in _CARD_NAMES and isinstance(value, _CARD_NAMES[name]):
        _validate(name, value.to_dict())
    return value


def check_error(error: StoreError) -> StoreError:
    _validate("Error", error.to_dict())
    return error


class CardChecking:
    """A store front (`Store` or `BlockingAsyncStore`) whose calls check their cards."""

    def __init__(self, front: Any) -> None:
        self._front = front

    @property
    def unchecked(self) -> Any:
        """The front itself."""
        return self._front

    def __getattr__(self, name: str) -> Any:
        if name == "_front" or name.startswith("__"):
            raise AttributeError(name)
        attribute = getattr(self._front, name)
        if not callable(attribute):
            return attribute

        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attribute(*args, **kwargs)
            except StoreError as error:
                check_error(error)
                raise
            return check_card(result)

        return checked
