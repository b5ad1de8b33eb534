"""SessionLeaseStore + SessionRecordStore contract, and the node-scoped SessionStore over
them (spec 10 §5.3, §7.3, §7.4, §10.3): election with fencing tokens, fenced record
writes, claim order, renew through the store."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from router_kit import (
    AGENT,
    NODE_A,
    NODE_B,
    OTHER_AGENT,
    S1,
    S2,
    Advance,
    CallLog,
    Timing,
    raising,
)

from zlink_trio.errors import NotFound
from zlink_trio.router import (
    AgentConflict,
    Claimed,
    FencingRejected,
    HeldElsewhere,
    LeaseGranted,
    LeaseHeld,
    NodeId,
    ReserverId,
    SessionClaimFailed,
    SessionLeaseStore,
    SessionRecordStore,
    SessionStore,
    TranscriptEntry,
)

TTL = 30.0


def _store(
    records: SessionRecordStore, leases: SessionLeaseStore, node: NodeId, ttl: float = TTL
) -> SessionStore:
    return SessionStore(records=records, leases=leases, node_id=node, lease_ttl=ttl)


def _entry(text: str) -> TranscriptEntry:
    return TranscriptEntry("user", text)


# --- the lease SPI --------------------------------------------------------------------------


async def test_lease_election_fencing_tokens_and_expiry(
    lease_backend: SessionLeaseStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SPI contract: one unexpired lease per session; a new acquisition after expiry has a
    larger fencing token; expiry is ``now >= expires_at`` (to the instant on an exact clock;
    on the real one: live a slack before the TTL, gone a slack after it)."""
    ttl = timing.lease_ttl
    first = await lease_backend.try_acquire(S1, NODE_A, ttl)
    assert isinstance(first, LeaseGranted)
    assert timing.near(first.lease.expires_at, trio.current_time() + ttl)
    held = await lease_backend.try_acquire(S1, NODE_B, ttl)
    assert held == LeaseHeld(NODE_A, first.lease.expires_at)
    assert isinstance(await lease_backend.try_acquire(S1, NODE_A, ttl), LeaseHeld)
    other = await lease_backend.try_acquire(S2, NODE_B, ttl)
    assert isinstance(other, LeaseGranted)
    await advance(timing.pick(ttl - 0.001, ttl - timing.slack))
    assert await lease_backend.current(S1) == first.lease
    await advance(timing.pick(0.001, 2 * timing.slack))
    assert await lease_backend.current(S1) is None
    second = await lease_backend.try_acquire(S1, NODE_B, ttl)
    assert isinstance(second, LeaseGranted)
    assert second.lease.fencing_token > first.lease.fencing_token
    assert second.lease.holder_id == NODE_B


async def test_lease_renew_and_release_only_the_current_lease(
    lease_backend: SessionLeaseStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SPI contract: renew/release act only on the current acquisition (same token)."""
    ttl = timing.lease_ttl
    granted = await lease_backend.try_acquire(S1, NODE_A, ttl)
    assert isinstance(granted, LeaseGranted)
    await advance(ttl * 2 / 3)
    renewed = await lease_backend.renew(granted.lease, ttl)
    assert renewed is not None
    assert timing.near(renewed.expires_at, trio.current_time() + ttl)
    assert renewed.fencing_token == granted.lease.fencing_token
    await advance(ttl)
    assert await lease_backend.renew(renewed, ttl) is None  # expired: lost
    taken = await lease_backend.try_acquire(S1, NODE_B, ttl)
    assert isinstance(taken, LeaseGranted)
    assert await lease_backend.renew(renewed, ttl) is None
    assert not await lease_backend.release(renewed)
    assert await lease_backend.current(S1) == taken.lease
    assert await lease_backend.release(taken.lease)
    assert await lease_backend.current(S1) is None
    assert not await lease_backend.release(taken.lease)


# --- the record SPI -------------------------------------------------------------------------


async def test_records_are_fenced_by_the_highest_token_seen(
    record_backend: SessionRecordStore,
) -> None:
    """SPI contract: provision creates the bound record once; every write carries a token
    and one below the record's fence is refused, leaving the record unchanged."""
    assert await record_backend.load(S1) is None
    with pytest.raises(NotFound):
        await record_backend.append(S1, [_entry("x")], 1)
    created = await record_backend.provision(S1, AGENT, 5)
    assert (created.agent_ref, created.transcript, created.fence) == (AGENT, (), 5)
    again = await record_backend.provision(S1, OTHER_AGENT, 6)
    assert again.agent_ref == AGENT  # provisioning never rebinds
    await record_backend.append(S1, [_entry("a"), _entry("b")], 6)
    with pytest.raises(FencingRejected):
        await record_backend.append(S1, [_entry("stale")], 5)
    with pytest.raises(FencingRejected):
        await record_backend.provision(S1, AGENT, 4)
    with pytest.raises(FencingRejected):
        await record_backend.delete(S1, 5)
    view = await record_backend.load(S1)
    assert view is not None
    assert [e.text for e in view.transcript] == ["a", "b"]
    assert view.fence == 6
    assert await record_backend.delete(S1, 7)
    assert await record_backend.load(S1) is None
    assert not await record_backend.delete(S1, 8)


async def test_r10_137_split_brain_writes_of_an_expired_holder_are_rejected(
    record_backend: SessionRecordStore,
    lease_backend: SessionLeaseStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-137: an old holder whose lease expired keeps writing with its token; once the
    new holder claimed, the old writes are rejected and the new holder's succeed."""
    ttl = timing.lease_ttl
    old = await lease_backend.try_acquire(S1, NODE_A, ttl)
    assert isinstance(old, LeaseGranted)
    await record_backend.provision(S1, AGENT, old.lease.fencing_token)
    await record_backend.append(S1, [_entry("a1")], old.lease.fencing_token)
    await advance(ttl)  # partitioned: A does not know its lease expired
    new = await lease_backend.try_acquire(S1, NODE_B, ttl)
    assert isinstance(new, LeaseGranted)
    await record_backend.provision(S1, AGENT, new.lease.fencing_token)
    with pytest.raises(FencingRejected):
        await record_backend.append(S1, [_entry("a2")], old.lease.fencing_token)
    await record_backend.append(S1, [_entry("b1")], new.lease.fencing_token)
    view = await record_backend.load(S1)
    assert view is not None
    assert [e.text for e in view.transcript] == ["a1", "b1"]


# --- SessionStore ---------------------------------------------------------------------------


async def test_r10_39_claim_order_election_binding_provisioning(
    record_backend: SessionRecordStore, lease_backend: SessionLeaseStore
) -> None:
    """R10-39: the lease backend is asked before the record backend; the election loser
    makes no record call; AgentConflict writes nothing; the first claim creates the record
    with its agentRef."""
    log = CallLog()
    records = log.spy("records", record_backend)
    leases = log.spy("leases", lease_backend)
    a = _store(records, leases, NODE_A)
    b = _store(records, leases, NODE_B)

    first = await a.claim(S1, AGENT)
    assert isinstance(first, Claimed)
    assert first.record.agent_ref == AGENT
    assert log.calls == ["leases.try_acquire", "records.load", "records.provision"]
    view = await record_backend.load(S1)
    assert view is not None and view.agent_ref == AGENT

    log.calls.clear()
    assert await b.claim(S1, AGENT) == HeldElsewhere(NODE_A)
    assert log.calls == ["leases.try_acquire"]  # the loser never touches a record

    await a.release(S1)
    log.calls.clear()
    conflict = await b.claim(S1, OTHER_AGENT)
    assert conflict == AgentConflict(AGENT)
    assert "records.provision" not in log.calls and "records.append" not in log.calls
    assert log.calls[:2] == ["leases.try_acquire", "records.load"]
    # the lease won by the refused claim was given back
    assert await lease_backend.current(S1) is None
    view = await record_backend.load(S1)
    assert view is not None and view.agent_ref == AGENT


async def test_a_held_lease_is_reused_by_later_claims(
    record_backend: SessionRecordStore, lease_backend: SessionLeaseStore
) -> None:
    """§3.2: the lease is session-lifetime: later claims by its holder elect nothing."""
    log = CallLog()
    store = _store(record_backend, log.spy("leases", lease_backend), NODE_A)
    outcomes = [await store.claim(S1, AGENT) for _ in range(5)]
    assert log.of("leases") == ["leases.try_acquire"]
    assert all(isinstance(o, Claimed) for o in outcomes)
    assert [o.newly_acquired for o in outcomes if isinstance(o, Claimed)] == [True] + [False] * 4
    # a conflict on a lease held from before keeps the lease
    assert isinstance(await store.claim(S1, OTHER_AGENT), AgentConflict)
    assert store.held(S1) is not None


async def test_r10_40_the_store_fences_writes_with_the_lease_it_holds(
    record_backend: SessionRecordStore,
    lease_backend: SessionLeaseStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-40: a router's store fences records() writes itself: two stores built from the
    same backends are distinct, and one's lease does not authorize the other's writes;
    after losing the lease a write through the store is rejected."""
    ttl = timing.lease_ttl
    a = _store(record_backend, lease_backend, NODE_A, ttl)
    b = _store(record_backend, lease_backend, NODE_B, ttl)
    assert a is not b and a.records is not b.records
    assert isinstance(await a.claim(S1, AGENT), Claimed)
    await a.records.append(S1, [_entry("a1")])
    with pytest.raises(FencingRejected):
        await b.records.append(S1, [_entry("b-without-lease")])
    await advance(ttl)  # A never renewed: its lease is gone
    assert a.held(S1) is None
    with pytest.raises(FencingRejected):
        await a.records.append(S1, [_entry("a-after-loss")])
    view = await record_backend.load(S1)
    assert view is not None and [e.text for e in view.transcript] == ["a1"]


async def test_r10_94_renew_goes_through_the_store_and_forgets_a_lost_lease(
    record_backend: SessionRecordStore,
    lease_backend: SessionLeaseStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-94: renewal goes through SessionStore.renew; when it fails the store drops its
    lease at once, so this node's next fenced write is rejected instead of landing on the
    new holder's history."""
    ttl = timing.lease_ttl
    a = _store(record_backend, lease_backend, NODE_A, ttl)
    b = _store(record_backend, lease_backend, NODE_B, ttl)
    assert isinstance(await a.claim(S1, AGENT), Claimed)
    await a.records.append(S1, [_entry("a1")])
    for _ in range(3):  # renewals at lease/3 keep it
        await advance(ttl / 3)
        assert await a.renew(S1) is not None
    assert isinstance(await b.claim(S1, AGENT), HeldElsewhere)

    # A's lease is taken over behind its back (A stalled past the TTL, then B claimed)
    lease = a.held(S1)
    assert lease is not None
    assert await lease_backend.release(lease)
    assert isinstance(await b.claim(S1, AGENT), Claimed)
    await b.records.append(S1, [_entry("b1")])
    assert a.held(S1) is not None  # A still believes, until it renews
    assert await a.renew(S1) is None
    assert a.held(S1) is None
    with pytest.raises(FencingRejected):
        await a.records.append(S1, [_entry("a2")])
    view = await record_backend.load(S1)
    assert view is not None and [e.text for e in view.transcript] == ["a1", "b1"]


async def test_r10_89_the_lease_holder_is_the_bare_node_id(
    record_backend: SessionRecordStore, lease_backend: SessionLeaseStore
) -> None:
    """R10-89: the lease store's holder is exactly the configured node id; a reservation's
    holder is a different, per-attempt string."""
    store = _store(record_backend, lease_backend, NodeId("web-7"))
    assert isinstance(await store.claim(S1, AGENT), Claimed)
    lease = await lease_backend.current(S1)
    assert lease is not None and lease.holder_id == NodeId("web-7")
    r1, r2 = ReserverId.new(NodeId("web-7")), ReserverId.new(NodeId("web-7"))
    assert r1 != r2
    assert lease.holder_id.value not in (r1.value, r2.value)


async def test_a_failing_backend_makes_the_claim_fail_503_and_gives_the_lease_back(
    record_backend: SessionRecordStore, lease_backend: SessionLeaseStore
) -> None:
    """§10.1 row 1: claim failure is SessionClaimFailed (the web adapter's 503); a lease won
    by the failed claim is released."""
    broken = CallLog().spy("records", record_backend)
    broken.provision = raising(OSError("record backend down"))  # type: ignore[attr-defined]
    store = _store(broken, lease_backend, NODE_A)
    with pytest.raises(SessionClaimFailed) as info:
        await store.claim(S1, AGENT)
    assert info.value.http_status == 503
    assert store.held(S1) is None
    assert await lease_backend.current(S1) is None
    leases_down = CallLog().spy("leases", lease_backend)
    leases_down.try_acquire = raising(OSError("lease backend down"))  # type: ignore[attr-defined]
    with pytest.raises(SessionClaimFailed):
        await _store(record_backend, leases_down, NODE_A).claim(S1, AGENT)
