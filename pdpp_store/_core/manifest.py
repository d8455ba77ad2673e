"""Connector manifests, read as they are published (§1). Pure: no I/O.

Rules:
1. Unknown keys are ignored; only what reads and writes need is taken: `connector_id`, and per
   stream `name`, `primary_key`, `consent_time_field`, and the hints a field's schema gives.
2. A field hint comes from the manifest's declaration, never from the field's name: a property
   with `contentEncoding: "base64"` is base64 (with its `contentMediaType`), and an object
   property whose declared `properties` include `blob_id` is a blob reference.
3. A manifest that lacks what is needed is `invalid_manifest`, naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import BadRequest
from .fields import FieldKind
from .identity import validate_safe_name

__all__ = ["FieldHint", "Manifest", "StreamSpec"]


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


@dataclass(frozen=True, slots=True)
class StreamSpec:
    name: str
    primary_key: tuple[str, ...]
    consent_time_field: str | None
    hints: Mapping[str, FieldHint]

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
        if (
            not isinstance(key, list)
            or not key
            or not all(isinstance(k, str) and k and "\x00" not in k for k in key)
        ):
            raise _invalid(
                f"stream {name!r}: primary_key must be a non-empty list of field names",
                f"{param}.primary_key",
            )
        consent = data.get("consent_time_field")
        if consent is not None and not isinstance(consent, str):
            raise _invalid(
                f"stream {name!r}: consent_time_field must be a string",
                f"{param}.consent_time_field",
            )
        schema = data.get("schema")
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        hints: dict[str, FieldHint] = {}
        if isinstance(properties, Mapping):
            for field_name, field_schema in properties.items():
                hint = _hint_for(field_schema)
                if hint is not None:
                    hints[str(field_name)] = hint
        return cls(name, tuple(key), consent, hints)

    def hints_json(self) -> str:
        return json.dumps({k: v.to_json() for k, v in sorted(self.hints.items())})


@dataclass(frozen=True, slots=True)
class Manifest:
    connector_id: str
    streams: tuple[StreamSpec, ...]
    document: str

    @classmethod
    def from_dict(cls, data: object) -> Manifest:
        if not isinstance(data, Mapping):
            raise _invalid("a manifest must be a JSON object", "manifest")
        connector_id = data.get("connector_id")
        if not isinstance(connector_id, str) or not connector_id or "\x00" in connector_id:
            raise _invalid("manifest connector_id must be a non-empty string", "connector_id")
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
        return cls(connector_id, streams, document)
