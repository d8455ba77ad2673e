"""The REST surface stands on the public API only, and the library stands without it.

- every module of `pdpp_store.rest` imports from `pdpp_store` only its public packages
  (`pdpp_store`, `pdpp_store.evidence`, `pdpp_store.http`) and its own modules;
- `import pdpp_store` (and the CLI module) loads neither FastAPI nor uvicorn.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pdpp_store

REST = Path(pdpp_store.__file__).parent / "rest"
PUBLIC = {"pdpp_store", "pdpp_store.evidence", "pdpp_store.http"}


def _imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found.append(("." * node.level + (node.module or ""), node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
    return found


def test_rest_imports_only_public_names() -> None:
    modules = sorted(REST.glob("*.py"))
    assert len(modules) >= 5
    own = {path.stem for path in modules}

    def allowed(name: str) -> bool:
        if name.startswith("."):
            return not name.startswith("..") and name.lstrip(".").split(".")[0] in own
        return not name.startswith("pdpp_store") or name in PUBLIC

    wrong = [
        f"{module.name}:{line} {name}"
        for module in modules
        for name, line in _imports(module)
        if not allowed(name)
    ]
    assert wrong == []


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from pdpp_store._core.errors import StoreError\nfrom .. import x\n")
    assert [name for name, _ in _imports(sample)] == ["pdpp_store._core.errors", ".."]


def test_the_library_loads_without_the_server_packages() -> None:
    code = (
        "import sys, pdpp_store, pdpp_store.cli\n"
        "loaded = [m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
