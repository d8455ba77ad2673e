"""Connector manifests, read as they are published (docs/contract.md §1). Pure: no I/O.

Rules:
1. Unknown keys are ignored; only what reads, writes and questions need is taken:
   `connector_id`, and per stream `name`, `primary_key`, `consent_time_field`, `cursor_field`,
   the hints a field's schema gives, the declared fields (`schema.properties`: name, JSON type,
   text-likeness, `format`, `x_pdpp_role`), the fields the stream offers to lexical search
   (`query.search.lexical_fields`), its range filters (`query.range_filters`), its aggregations
   (`query.aggregations`) and its `views`.
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
6. What may be asked of a stream is optional, and read by the same rule as `lexical_fields`: a
   malformed declaration is ignored like an unknown key (nothing declared), never an error, and
   a declared name counts only when it is a declared, text-like property (no question is asked
   of a blob reference or of base64). In detail: a `cursor_field` that is not such a property is
   no cursor field; a range filter keeps the operators among `gt`, `gte`, `lt`, `lte` and only
   on fields whose declared type may hold a number or a string; an aggregation is `count: true`
   and, for `sum`, `min`, `max`, `count_distinct`, `group_by` and `group_by_time`, a list of
   fields; a view needs a string `id` (the first of two views with one id wins) and keeps its
   declared fields (binary ones too: a view selects fields, it asks nothing of them); an
   `x_pdpp_role` outside `ROLES` is no role.
7. The stream's order field (docs/contract.md §11.2) is its `cursor_field`, else its
   `consent_time_field`, else the first text-like field (by name, in code-point order) that declares
   the role `event-time`. Names go in code-point order wherever the manifest gives no order that
   survives storage: the stored manifest is canonical JSON with sorted keys, so a property's
   place in `schema.properties` is not kept.
8. Everything read here is derived from the manifest document, which the store keeps as given
   (`Manifest.document`); `Manifest.from_json` reads a stored document again, so new
   declarations round-trip and documents stored before this module read them load unchanged.
   A `StreamSpec` built from its stored row alone (key, consent field, hints) declares nothing
   that may be asked.
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

__all__ = [
    "RANGE_OPERATORS",
    "ROLES",
    "Aggregations",
    "DeclaredField",
    "FieldHint",
    "Manifest",
    "StreamSpec",
    "View",
]

ROLES = (
    "primary-title",
    "event-time",
    "actor",
    "secondary",
    "amount",
    "blob-reference",
    "media",
)
"""The values of `x_pdpp_role` this store reads; any other value is no role."""

RANGE_OPERATORS = ("gt", "gte", "lt", "lte")
"""The operators a range filter may declare, in the order they are shown."""

_AGGREGATE_LISTS = ("sum", "min", "max", "count_distinct", "group_by", "group_by_time")
_SCALAR_TYPES = frozenset({"string", "number", "integer", "boolean", "null"})


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
    format: str | None = None
    """The declared `format` (`date-time`, `date`, ...), as written."""
    role: str | None = None
    """The declared `x_pdpp_role`, one of `ROLES`, or None."""

    @property
    def types(self) -> frozenset[str]:
        """The declared JSON types; empty when the type is undeclared (`any`)."""
        return frozenset() if self.json_type == "any" else frozenset(self.json_type.split("|"))

    def admits(self, json_type: str) -> bool:
        """Whether a value of `json_type` may appear here (anything, when undeclared); an
        `integer` value fits a `number` field."""
        types = self.types
        if not types:
            return True
        return json_type in types or (json_type == "integer" and "number" in types)

    @property
    def holds_scalars(self) -> bool:
        types = self.types
        return not types or bool(types & _SCALAR_TYPES)

    @property
    def holds_arrays(self) -> bool:
        types = self.types
        return not types or "array" in types


def _format(schema: object) -> str | None:
    value = schema.get("format") if isinstance(schema, Mapping) else None
    return value if isinstance(value, str) and is_unicode(value) else None


def _role(schema: object) -> str | None:
    value = schema.get("x_pdpp_role") if isinstance(schema, Mapping) else None
    return value if isinstance(value, str) and value in ROLES else None


@dataclass(frozen=True, slots=True)
class Aggregations:
    """What `query.aggregations` declares (docs/contract.md §12): `count`, and the fields each
    metric or grouping may name. Empty means nothing declared."""

    count: bool = False
    sum: tuple[str, ...] = ()
    min: tuple[str, ...] = ()
    max: tuple[str, ...] = ()
    count_distinct: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
    group_by_time: tuple[str, ...] = ()

    def fields_for(self, name: str) -> tuple[str, ...]:
        """The fields declared for a metric or grouping (`sum`, ..., `group_by_time`)."""
        if name not in _AGGREGATE_LISTS:
            return ()
        fields: tuple[str, ...] = getattr(self, name)
        return fields

    def to_json(self) -> dict[str, Any]:
        """The declaration as discovery shows it: `count` and the non-empty lists."""
        shown: dict[str, Any] = {"count": self.count}
        for name in _AGGREGATE_LISTS:
            if self.fields_for(name):
                shown[name] = list(self.fields_for(name))
        return shown


@dataclass(frozen=True, slots=True)
class View:
    """A named selection of fields the manifest offers (`views[]`)."""

    id: str
    label: str | None
    fields: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "fields": list(self.fields)}


def _askable(declared: Mapping[str, DeclaredField], name: object) -> bool:
    return isinstance(name, str) and name in declared and declared[name].text_like


def _name_list(
    value: object, declared: Mapping[str, DeclaredField], *, binary: bool = False
) -> tuple[str, ...]:
    """The declared, text-like (or, with `binary`, any declared) names of a list, first
    occurrence kept; not a list: none."""
    if not isinstance(value, list):
        return ()
    chosen: list[str] = []
    for name in value:
        known = isinstance(name, str) and name in declared
        if known and (binary or _askable(declared, name)) and name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def _query(data: Mapping[str, Any]) -> Mapping[str, Any]:
    query = data.get("query")
    return query if isinstance(query, Mapping) else {}


def _range_filters(
    data: Mapping[str, Any], declared: Mapping[str, DeclaredField]
) -> dict[str, tuple[str, ...]]:
    raw = _query(data).get("range_filters")
    if not isinstance(raw, Mapping):
        return {}
    ranges: dict[str, tuple[str, ...]] = {}
    for name, operators in raw.items():
        if not _askable(declared, name) or not isinstance(operators, list):
            continue
        known = declared[name]
        if not (known.admits("integer") or known.admits("string")):
            continue  # a boolean or array field has no order to range over
        chosen = tuple(op for op in RANGE_OPERATORS if op in operators)
        if chosen:
            ranges[name] = chosen
    return ranges


def _aggregations(data: Mapping[str, Any], declared: Mapping[str, DeclaredField]) -> Aggregations:
    raw = _query(data).get("aggregations")
    if not isinstance(raw, Mapping):
        return Aggregations()
    lists = {name: _name_list(raw.get(name), declared) for name in _AGGREGATE_LISTS}
    return Aggregations(count=raw.get("count") is True, **lists)


def _views(data: Mapping[str, Any], declared: Mapping[str, DeclaredField]) -> tuple[View, ...]:
    raw = data.get("views")
    if not isinstance(raw, list):
        return ()
    views: list[View] = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        view_id, label = item.get("id"), item.get("label")
        if not isinstance(view_id, str) or not view_id or not is_unicode(view_id):
            continue
        if any(view.id == view_id for view in views) or not isinstance(item.get("fields"), list):
            continue
        label = label if isinstance(label, str) and is_unicode(label) else None
        views.append(View(view_id, label, _name_list(item.get("fields"), declared, binary=True)))
    return tuple(views)


def _cursor_field(data: Mapping[str, Any], declared: Mapping[str, DeclaredField]) -> str | None:
    name = data.get("cursor_field")
    return name if _askable(declared, name) and isinstance(name, str) else None


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
    cursor_field: str | None = None
    range_filters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per field, the range operators declared for it (in `RANGE_OPERATORS` order)."""
    aggregations: Aggregations = field(default_factory=Aggregations)
    views: tuple[View, ...] = ()
    roles: Mapping[str, tuple[str, ...]] = field(init=False, compare=False, repr=False)
    """Per role, the declared fields that declare it, by name in code-point order (derived)."""

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
            if self.cursor_field is not None:
                validate_field_path(self.cursor_field, "cursor_field")
        except StoreError as exc:
            raise _invalid(f"stream {self.name!r}: {exc.message}", exc.param or "") from None
        object.__setattr__(self, "primary_key", tuple(key))
        if not isinstance(self.hints, Mapping) or not all(
            isinstance(k, str) and isinstance(v, FieldHint) for k, v in self.hints.items()
        ):
            raise _invalid(f"stream {self.name!r}: hints must map field names to hints", "hints")
        if not isinstance(self.aggregations, Aggregations):
            raise _invalid(f"stream {self.name!r}: aggregations must be Aggregations", "query")
        object.__setattr__(self, "views", tuple(self.views))
        if not all(isinstance(view, View) for view in self.views):
            raise _invalid(f"stream {self.name!r}: views must be View values", "views")
        ranges = self.range_filters
        if not isinstance(ranges, Mapping) or not all(
            isinstance(name, str)
            and isinstance(ops, tuple)
            and ops
            and all(op in RANGE_OPERATORS for op in ops)
            for name, ops in ranges.items()
        ):
            raise _invalid(
                f"stream {self.name!r}: range_filters must map field names to operators", "query"
            )
        if not isinstance(self.declared, Mapping) or not all(
            isinstance(known, DeclaredField) for known in self.declared.values()
        ):
            raise _invalid(f"stream {self.name!r}: declared must map names to fields", "schema")
        roles: dict[str, list[str]] = {}
        for name in sorted(self.declared):
            role = self.declared[name].role
            if role is not None:
                roles.setdefault(role, []).append(name)
        object.__setattr__(self, "roles", {role: tuple(names) for role, names in roles.items()})

    @property
    def order_field(self) -> str | None:
        """The field `query_records` orders by (rule 7), or None when the stream has none."""
        if self.cursor_field is not None:
            return self.cursor_field
        if self.consent_time_field is not None:
            return self.consent_time_field
        timed = [
            name for name in self.fields_with_role("event-time") if self.declared[name].text_like
        ]
        return timed[0] if timed else None

    def fields_with_role(self, role: str) -> tuple[str, ...]:
        """The declared fields whose `x_pdpp_role` is `role`, by name in code-point order."""
        return self.roles.get(role, ())

    @property
    def declares_roles(self) -> bool:
        return bool(self.roles)

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
                    str(field_name),
                    _json_type(field_schema),
                    hint is None,
                    _format(field_schema),
                    _role(field_schema),
                )
        return cls(
            name,
            tuple(key),
            consent,
            hints,
            declared,
            _lexical_fields(data, declared),
            _cursor_field(data, declared),
            _range_filters(data, declared),
            _aggregations(data, declared),
            _views(data, declared),
        )

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
