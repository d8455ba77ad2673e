"""The layers hold: an import-boundary test over the modules' syntax trees (nothing is run).

    _core       pure values and rules: no SQLAlchemy, and nothing of the store's other layers
    evidence    the cards: like the core, and may use the core
    _sql        builds statements, runs none: no driver (`_runtime`), no operation, no front
    _ops        operations as generators: no driver, no front
    surfaces    cli/, demo.py, rest/, mcp/: public names only (`pdpp_store`,
                `pdpp_store.evidence`, and each other's public modules), never a `_private` one
    door/       in levels: limits, refusals, the gate, then the protocol and the middleware
                side by side; each module imports only the door's modules of lower levels

Imports are read from every `import` and `from ... import` anywhere in a module (functions
included, since a lazy import is still an import), with relative imports resolved.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pdpp_store"
SURFACE_PACKAGES = ("rest", "mcp", "cli")
SURFACE_MODULES = ("demo",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(*under: str) -> list[Path]:
    found: list[Path] = []
    for name in under:
        target = PACKAGE / name
        if target.is_dir():
            found.extend(sorted(target.rglob("*.py")))
        elif target.with_suffix(".py").is_file():
            found.append(target.with_suffix(".py"))
    return found


def _origin(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path) -> Iterator[str]:
    """Every module `path` imports, absolute (for `from X import a`, both `X` and `X.a`)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            origin = _origin(node, package)
            yield origin
            yield from (f"{origin}.{alias.name}" for alias in node.names)


def _offenders(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{_module_name(path)} imports {name}"
        for path in paths
        for name in imports_of(path)
        if any(name == bad or name.startswith(bad + ".") for bad in forbidden)
    ]


def _use_package(package: Path, sources: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Write a synthetic package (`sources`: path → text) and point the checks at it."""
    for name, source in sources.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source, encoding="utf-8")
    monkeypatch.setitem(globals(), "PACKAGE", package)


STORE_LAYERS = ("pdpp_store._sql", "pdpp_store._ops", "pdpp_store._runtime", "pdpp_store._store")


def test_every_layer_is_found() -> None:
    for layer in ("_core", "evidence", "_sql", "_ops"):
        assert len(_modules(layer)) >= 3, layer
    assert _modules(*SURFACE_MODULES)


@pytest.mark.parametrize("layer", ["_core", "evidence"])
def test_the_core_and_the_evidence_import_no_sqlalchemy_and_no_other_layer(layer: str) -> None:
    forbidden: tuple[str, ...] = ("sqlalchemy", "alembic", "psycopg", "aiosqlite", *STORE_LAYERS)
    if layer == "_core":
        forbidden += ("pdpp_store.evidence",)  # the cards build on the core, not the reverse
    assert _offenders(_modules(layer), forbidden) == []


def test_the_sql_layer_executes_nothing() -> None:
    forbidden = ("pdpp_store._runtime", "pdpp_store._ops", "pdpp_store._store")
    assert _offenders(_modules("_sql"), forbidden) == []
    for path in _modules("_sql"):
        source = path.read_text(encoding="utf-8")
        for call in (".execute(", ".connect(", "create_engine(", ".commit("):
            assert call not in source, f"{_module_name(path)} calls {call}"


def test_operations_drive_no_connection() -> None:
    forbidden = ("pdpp_store._runtime", "pdpp_store._store", "pdpp_store.cli")
    assert _offenders(_modules("_ops"), forbidden) == []


def _private(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "pdpp_store" and any(part.startswith("_") for part in parts[1:])


def _own(module: str, name: str) -> bool:
    """`name` lies inside the surface package `module` belongs to (its own private parts)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in SURFACE_PACKAGES:
        return False
    package = ".".join(parts[:2])
    return name == package or name.startswith(package + ".")


def test_surfaces_import_only_public_names() -> None:
    surfaces = _modules(*SURFACE_MODULES, *SURFACE_PACKAGES)
    offenders = [
        f"{_module_name(path)} imports {name}"
        for path in surfaces
        for name in imports_of(path)
        if _private(name) and not _own(_module_name(path), name)
    ]
    assert offenders == []


def test_the_boundary_test_sees_what_it_must(tmp_path: Path) -> None:
    """The walker finds relative, lazy and aliased imports (so the tests above can fail)."""
    sample = PACKAGE / "_core" / "values.py"
    names = set(imports_of(sample))
    assert "pdpp_store._core.identity" in names  # `from .identity import ...`
    assert _private("pdpp_store._core.identity")
    assert not _private("pdpp_store.evidence")
    cli = set(imports_of(PACKAGE / "cli" / "_io.py"))
    assert "pdpp_store" in cli
    assert _own("pdpp_store.rest._app", "pdpp_store.rest._errors")
    assert not _own("pdpp_store.rest._app", "pdpp_store._store")
    assert not _own("pdpp_store.cli", "pdpp_store._store")


# ---------------------------------------------------------------- _ops builds no SQL

SQL_MATERIAL = (
    "sqlalchemy",
    "pdpp_store._sql.tables",
    "pdpp_store._sql.visibility",
    *(f"pdpp_store._sql.requests.{name}" for name in ("Execute", "DriverSQL", "Builder")),
    *(
        f"pdpp_store._sql.dialects.{name}"
        for name in (
            "IdList",
            "bound_rows",
            "greatest",
            "id_set",
            "insert_ignoring",
            "key_text",
            "least",
            "strpos",
        )
    ),
)
"""What a statement is made of: SQLAlchemy (every construct, clause and function), the tables
(whose columns make conditions), the grant's condition, the per-dialect constructs, and the
`Execute` that pairs a statement with its parameters. An operation that imports none of these
and calls no `Execute` can only yield what an `_sql` builder returned."""

STATEMENT_WRAPPERS = ("Execute", "DriverSQL")


SQL_MODULES_WHOLE = (
    "pdpp_store._sql.dialects",
    "pdpp_store._sql.tables",
    "pdpp_store._sql.visibility",
)
"""Modules of SQL material that an operation must not take whole: through `dialects.strpos(...)`
it could spell a statement the names in `SQL_MATERIAL` forbid one by one."""


def _whole_modules(path: Path) -> Iterator[str]:
    """The modules `path` binds whole: `import a.b` and `from a import b` where `a.b` is a
    module (unlike `imports_of`, which cannot tell `from a import b` from `from a.b import c`)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            origin = _origin(node, package)
            for alias in node.names:
                target = f"{origin}.{alias.name}"
                if _is_module(target):
                    yield target


def _is_module(name: str) -> bool:
    """Whether `name` is a module or package of the tree under `PACKAGE`."""
    parts = name.split(".")
    if parts[0] != PACKAGE.name:
        return False
    path = PACKAGE.joinpath(*parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _sql_built_in(paths: list[Path]) -> list[str]:
    """Where a module of `paths` takes SQL material (`SQL_MATERIAL`), or makes an `Execute` or
    a `DriverSQL` by any spelling (a name, or an attribute of a module imported whole)."""
    found = _offenders(paths, SQL_MATERIAL)
    for path in paths:
        found.extend(
            f"{_module_name(path)} imports {name} whole"
            for name in _whole_modules(path)
            if name in SQL_MODULES_WHOLE
        )
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in STATEMENT_WRAPPERS:
                    found.append(f"{_module_name(path)} calls {name}")
    return found


def test_operations_build_no_sql() -> None:
    """`_ops` yields what `_sql` builders return: the rule is on imports (exact, whatever the
    spelling of the call), not on the text of `select(` or `insert(` calls, which an alias
    hides and an unrelated name can match."""
    assert _sql_built_in(_modules("_ops")) == []


def test_a_statement_built_in_an_operation_fails_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule bites: synthetic `_ops` modules that build SQL, each in another spelling, are
    all reported, and one that only calls builders is not."""
    ops = tmp_path / "pdpp_store" / "_ops"
    ops.mkdir(parents=True)
    violations = {
        "selects": "from sqlalchemy import select\n",
        "lazily": "def plan() -> None:\n    from sqlalchemy.sql import text\n",
        "aliased": "import sqlalchemy as sa\n",
        "tables": "from .._sql.tables import records\n",
        "visibility": "from pdpp_store._sql.visibility import visible_records\n",
        "dialects_whole": "from pdpp_store._sql import dialects\n",
        "tables_whole": "from .._sql import tables\n",
        "dialects": "from pdpp_store._sql.dialects import strpos\n",
        "wraps": "from pdpp_store._sql.requests import Execute\n",
        "wraps_whole": (
            "from pdpp_store._sql import requests\n\n"
            "def plan() -> object:\n    return requests.Execute(None)\n"
        ),
    }
    clean = (
        "from pdpp_store._sql import writes as write_sql\n"
        "from pdpp_store._sql.dialects import MAX_SQL_INT\n"
        "from pdpp_store._sql.requests import COMMIT, Op\n"
    )
    for name, source in {**violations, "clean": clean}.items():
        (ops / f"{name}.py").write_text(source, encoding="utf-8")
    sql_package = tmp_path / "pdpp_store" / "_sql"  # so `from ._sql import x` names a module
    sql_package.mkdir()
    for name in ("__init__", "dialects", "requests", "tables", "visibility", "writes"):
        (sql_package / f"{name}.py").write_text("", encoding="utf-8")
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path / "pdpp_store")
    offenders = _sql_built_in(_modules("_ops"))
    for name in violations:
        assert any(line.startswith(f"pdpp_store._ops.{name} ") for line in offenders), name
    assert not any(line.startswith("pdpp_store._ops.clean ") for line in offenders)


# ---------------------------------------------------------------- no surface imports another

SURFACES = (
    "pdpp_store.cli",
    "pdpp_store.demo",
    "pdpp_store.rest",
    "pdpp_store.mcp",
    "pdpp_store.http",
    "pdpp_store.serve",
    "pdpp_store.auth",
    "pdpp_store.access_log",
    "pdpp_store.door",
    "pdpp_store.door_headers",
)
"""The surfaces, and the HTTP modules beside them: `http`, the door REST and MCP share
(bearer tokens, the 401, error envelopes, request ids), `serve`, which mounts both, `auth`,
the token resolvers `serve` configures (REST and MCP know only `http.Resolver`), and `door` and
`door_headers`, the limits, origin checks, CORS and compression `serve` puts in front."""

SURFACE_EDGES: dict[tuple[str, str], str] = {
    ("pdpp_store.rest", "pdpp_store.http"): "bearer tokens, the 401, envelopes and request ids",
    ("pdpp_store.mcp", "pdpp_store.http"): "bearer tokens and the 401 of the Streamable HTTP app",
    ("pdpp_store.serve", "pdpp_store.rest"): "serves the REST app under uvicorn",
    ("pdpp_store.serve", "pdpp_store.mcp"): "mounts the MCP app at /mcp of the REST app",
    ("pdpp_store.serve", "pdpp_store.http"): "the public URL and the limits the door applies",
    ("pdpp_store.serve", "pdpp_store.auth"): "the token resolvers `serve` is configured with",
    ("pdpp_store.auth", "pdpp_store.http"): "the `Resolver` interface, `Access`, the 401",
    ("pdpp_store.serve", "pdpp_store.access_log"): "the access log it serves behind",
    ("pdpp_store.access_log", "pdpp_store.http"): "the request id and the ASGI types",
    ("pdpp_store.serve", "pdpp_store.door"): "the limits and origin checks it serves behind",
    ("pdpp_store.serve", "pdpp_store.door_headers"): "CORS and compression it serves behind",
    ("pdpp_store.door", "pdpp_store.http"): "refusals as the envelope, with the request id",
    ("pdpp_store.door_headers", "pdpp_store.http"): "the ASGI types",
    ("pdpp_store.cli", "pdpp_store.serve"): "`pdpp-store serve`",
    ("pdpp_store.cli", "pdpp_store.auth"): "`pdpp-store serve --issuer ...`: its OAuth settings",
    ("pdpp_store.cli", "pdpp_store.demo"): "`pdpp-store demo`",
    ("pdpp_store.cli", "pdpp_store.mcp"): "`pdpp-store mcp` (stdio), and `--format text` renders "
    "continuations as the MCP server's tool calls (its SDK-free `calls`)",
}
"""The only imports from one surface into another, each with its reason: REST and MCP import
only the shared door, `http` imports no surface, `serve` alone imports both servers, and the
command line starts what its commands run."""


def _surface_of(name: str) -> str | None:
    return next((s for s in SURFACES if name == s or name.startswith(s + ".")), None)


def surface_crossings() -> list[str]:
    """Every import from one surface into another that `SURFACE_EDGES` does not allow."""
    found = []
    for path in _modules(*(surface.removeprefix("pdpp_store.") for surface in SURFACES)):
        importer = _surface_of(_module_name(path))
        for name in imports_of(path):
            imported = _surface_of(name)
            if imported not in (None, importer) and (importer, imported) not in SURFACE_EDGES:
                found.append(f"{_module_name(path)} imports {name}")
    return sorted(set(found))


def test_no_surface_imports_another() -> None:
    for surface in SURFACES:
        assert _modules(surface.removeprefix("pdpp_store.")), surface
    assert surface_crossings() == []


def test_the_new_http_modules_import_only_public_names() -> None:
    """`http`, `serve`, `auth` and the door use the store's public names only (`auth`'s and
    the door's own private modules are their own)."""
    offenders = [
        f"{_module_name(path)} imports {name}"
        for path in _modules("http", "serve", "auth", "access_log", "door", "door_headers")
        for name in imports_of(path)
        if _private(name) and not name.startswith(("pdpp_store.auth.", "pdpp_store.door."))
    ]
    assert offenders == []


def test_a_surface_importing_another_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative, absolute, lazy and package-level imports across surfaces are all caught; the
    allowed edges are not."""
    package = tmp_path / "pdpp_store"
    sources = {
        "rest/__init__.py": "",
        "rest/_app.py": "from pdpp_store.mcp import http_app\nfrom pdpp_store.http import Tokens\n",
        "mcp/__init__.py": "",
        "mcp/_http.py": "from ..rest import create_app\n",
        "http.py": "def later():\n    from pdpp_store import serve\n",
        "serve.py": "from pdpp_store.rest import create_app\nfrom pdpp_store.mcp import http_app\n",
        "demo.py": "import pdpp_store.cli\n",
        "cli.py": "from .serve import run\nfrom .demo import run_demo\n",
    }
    _use_package(package, sources, monkeypatch)
    assert surface_crossings() == [
        "pdpp_store.demo imports pdpp_store.cli",
        "pdpp_store.http imports pdpp_store.serve",
        "pdpp_store.mcp._http imports pdpp_store.rest",
        "pdpp_store.mcp._http imports pdpp_store.rest.create_app",
        "pdpp_store.rest._app imports pdpp_store.mcp",
        "pdpp_store.rest._app imports pdpp_store.mcp.http_app",
    ]


# ---------------------------------------------------------------- the door in levels

DOOR_LAYERS: tuple[tuple[str, ...], ...] = (
    ("_limits", "_heap", "_accept"),
    ("_refusals",),
    ("_gate",),
    ("_protocol", "_middleware"),
)
"""The door's modules, lowest first: each may import the door's modules of lower levels only,
never one of its own level or above, nor the package's face (`pdpp_store.door`, which re-exports
every level). The protocol and the middleware stand side by side over the `Gate` they share:
neither knows the other."""


def door_crossings() -> list[str]:
    """Every import inside the door that `DOOR_LAYERS` does not allow, and every module of the
    door that no level names."""
    level = {f"pdpp_store.door.{name}": i for i, names in enumerate(DOOR_LAYERS) for name in names}
    found = []
    for path in _modules("door"):
        module = _module_name(path)
        if module == "pdpp_store.door":
            continue
        if module not in level:
            found.append(f"{module} is in no level")
            continue
        for name in modules_imported(path):
            inside = name == "pdpp_store.door" or name.startswith("pdpp_store.door.")
            if inside and level.get(name, len(DOOR_LAYERS)) >= level[module]:
                found.append(f"{module} imports {name}")
    return sorted(set(found))


def test_the_door_imports_only_lower_levels() -> None:
    for names in DOOR_LAYERS:
        for name in names:
            assert _modules(f"door/{name}"), name
    assert door_crossings() == []


def test_a_door_module_importing_its_level_or_above_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upward, sideways, lazy and relative imports inside the door, an import of its face, and
    a module in no level are all caught; a downward import is not."""
    package = tmp_path / "pdpp_store"
    sources = {
        "door/__init__.py": "from ._protocol import DoorProtocol\nfrom ._middleware import M\n",
        "door/_limits.py": "def later():\n    from pdpp_store.door._gate import Gate\n",
        "door/_gate.py": "from . import _limits\nfrom pdpp_store.door import Limits\n",
        "door/_refusals.py": "import pdpp_store.door._limits\nfrom ._gate import Gate\n",
        "door/_protocol.py": "from ._gate import Gate\nfrom ._middleware import M\n",
        "door/_middleware.py": "from pdpp_store.door._refusals import answer\n",
        "door/_extra.py": "",
    }
    _use_package(package, sources, monkeypatch)
    assert door_crossings() == [
        "pdpp_store.door._extra is in no level",
        "pdpp_store.door._gate imports pdpp_store.door",
        "pdpp_store.door._limits imports pdpp_store.door._gate",
        "pdpp_store.door._protocol imports pdpp_store.door._middleware",
        "pdpp_store.door._refusals imports pdpp_store.door._gate",
    ]


# ---------------------------------------------------------------- nothing runs back up

ABOVE_THE_STORE = (
    "pdpp_store._opening",
    "pdpp_store._store",
    "pdpp_store.http",
    "pdpp_store.serve",
    "pdpp_store.auth",
    "pdpp_store.access_log",
    "pdpp_store.rest",
    "pdpp_store.mcp",
    "pdpp_store.cli",
    "pdpp_store.demo",
)
"""What sits above the layers that build and run reads: the fronts, opening, and the surfaces."""

LOWER_LAYERS = {
    "_core": ABOVE_THE_STORE,
    "evidence": ABOVE_THE_STORE,
    "_sql": ABOVE_THE_STORE,
    "_ops": ABOVE_THE_STORE,
    "_runtime": ("pdpp_store._ops", *ABOVE_THE_STORE),
}
"""Each lower layer and what it may not import (besides the rules above): nothing above it, and
not the package's root either, which re-exports the fronts (`from pdpp_store import Store`)."""


def upward_imports(layers: dict[str, tuple[str, ...]]) -> list[str]:
    found = []
    for layer, forbidden in layers.items():
        paths = _modules(layer)
        found.extend(_offenders(paths, forbidden))
        found.extend(
            f"{_module_name(path)} imports the package root"
            for path in paths
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if (isinstance(node, ast.ImportFrom) and not node.level and node.module == "pdpp_store")
            or (isinstance(node, ast.Import) and any(a.name == "pdpp_store" for a in node.names))
        )
    return sorted(found)


def test_no_lower_layer_imports_one_above_it() -> None:
    for layer in LOWER_LAYERS:
        assert _modules(layer), layer
    assert upward_imports(LOWER_LAYERS) == []


def test_an_upward_import_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pdpp_store"
    sources = {
        "_core/a.py": "from pdpp_store import Store\n",
        "_sql/b.py": "def later():\n    from pdpp_store.http import Tokens\n",
        "_runtime/c.py": "from .._ops import reads\n",
        "_ops/d.py": "import pdpp_store\n",
        "evidence/e.py": "from pdpp_store._core import errors\n",
    }
    _use_package(package, sources, monkeypatch)
    assert upward_imports(LOWER_LAYERS) == [
        "pdpp_store._core.a imports the package root",
        "pdpp_store._ops.d imports the package root",
        "pdpp_store._runtime.c imports pdpp_store._ops",
        "pdpp_store._runtime.c imports pdpp_store._ops.reads",
        "pdpp_store._sql.b imports pdpp_store.http",
        "pdpp_store._sql.b imports pdpp_store.http.Tokens",
    ]


# ---------------------------------------------------------------- no circle


def modules_imported(path: Path) -> set[str]:
    """The modules `path` imports: `from a import b` counts as `a.b` when that is a module of
    the tree under `PACKAGE`, else as `a`."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            origin = _origin(node, package)
            for alias in node.names:
                whole = f"{origin}.{alias.name}"
                targets.add(whole if _is_module(whole) else origin)
    return targets


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of the package it imports (`modules_imported`); a module's own
    ancestor packages are not edges, since importing any submodule runs them first anyway."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        graph[module] = {
            target
            for target in modules_imported(path)
            if _is_module(target) and target != module and not module.startswith(target + ".")
        }
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_circle() -> None:
    graph = import_graph()
    assert "pdpp_store._store" in graph["pdpp_store"]
    assert circles(graph) == []


def test_a_circle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pdpp_store"
    sources = {
        "__init__.py": "from .rest import app\n",
        "rest/__init__.py": "from ._app import app\n",
        "rest/_app.py": "def app():\n    from pdpp_store.mcp import tools\n",
        "mcp/__init__.py": "",
        "mcp/tools.py": "from ..rest import _app\n",
        "mcp/calls.py": "from . import tools\n",
    }
    _use_package(package, sources, monkeypatch)
    assert circles(import_graph()) == [["pdpp_store.mcp.tools", "pdpp_store.rest._app"]]
