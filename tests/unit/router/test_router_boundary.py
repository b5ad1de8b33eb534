"""The router stands alone: its modules import only ``zlink_trio.ids``, ``zlink_trio.errors``,
their own package, the standard library, attrs and trio (DESIGN.md §3); its ``__init__`` only
re-exports (STYLE §1)."""

from __future__ import annotations

import ast
import pathlib
import sys

import zlink_trio.router

ROUTER = pathlib.Path(zlink_trio.router.__file__).parent
ALLOWED_RUNTIME = {"zlink_trio.ids", "zlink_trio.errors"}
ALLOWED_THIRD_PARTY = {"attrs", "trio"}


def _imports(path: pathlib.Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names.append(node.module or "")
            elif node.level == 1:
                names.append("zlink_trio.router." + (node.module or ""))
            else:
                names.append("zlink_trio." + (node.module or ""))
    return names


def test_router_modules_import_only_ids_errors_and_themselves() -> None:
    files = sorted(ROUTER.glob("*.py"))
    assert ROUTER / "config.py" in files
    for path in files:
        for name in _imports(path):
            root = name.split(".")[0]
            if root == "zlink_trio":
                assert name.startswith("zlink_trio.router") or name in ALLOWED_RUNTIME, (
                    f"{path.name} imports {name}"
                )
            else:
                assert root in sys.stdlib_module_names or root in ALLOWED_THIRD_PARTY, (
                    f"{path.name} imports {name}"
                )


def test_init_only_reexports_with_explicit_aliases() -> None:
    tree = ast.parse((ROUTER / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        assert isinstance(node, ast.ImportFrom), ast.dump(node)
        for alias in node.names:
            assert alias.asname == alias.name, alias.name
            assert hasattr(zlink_trio.router, alias.name)
