"""Connector manifests, read as they are published (docs/contract.md §1). Pure: no I/O.

Rules:
1. Unknown keys are ignored; only what reads and writes need is taken: `connector_id`, and per
   stream `name`, `primary_key`, `consent_time_field`, the hints a field's schema gives, the
   declared fields (`schema.properties`: name, JSON type, text-likeness) and the fields the
   stream offers to lexical search (`query.search.lexical_fields`).
2. A field hint comes from the manifest's declaration, never from the field's name: a property
   with `contentEncoding: "base64"` is base64 (with its `contentMediaType`), and an object
   property whose declared `properties` include `blob_id` is a blob reference.
3. A manifest that lacks what is needed is `invalid_manifest`, naming the key.
4. `lexical_fields` keeps only names that are declared properties and text-like (a blob
   reference or base64 field cannot be searched as text); a malformed `query.search` is ignored
   like any unknown key (no search for that stream), never an error.
5. `Manifest` and `StreamSpec` check themselves when constructed, however they are built: names
   are safe names within the length limits of `identity`, key fields and the consent field are
   field paths.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import BadRequest, StoreError
from .fields import FieldKind
from .identity import (
    MAX_NAME_BYTES,
    is_unicode,
    validate_connector_id,
    validate_field_path,
    validate_safe_name,
)

__all__ = ["DeclaredField", "FieldHint", "Manifest", "StreamSpec"]


def _invalid(message: str, param: str) -> BadRequest:
    return BadRequest("invalid_manifest", message, param=param)


@dataclass(frozen=True, slots=True)
class FieldHint:
    kind: FieldKind
    mime_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "mime_type": self.mime_type}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldHint:
        return cls(FieldKind(data["kind"]), data.get("mime_type"))


def _hint_for(schema: object) -> FieldHint | None:
    if not isinstance(schema, Mapping):
        return None
    if schema.get("contentEncoding") == "base64":
        media = schema.get("contentMediaType")
        return FieldHint(FieldKind.BASE64, media if isinstance(media, str) else None)
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and "blob_id" in properties:
        return FieldHint(FieldKind.BLOB_REF)
    return None


def _json_type(schema: object) -> str:
    """The declared JSON type of a property: `string`, `integer|null`, or `any` when undeclared."""
    declared = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(declared, str):
        return declared
    if isinstance(declared, list) and declared and all(isinstance(t, str) for t in declared):
        return "|".join(declared)
    return "any"


@dataclass(frozen=True, slots=True)
class DeclaredField:
    """One property a stream's schema declares: its JSON type and whether it is text-like
    (readable in windows, searchable) or binary-only per the manifest (blob reference, base64)."""

    name: str
    json_type: str
    text_like: bool


def _lexical_fields(
    data: Mapping[str, Any], declared: Mapping[str, DeclaredField]
) -> tuple[str, ...]:
    query = data.get("query")
    search = query.get("search") if isinstance(query, Mapping) else None
    names = search.get("lexical_fields") if isinstance(search, Mapping) else None
    if not isinstance(names, list):
        return ()
    chosen: list[str] = []
    for name in names:
        known = isinstance(name, str) and name in declared and declared[name].text_like
        if known and name not in chosen:
            chosen.append(name)
    return tuple(chosen)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    name: str
    primary_key: tuple[str, ...]
    consent_time_field: str | None
    hints: Mapping[str, FieldHint]
    declared: Mapping[str, DeclaredField] = field(default_factory=dict)
    lexical_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            validate_safe_name(self.name, "stream", MAX_NAME_BYTES)
        except StoreError as exc:
            raise _invalid(exc.message, "streams") from None
        key = self.primary_key
        if isinstance(key, str | bytes) or not isinstance(key, tuple | list) or not key:
            raise _invalid(
                f"stream {self.name!r}: primary_key must be a non-empty list of field names",
                "primary_key",
            )
        try:
            for part in key:
                validate_field_path(part, "primary_key")
            if self.consent_time_field is not None:
                validate_field_path(self.consent_time_field, "consent_time_field")
        except StoreError as exc:
            raise _invalid(f"stream {self.name!r}: {exc.message}", exc.param or "") from None
        object.__setattr__(self, "primary_key", tuple(key))
        if not isinstance(self.hints, Mapping) or not all(
            isinstance(k, str) and isinstance(v, FieldHint) for k, v in self.hints.items()
        ):
            raise _invalid(f"stream {self.name!r}: hints must map field names to hints", "hints")

    @classmethod
    def from_dict(cls, data: object, param: str) -> StreamSpec:
        if not isinstance(data, Mapping):
            raise _invalid(f"{param} must be an object", param)
        name = data.get("name")
        if not isinstance(name, str):
            raise _invalid(f"{param}.name must be a string", f"{param}.name")
        try:
            validate_safe_name(name, f"{param}.name")
        except BadRequest as exc:
            raise _invalid(exc.message, f"{param}.name") from None
        key = data.get("primary_key")
        if not isinstance(key, list) or not key:
            raise _invalid(
                f"stream {name!r}: primary_key must be a non-empty list of field names",
                f"{param}.primary_key",
            )
        try:
            for part in key:
                validate_field_path(part, f"{param}.primary_key")
        except StoreError:
            raise _invalid(
                f"stream {name!r}: primary_key must be a non-empty list of field names",
                f"{param}.primary_key",
            ) from None
        consent = data.get("consent_time_field")
        if consent is not None and (
            not isinstance(consent, str)
            or not consent
            or "\x00" in consent
            or not is_unicode(consent)
        ):
            raise _invalid(
                f"stream {name!r}: consent_time_field must be a field name",
                f"{param}.consent_time_field",
            )
        schema = data.get("schema")
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        hints: dict[str, FieldHint] = {}
        declared: dict[str, DeclaredField] = {}
        if isinstance(properties, Mapping):
            for field_name, field_schema in properties.items():
                hint = _hint_for(field_schema)
                if not isinstance(field_name, str) or not is_unicode(field_name):
                    continue  # no record can hold such a key: nothing to declare
                if hint is not None:
                    hints[field_name] = hint
                declared[str(field_name)] = DeclaredField(
                    str(field_name), _json_type(field_schema), hint is None
                )
        return cls(name, tuple(key), consent, hints, declared, _lexical_fields(data, declared))

    def hints_json(self) -> str:
        return json.dumps({k: v.to_json() for k, v in sorted(self.hints.items())})


@dataclass(frozen=True, slots=True)
class Manifest:
    connector_id: str
    streams: tuple[StreamSpec, ...]
    document: str

    def __post_init__(self) -> None:
        try:
            validate_connector_id(self.connector_id)
        except StoreError as exc:
            raise _invalid(f"manifest {exc.message}", "connector_id") from None
        streams = self.streams
        if isinstance(streams, str | bytes) or not isinstance(streams, tuple | list) or not streams:
            raise _invalid("manifest streams must be a non-empty list", "streams")
        if not all(isinstance(item, StreamSpec) for item in streams):
            raise _invalid("manifest streams must be StreamSpec values", "streams")
        seen: set[str] = set()
        for item in streams:
            if item.name in seen:
                raise _invalid(f"stream {item.name!r} is declared twice", "streams")
            seen.add(item.name)
        object.__setattr__(self, "streams", tuple(streams))
        if not isinstance(self.document, str) or not is_unicode(self.document):
            raise _invalid("manifest document must be JSON text", "manifest")

    @classmethod
    def from_dict(cls, data: object) -> Manifest:
        if not isinstance(data, Mapping):
            raise _invalid("a manifest must be a JSON object", "manifest")
        connector_id = data.get("connector_id")
        if not isinstance(connector_id, str) or not connector_id or "\x00" in connector_id:
            raise _invalid("manifest connector_id must be a non-empty string", "connector_id")
        try:
            validate_connector_id(connector_id)
        except StoreError as exc:
            raise _invalid(f"manifest {exc.message}", "connector_id") from None
        raw_streams = data.get("streams")
        if not isinstance(raw_streams, list) or not raw_streams:
            raise _invalid("manifest streams must be a non-empty list", "streams")
        streams = tuple(
            StreamSpec.from_dict(item, f"streams[{i}]") for i, item in enumerate(raw_streams)
        )
        names = [s.name for s in streams]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise _invalid(f"stream {duplicates[0]!r} is declared twice", "streams")
        try:
            document = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _invalid(f"manifest is not JSON: {exc}", "manifest") from None
        except RecursionError:
            raise _invalid("manifest is nested too deeply", "manifest") from None
        return cls(connector_id, streams, document)

    @classmethod
    def from_json(cls, document: str) -> Manifest:
        """A manifest as stored by `register_manifest` (its canonical JSON document)."""
        return cls.from_dict(json.loads(document))

    def spec(self, stream: str) -> StreamSpec | None:
        for spec in self.streams:
            if spec.name == stream:
                return spec
        return None
