"""The public surface is what zlink_trio, zlink_trio.testing re-export (STYLE §1)."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import zlink_trio

PACKAGES = ["zlink_trio", "zlink_trio.testing"]


@pytest.mark.parametrize("package", PACKAGES)
def test_init_only_reexports_with_explicit_aliases(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__file__ is not None
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring
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
