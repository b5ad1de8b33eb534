"""Location Store contract: malformed input is rejected the same way by every store,
before anything is read or written (api.py validates it for all of them)."""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable

import pytest
from store_kit import TTL, Node, actor, applied, operation_key, ready, register, snapshot, spot

from zlink_trio.ids import U63_MAX, InvalidId, NodeRid, OperationId
from zlink_trio.store.api import (
    AuthorityRow,
    ContentRef,
    LocationStore,
    Namespace,
    ObjectKey,
    ObjectKind,
    RecoveryPointer,
    RelocationMark,
    TerminalRecord,
)

BAD_VERSIONS = [2**63, 2**64, -1, True, 1.0]
"""Not an int in 0..2**63-1 (store versions are positive int8 values)."""

CasCall = Callable[[LocationStore, AuthorityRow, object], Awaitable[object]]

CAS_CALLS: dict[str, CasCall] = {
    "commit_ready": lambda s, r, v: s.commit_ready(r.key, v),  # type: ignore[arg-type]
    "abort_creation": lambda s, r, v: s.abort_creation(r.key, v),  # type: ignore[arg-type]
    "change_owner": lambda s, r, v: s.change_owner(r.key, v, r.owner),  # type: ignore[arg-type]
    "change_owners": lambda s, r, v: s.change_owners([(r.key, v)], r.owner),  # type: ignore[list-item]
    "set_membership": lambda s, r, v: s.set_membership(r.key, v, None),  # type: ignore[arg-type]
    "set_recovery": lambda s, r, v: s.set_recovery(r.key, v, None),  # type: ignore[arg-type]
    "set_relocation": lambda s, r, v: s.set_relocation(r.key, v, None),  # type: ignore[arg-type]
    "begin_closing": lambda s, r, v: s.begin_closing(r.key, v),  # type: ignore[arg-type]
    "release": lambda s, r, v: s.release(r.key, v),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("object_id", ["\ud800", "a\udfffb", "", "x" * 256])
async def test_an_invalid_object_id_is_invalid_id_on_every_store(
    store: LocationStore, object_id: str
) -> None:
    """A lone surrogate cannot be stored as UTF-8; empty and > 255-byte ids break the
    text-id rule. ObjectKey refuses them, so no store ever sees one."""
    node = await register(store)
    before = await snapshot(store)
    with pytest.raises(InvalidId):
        await store.read(ObjectKey.actor(object_id))
    with pytest.raises(InvalidId):
        await store.reserve(actor(node, object_id))
    assert await snapshot(store) == before


@pytest.mark.parametrize("call", sorted(CAS_CALLS))
@pytest.mark.parametrize("version", BAD_VERSIONS, ids=repr)
async def test_an_expected_version_out_of_range_is_a_value_error(
    store: LocationStore, call: str, version: object
) -> None:
    node = await register(store)
    creating = {"commit_ready", "abort_creation"}
    row = await (
        store.reserve(actor(node, "p")) if call in creating else ready(store, actor(node, "p"))
    )
    if call in creating:
        row = applied(row)  # type: ignore[arg-type]
    before = await snapshot(store)
    with pytest.raises(ValueError, match="expected_version"):
        await CAS_CALLS[call](store, row, version)  # type: ignore[arg-type]
    assert await snapshot(store) == before


@pytest.mark.parametrize("cursor", [2**63, -1, True, 1.0], ids=repr)
def test_a_replay_cursor_out_of_range_is_a_value_error(cursor: object) -> None:
    with pytest.raises(ValueError, match="replay_cursor"):
        RecoveryPointer(ContentRef.of(b"root"), cursor)  # type: ignore[arg-type]


async def test_the_largest_replay_cursor_round_trips(store: LocationStore) -> None:
    node = await register(store)
    row = applied(await store.reserve(spot(node, "inst", kind=ObjectKind.INSTANCE_SPOT)))
    pointer = RecoveryPointer(ContentRef.of(b"root"), U63_MAX)
    row = applied(await store.set_recovery(row.key, row.store_version, pointer))
    assert row.recovery == pointer
    assert await store.read(row.key) == row
    mark = RelocationMark(OperationId(1), node.fence(), sealed=False)
    applied(await store.set_relocation(row.key, row.store_version, mark))


ArgCall = Callable[[LocationStore, Node], Awaitable[object]]

ARGUMENT_MISUSE: dict[str, tuple[ArgCall, str]] = {
    "list_rows limit 0": (
        lambda s, n: s.list_rows(Namespace.ACTOR, after=None, limit=0),
        "limit must be in 1..1000, got 0",
    ),
    "list_rows limit True": (
        lambda s, n: s.list_rows(Namespace.ACTOR, after=None, limit=True),
        "limit must be in 1..1000, got True",
    ),
    "record_terminal retain -1": (
        lambda s, n: s.record_terminal(TerminalRecord(operation_key(n), b"t"), retain_for=-1.0),
        "retain_for must be >= 0, got -1.0",
    ),
    "put_root retain nan": (
        lambda s, n: s.put_root(b"x", retain_for=math.nan),
        "retain_for must be >= 0, got nan",
    ),
    "renew_lease ttl 0": (
        lambda s, n: s.renew_lease(n.rid, n.lease.lease_generation, 0.0),
        "lease_ttl must be finite and > 0, got 0.0",
    ),
    "register_node ttl inf": (
        lambda s, n: s.register_node(n.rid, n.generation, (), capacity=1, lease_ttl=math.inf),
        "lease_ttl must be finite and > 0, got inf",
    ),
    "register_node capacity -1": (
        lambda s, n: s.register_node(n.rid, n.generation, (), capacity=-1, lease_ttl=TTL),
        "capacity must be an int >= 0, got -1",
    ),
    "register_node foreign descriptor": (
        lambda s, n: s.register_node(
            NodeRid.new(), n.generation, n.descriptors, capacity=1, lease_ttl=TTL
        ),
        "every descriptor must name the registering node lifecycle",
    ),
}


@pytest.mark.parametrize("case", sorted(ARGUMENT_MISUSE))
async def test_argument_misuse_is_the_same_value_error_on_every_store(
    store: LocationStore, case: str
) -> None:
    """Both stores call one validator set (zlink_trio/store/validate.py): the same misuse
    gets the same ValueError and message, and changes nothing."""
    node = await register(store)
    before = await snapshot(store)
    call, message = ARGUMENT_MISUSE[case]
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        await call(store, node)
    assert await snapshot(store) == before
