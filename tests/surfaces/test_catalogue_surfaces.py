"""The REST routes and the MCP tools are held to the operation catalogue.

Every read operation of `CATALOGUE` is performed by some route of the real REST application
(read from its OpenAPI document, which FastAPI builds from the routes it serves) and by some
tool of the real MCP server (read from its `tools/list`), or is listed next to that surface as
deliberately absent, with the reason (`rest._routes.ABSENT_OPERATIONS`,
`mcp._inputs.ABSENT_OPERATIONS`). Which operations a route or tool performs is said next to it
(`ROUTE_OPERATIONS`, `TOOL_OPERATIONS`), and a route or tool missing there fails too. So a new
read operation with no route or no tool fails here until it has one or a reason not to.

The MCP tools' input schemas are derived from the catalogue: a new argument of an operation
appears in its tool's schema without being spelled in `pdpp_store.mcp`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from pdpp_store import CATALOGUE, AsyncStore, Grant
from pdpp_store.mcp import _inputs, create_server
from pdpp_store.mcp._inputs import ABSENT_OPERATIONS as MCP_ABSENT
from pdpp_store.mcp._inputs import TOOL_OPERATIONS
from pdpp_store.rest import create_app
from pdpp_store.rest._routes import ABSENT_OPERATIONS as REST_ABSENT
from pdpp_store.rest._routes import ROUTE_OPERATIONS

GRANT = Grant.from_dict({"grant_id": "g", "streams": [{"name": "messages"}]})


def uncovered(
    catalogue: Mapping[str, Any],
    served: list[str],
    performs: Mapping[str, tuple[str, ...]],
    absent: Mapping[str, str],
) -> list[str]:
    """What breaks the rule for one surface: `served` are the names of its real routes or tools,
    `performs` what each performs, `absent` the reads left out on purpose (with reasons)."""
    reads = {name for name, op in catalogue.items() if op.kind == "read"}
    problems = [
        f"{name}: served, but performs no listed operation"
        for name in served
        if name not in performs
    ]
    problems += [f"{name}: listed, but not served" for name in performs if name not in served]
    covered = {op for name in served for op in performs.get(name, ())}
    problems += [f"{op}: performed, but not a catalogued read" for op in sorted(covered - reads)]
    for op in sorted(reads - covered):
        if op not in absent:
            problems.append(f"{op}: a read no route or tool performs, and not listed as absent")
    for op, reason in absent.items():
        if op in covered or op not in reads:
            problems.append(f"{op}: listed as absent, but it is served or not a catalogued read")
        elif len(reason.split()) < 4:
            problems.append(f"{op}: listed as absent without a reason")
    return problems


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await AsyncStore.open(f"sqlite:///{tmp_path / 'store.db'}")
    yield opened
    await opened.close()


async def rest_routes(store: AsyncStore) -> list[str]:
    """The operation ids of the real application's `/v1` routes."""
    document = create_app(store, {"tok_0123456789abcdef": GRANT}).openapi()
    return [
        operation["operationId"]
        for path, methods in document["paths"].items()
        if path.startswith("/v1/")
        for operation in methods.values()
    ]


async def mcp_tools(store: AsyncStore) -> list[str]:
    """The names of the tools the real MCP server lists."""
    async with Client(create_server(store, GRANT)) as client:
        return [tool.name for tool in (await client.list_tools()).tools]


async def test_every_read_operation_has_a_route_or_a_reason(store: AsyncStore) -> None:
    routes = await rest_routes(store)
    assert len(routes) >= 4
    assert uncovered(CATALOGUE, routes, ROUTE_OPERATIONS, REST_ABSENT) == []


async def test_every_read_operation_has_a_tool_or_a_reason(store: AsyncStore) -> None:
    tools = await mcp_tools(store)
    assert len(tools) >= 4
    assert uncovered(CATALOGUE, tools, TOOL_OPERATIONS, MCP_ABSENT) == []


async def test_the_check_sees_a_read_operation_no_surface_has(store: AsyncStore) -> None:
    """A new read operation in the catalogue, with no route, no tool and no reason, fails; so do
    a route or tool that performs nothing listed, and a reason that is not one."""
    catalogue = {
        **CATALOGUE,
        "list_everything": dataclasses.replace(CATALOGUE["search"], name="list_everything"),
    }
    routes, tools = await rest_routes(store), await mcp_tools(store)
    missing = "list_everything: a read no route or tool performs, and not listed as absent"
    assert uncovered(catalogue, routes, ROUTE_OPERATIONS, REST_ABSENT) == [missing]
    assert uncovered(catalogue, tools, TOOL_OPERATIONS, MCP_ABSENT) == [missing]

    assert uncovered(CATALOGUE, [*routes, "count"], ROUTE_OPERATIONS, REST_ABSENT) == [
        "count: served, but performs no listed operation"
    ]
    without_search = [name for name in tools if name != "search"]
    assert uncovered(CATALOGUE, without_search, TOOL_OPERATIONS, MCP_ABSENT) == [
        "search: listed, but not served",
        "search: a read no route or tool performs, and not listed as absent",
    ]
    assert uncovered(CATALOGUE, tools, TOOL_OPERATIONS, {**MCP_ABSENT, "search": "no"}) == [
        "search: listed as absent, but it is served or not a catalogued read"
    ]
    assert uncovered(CATALOGUE, routes, ROUTE_OPERATIONS, {**REST_ABSENT, "describe_field": ""})
    writes = {"read_blob": ("put_blob",)}
    assert "put_blob: performed, but not a catalogued read" in uncovered(
        CATALOGUE, routes, {**ROUTE_OPERATIONS, **writes}, REST_ABSENT
    )


def test_the_tool_inputs_are_the_catalogue_s_arguments() -> None:
    """Each tool takes its operation's arguments (renamed as MCP names them), less those it
    leaves out on purpose, and nothing else."""
    for name, tool in _inputs._TOOLS.items():
        expected: set[str] = set()
        for argument in CATALOGUE[tool.operation].arguments:
            if argument.type == "grant" or argument.name in tool.left_out:
                continue
            if argument.type == "record":
                by_parts = ("connection_id", "stream", "record_id") if tool.record_by_parts else ()
                expected |= {"id", *by_parts}
            else:
                expected.add("field_path" if argument.type == "field" else argument.name)
        assert set(_inputs.TOOL_INPUTS[name]["properties"]) == expected, name
        assert set(tool.left_out) <= {a.name for a in CATALOGUE[tool.operation].arguments}


SERVED_INPUTS: dict[str, tuple[set[str], set[str]]] = {
    "search": (
        {"q", "streams", "connection_id", "filter", "order", "count", "limit", "cursor"},
        {"q"},
    ),
    "fetch": ({"id", "connection_id", "after_field"}, {"id"}),
    "read_record_field": (
        {
            "id",
            "connection_id",
            "stream",
            "record_id",
            "field_path",
            "offset_chars",
            "limit_chars",
            "q",
            "before_chars",
            "after_chars",
            "cursor",
        },
        {"field_path"},
    ),
    "schema": ({"stream", "limit", "after"}, set()),
    "query_records": (
        {
            "stream",
            "connection_id",
            "filter",
            "order",
            "fields",
            "limit",
            "cursor",
            "count",
            "changes_since",
        },
        {"stream"},
    ),
    "aggregate": (
        {
            "stream",
            "metric",
            "field",
            "group_by",
            "group_by_time",
            "granularity",
            "time_zone",
            "filter",
            "connection_id",
            "limit",
        },
        {"stream"},
    ),
}
"""What each tool's input schema offers an agent, written out (properties, required): the
derivation above could agree with itself while both drift, so the served schema is also held to
a list a reviewer reads. A new argument is added here on purpose."""


async def test_the_served_tools_take_the_listed_inputs(store: AsyncStore) -> None:
    """`tools/list` of the real server offers exactly `SERVED_INPUTS`."""
    async with Client(create_server(store, GRANT)) as client:
        listed = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
    served = {
        name: (set(schema.get("properties", {})), set(schema.get("required", [])))
        for name, schema in listed.items()
        if name in TOOL_OPERATIONS
    }
    assert served == SERVED_INPUTS


def test_a_new_argument_appears_on_its_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """An argument added to an operation (here a selector argument of `read_field_window`)
    appears in its tool's input schema with no line of `pdpp_store.mcp` changed."""
    window = CATALOGUE["read_field_window"]
    extra = dataclasses.replace(window.arguments[-1], name="context_lines", type="integer")
    grown = dataclasses.replace(window, arguments=(*window.arguments, extra))
    monkeypatch.setattr(_inputs, "CATALOGUE", {**CATALOGUE, "read_field_window": grown})
    schema = _inputs._schema(_inputs._TOOLS["read_record_field"])
    assert schema["properties"]["context_lines"] == {"type": "integer"}
    assert "context_lines" not in _inputs.TOOL_INPUTS["read_record_field"]["properties"]
