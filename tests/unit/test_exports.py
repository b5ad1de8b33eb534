"""The public surface is what zlink_trio, zlink_trio.testing re-export (STYLE §1)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import pydoc
import textwrap

import pytest

import zlink_trio
from zlink_trio import errors, ids

PACKAGES = ["zlink_trio", "zlink_trio.testing"]


@pytest.mark.parametrize("package", PACKAGES)
def test_init_only_reexports_with_explicit_aliases(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__file__ is not None
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            continue  # the explicit public list (checked below)
        assert isinstance(node, ast.ImportFrom), f"{package}: only re-exports, got {ast.dump(node)}"
        for alias in node.names:
            assert alias.asname == alias.name, f"{package}: {alias.name} needs 'as {alias.name}'"
            assert hasattr(module, alias.name)


def test_core_names_are_public() -> None:
    for name in [
        "App",
        "open_server",
        "Server",
        "ServerConfig",
        "MeshConfig",
        "ActorId",
        "ActorRef",
        "Created",
        "Existing",
        "Rejected",
        "on_send",
        "on_request",
        "RecreateOnRelocation",
        "DisableRelocation",
        "PreserveStateWith",
        "Approve",
        "Reject",
        "ZLinkError",
        "ErrorKind",
        "serve_server",
        "MemoryLocationStore",
        "MemoryStoreConfig",
        "PostgresStoreConfig",
    ]:
        assert hasattr(zlink_trio, name), name
    from zlink_trio import testing

    for name in [
        "open_cluster",
        "FaultPlan",
        "WireTap",
        "CountingStore",
        "advance_store_clock",
        "node_of",
        "server_engine",
        "server_store",
        "server_app",
    ]:
        assert hasattr(testing, name), name


def _reexported(package: str) -> list[str]:
    module = importlib.import_module(package)
    assert module.__file__ is not None
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    return [
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name != "__version__"
    ]


def test_all_is_explicit_complete_and_sorted() -> None:
    """``zlink_trio.__all__`` lists exactly the re-exported names, sorted, no repeats."""
    exported = zlink_trio.__all__
    assert exported == sorted(exported)
    assert len(set(exported)) == len(exported)
    assert set(exported) == set(_reexported("zlink_trio"))


def test_every_name_in_all_is_importable() -> None:
    namespace: dict[str, object] = {}
    exec("from zlink_trio import *", namespace)
    for name in zlink_trio.__all__:
        assert namespace[name] is getattr(zlink_trio, name), name


def test_every_public_error_is_exported() -> None:
    """Every framework error class a caller can receive is importable from zlink_trio:
    every class of zlink_trio.errors (and InvalidId), under its own name."""
    classes = [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, errors.ZLinkError)
    ]
    classes.append(ids.InvalidId)
    assert len(classes) >= 20
    for cls in classes:
        assert cls.__name__ in zlink_trio.__all__, cls.__name__
        assert getattr(zlink_trio, cls.__name__) is cls
    for name in errors.__all__:
        assert name == "error_from_kind" or name in zlink_trio.__all__, name


def test_invalid_argument_is_a_value_error_and_a_zlink_error() -> None:
    assert issubclass(zlink_trio.InvalidArgument, ValueError)
    assert issubclass(zlink_trio.InvalidArgument, zlink_trio.ZLinkError)


def test_help_names_the_package_its_smallest_example_and_the_docs() -> None:
    text = pydoc.render_doc(zlink_trio, renderer=pydoc.TextDoc())
    assert "a Trio runtime for distributed" in text
    assert "The smallest program" in text
    assert "docs/api.md" in text
    assert "open_server" in text


def test_the_docstring_example_runs() -> None:
    """The smallest program in ``help(zlink_trio)`` runs as written (one node in this
    process, a memory Location Store) and prints the reply."""
    doc = zlink_trio.__doc__
    assert doc is not None
    example = doc.split("The smallest program::")[1].split("\n\nCalls and their errors")[0]
    printed: list[object] = []
    namespace: dict[str, object] = {"print": printed.append}
    exec(compile(textwrap.dedent(example), "zlink_trio.__doc__", "exec"), namespace)
    assert printed == [b"2"]
