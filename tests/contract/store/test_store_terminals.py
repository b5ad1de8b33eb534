"""Location Store contract: durable-operation terminal records."""

from __future__ import annotations

import pytest
from store_kit import actor, applied, conflict, operation_key, register, reserved

from zlink_trio.ids import NodeGeneration, NodeRid, OperationId
from zlink_trio.store.api import LocationStore, OperationKey, TerminalRecord
from zlink_trio.testing import advance_store_clock

RETENTION = 300.0


async def test_first_writer_wins(store: LocationStore) -> None:
    key = OperationKey(NodeRid.new(), NodeGeneration.new(), OperationId(1))
    first = TerminalRecord(key, b"created")
    assert await store.record_terminal(first, retain_for=RETENTION) == first
    second = TerminalRecord(key, b"rejected")
    assert await store.record_terminal(second, retain_for=RETENTION * 2) == first
    assert await store.read_terminal(key) == first


async def test_unknown_terminal_is_none(store: LocationStore) -> None:
    key = OperationKey(NodeRid.new(), NodeGeneration.new(), OperationId(1))
    assert await store.read_terminal(key) is None


async def test_terminal_expires_after_its_retention(store: LocationStore) -> None:
    """A04-20: the terminal answers replays until deadline + retention, then it is gone
    and a new record may take the key."""
    key = OperationKey(NodeRid.new(), NodeGeneration.new(), OperationId(5))
    record = TerminalRecord(key, b"\x01reply")
    await store.record_terminal(record, retain_for=RETENTION)
    await advance_store_clock(store, RETENTION - 1)  # 4 min 59 s
    assert await store.read_terminal(key) == record
    await advance_store_clock(store, 2)
    assert await store.read_terminal(key) is None
    fresh = TerminalRecord(key, b"\x02again")
    assert await store.record_terminal(fresh, retain_for=RETENTION) == fresh
    assert await store.read_terminal(key) == fresh


async def test_each_key_part_makes_a_different_record(store: LocationStore) -> None:
    """A04-20 (implied): changing Node RID, lifecycle generation or OperationId is not a
    replay."""
    rid, gen, op = NodeRid.new(), NodeGeneration(5), OperationId(9)
    base = OperationKey(rid, gen, op)
    await store.record_terminal(TerminalRecord(base, b"base"), retain_for=RETENTION)
    for other in (
        OperationKey(NodeRid.new(), gen, op),
        OperationKey(rid, NodeGeneration(6), op),
        OperationKey(rid, gen, OperationId(10)),
    ):
        assert await store.read_terminal(other) is None
        mine = TerminalRecord(other, b"other")
        assert await store.record_terminal(mine, retain_for=RETENTION) == mine
    assert await store.read_terminal(base) == TerminalRecord(base, b"base")


async def test_negative_retention_is_rejected(store: LocationStore) -> None:
    key = OperationKey(NodeRid.new(), NodeGeneration.new(), OperationId(1))
    with pytest.raises(ValueError):
        await store.record_terminal(TerminalRecord(key, b"x"), retain_for=-1.0)
    assert await store.read_terminal(key) is None


async def test_commit_ready_records_its_terminal_atomically(store: LocationStore) -> None:
    node = await register(store)
    row = await reserved(store, actor(node, "p"))
    terminal = TerminalRecord(operation_key(node, 1), b"created+reply")
    stale = await store.commit_ready(
        row.key, row.store_version + 1000, terminal=terminal, retain_for=RETENTION
    )
    assert conflict(stale) == row
    assert await store.read_terminal(terminal.key) is None  # a lost CAS records nothing
    applied(await store.commit_ready(row.key, row.store_version, terminal=terminal, retain_for=60))
    assert await store.read_terminal(terminal.key) == terminal
    await advance_store_clock(store, 61)
    assert await store.read_terminal(terminal.key) is None


async def test_abort_creation_records_its_terminal_atomically(store: LocationStore) -> None:
    """A04-21: a rejected create leaves no row and a terminal for replays."""
    node = await register(store)
    row = await reserved(store, actor(node, "p"))
    terminal = TerminalRecord(operation_key(node, 2), b"rejected")
    stale = await store.abort_creation(
        row.key, row.store_version + 1000, terminal=terminal, retain_for=RETENTION
    )
    assert conflict(stale) == row
    assert await store.read_terminal(terminal.key) is None
    result = await store.abort_creation(
        row.key, row.store_version, terminal=terminal, retain_for=RETENTION
    )
    assert applied(result) is None
    assert await store.read(row.key) is None
    assert await store.read_terminal(terminal.key) == terminal


async def test_commit_keeps_an_existing_live_terminal(store: LocationStore) -> None:
    node = await register(store)
    key = operation_key(node, 3)
    earlier = TerminalRecord(key, b"earlier")
    await store.record_terminal(earlier, retain_for=RETENTION)
    row = await reserved(store, actor(node, "p"))
    applied(
        await store.commit_ready(
            row.key, row.store_version, terminal=TerminalRecord(key, b"later"), retain_for=60
        )
    )
    assert await store.read_terminal(key) == earlier
