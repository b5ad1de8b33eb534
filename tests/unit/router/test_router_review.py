"""Review checks of spec 10's do-not list, read off the source (R10-169, R10-170)."""

from __future__ import annotations

import ast
from pathlib import Path

import zlink_trio.router

ROUTER = Path(zlink_trio.router.__file__).parent
TESTS = Path(__file__).parents[2]


def _calls(path: Path, attribute: str) -> list[tuple[str, int, str]]:
    """(file, line, enclosing function) of every call ``<something>.<attribute>(...)``."""
    tree = ast.parse(path.read_text())
    return [
        (path.name, node.lineno, function.name)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attribute
    ]


def test_r10_169_no_router_decision_reads_status() -> None:
    """R10-169: status() is observation only: nothing in the router calls ``status(`` or
    reads the projection except ``status`` itself (the STATUS handler only offers to it)."""
    readers = [c for p in sorted(ROUTER.glob("*.py")) for c in _calls(p, "status")]
    assert readers == []
    projection = [
        c
        for p in sorted(ROUTER.glob("*.py"))
        for c in _calls(p, "get")
        if "_projection.get" in p.read_text().splitlines()[c[1] - 1]
    ]
    assert [(f, fn) for f, _, fn in projection] == [("router.py", "status")]


def test_r10_170_history_is_deleted_only_through_delete_session() -> None:
    """R10-170: the only record delete in the router is ``delete_session``'s (through the
    fenced records of its SessionStore); in the tests, only the SessionRecordStore SPI
    contract suite calls a record store's delete directly (it tests that method)."""
    router = [c for p in sorted(ROUTER.glob("*.py")) for c in _calls(p, "delete")]
    assert sorted((f, fn) for f, _, fn in router) == [
        ("router.py", "delete_session"),
        ("session_store.py", "delete"),
    ]
    direct = [
        (p.name, line)
        for p in sorted(TESTS.rglob("test_*.py"))
        if "router" in p.parts and p.name != Path(__file__).name
        for line, text in enumerate(p.read_text().splitlines(), 1)
        if "record_backend.delete(" in text or "records.delete(" in text
    ]
    assert {name for name, _ in direct} <= {"test_r10_session_store.py"}
