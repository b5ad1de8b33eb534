"""S06-15 (spec 06 §4.1.1): the target of a cold activation crashes — between Reserve and
the Ready commit, between the Ready commit and the first handler, or after the first
handler completed but before the recovery pointer was removed. Once its lease expired, a
restarted lifecycle resumes or aborts the activation by the exact fence: the first message
is handled exactly once and first (or, past its deadline, dropped and counted), and the
recovery root goes.

In one process (``Cluster.kill`` is a crash: nothing is drained or released), both
stores; the same windows with real processes and SIGKILL are in
``tests/faults/test_spot_activation_processes.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
from call_kit import Recorder, client_app, client_config, server_config, spot_app

from zlink_trio.store.api import Applied, AuthorityState, ObjectKey, RecoveryPointer
from zlink_trio.testing import (
    CountingStore,
    FlowEvent,
    RecordingStore,
    StoreWrapper,
    flow_count,
    node_of,
    open_cluster,
)

T = TypeVar("T")
KEY = ObjectKey.spot("c1")
LEASES = {
    "owner_lease_ttl": 1.0,
    "owner_lease_renew_interval": 0.3,
    "descriptor_poll_interval": 0.2,
    "reclaim_sweep_interval": 0.5,
}


class HoldAfter(StoreWrapper):
    """Holds the node in the chosen Store call of ``KEY`` for ever once the Store applied
    it and ``match(result)`` (the node then crashes with the row as that call left it)."""

    def __init__(
        self, inner: Any, method: str, match: Callable[[tuple[object, ...]], bool]
    ) -> None:
        super().__init__(inner)
        self._method = method
        self._match = match
        self.held = trio.Event()

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        result = await call()
        if method == self._method and args and args[0] == KEY and self._match(result):
            self.held.set()
            await trio.sleep_forever()
        return result


def _cluster(rec: Recorder, target_store: object, recording: RecordingStore, **caller: Any) -> Any:
    configs = [
        client_config(**LEASES, **caller),
        server_config(location_store=target_store, **LEASES),
    ]
    return open_cluster(
        2,
        store=recording,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1", slow_factory=True),
        config=lambda i: configs[i],
    )


async def _restart(cluster: Any, recording: RecordingStore) -> Any:
    """Crash node 1, start its replacement lifecycle on the plain shared store."""
    await cluster.kill(1)
    cluster.configs[1] = server_config(location_store=recording, **LEASES)
    return await cluster.start(1)


async def test_s06_15_a_crash_between_reserve_and_ready_resumes_the_activation(
    clock: object, store: CountingStore
) -> None:
    """S06-15: the target dies while its factory runs (the row Creating, its recovery
    receipt naming the root); the restarted lifecycle aborts that reservation with its
    exact fence and activates the envelope again: the first message is handled once,
    first, then a follow-up."""
    rec = Recorder(factory_gate=trio.Event())
    recording = RecordingStore(store)
    async with _cluster(rec, recording, recording) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        await caller.spots.send("c1", "note", b"first").instance("cart").timeout(60)
        await rec.factory_entered.wait()
        row = await store.read(KEY)
        assert row is not None and row.state is AuthorityState.CREATING
        assert row.recovery is not None and row.recovery.replay_cursor == 0
        await cluster.kill(1)
        assert rec.factory_gate is not None
        rec.factory_gate.set()  # the replacement's factory runs freely
        replacement = await _restart(cluster, recording)
        await rec.wait_handled(1)
        assert rec.of("c1") == [("note", b"first")]
        assert flow_count(replacement, FlowEvent.ACTIVATION_RECOVERED) == 1
        stats = replacement.statistics().spots
        assert stats is not None and stats.calls is not None and stats.calls.recovered == 1
        assert await caller.spots.request("c1", "add", b"next").timeout(10) == b"2"
        assert rec.of("c1") == [("note", b"first"), ("add", b"next")]
        now = await store.read(KEY)
        assert now is not None and now.owner.node_rid == node_of(replacement).identity.node_rid
        assert now.object_generation != row.object_generation  # a new reservation
        await recording.wait_for(lambda h: any(c.method == "delete_root" for c in h))
        assert await store.read_root(row.recovery.root) is None


async def test_s06_15_a_crash_between_ready_and_the_first_handler_restores_it_first(
    clock: object, store: CountingStore
) -> None:
    """S06-15: the target dies right after its Ready commit applied (the first record
    not yet restored at the head of the queue); the restarted lifecycle takes the Ready
    incarnation over (same ObjectGeneration), restores the first record from the root
    before the Spot serves, and it runs exactly once, before any later message."""
    rec = Recorder()
    recording = RecordingStore(store)
    hold = HoldAfter(recording, "commit_ready", lambda result: isinstance(result, Applied))
    async with _cluster(rec, hold, recording) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        await caller.spots.send("c1", "note", b"first").instance("cart").timeout(60)
        await hold.held.wait()
        row = await store.read(KEY)
        assert row is not None and row.state is AuthorityState.READY
        assert row.recovery == RecoveryPointer(row.recovery.root, 0)  # type: ignore[union-attr]
        replacement = await _restart(cluster, recording)
        await recording.wait_for(
            lambda h: any(c.method == "change_owner" and c.key == KEY and c.applied for c in h)
        )
        reply = await caller.spots.request("c1", "add", b"next").timeout(30)
        assert reply == b"2"  # the first message ran before it, on the same incarnation
        assert rec.of("c1") == [("note", b"first"), ("add", b"next")]
        assert {generation for _, generation, _, _, _ in rec.handled} == {
            row.object_generation.value
        }
        assert flow_count(replacement, FlowEvent.ACTIVATION_RECOVERED) == 1
        await recording.wait_for(lambda h: any(c.method == "delete_root" for c in h))
        assert (await store.read(KEY)).recovery is None  # type: ignore[union-attr]


async def test_s06_15_a_crash_after_the_first_handler_completed_does_not_run_it_again(
    clock: object, store: CountingStore
) -> None:
    """S06-15: the target dies after the first handler's completion was recorded (cursor
    1) but before the pointer was removed: the record is complete, so nothing runs again;
    the dead incarnation is reclaimed and its root deleted."""
    rec = Recorder()
    recording = RecordingStore(store)
    hold = HoldAfter(
        recording,
        "set_recovery",
        lambda result: isinstance(result, Applied) and result.row.recovery is not None,
    )
    async with _cluster(rec, hold, recording) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        await caller.spots.send("c1", "note", b"first").instance("cart").timeout(60)
        await hold.held.wait()
        row = await store.read(KEY)
        assert row is not None and row.recovery is not None and row.recovery.replay_cursor == 1
        await _restart(cluster, recording)
        await recording.wait_for(
            lambda h: any(c.method == "reclaim" and c.key == KEY and c.applied for c in h)
        )
        await recording.wait_for(lambda h: any(c.method == "delete_root" for c in h))
        assert await store.read(KEY) is None
        assert await store.read_root(row.recovery.root) is None
        assert rec.of("c1") == [("note", b"first")]


async def test_s06_15_a_resume_after_the_activation_deadline_aborts_with_the_exact_fence(
    clock: object, store: CountingStore
) -> None:
    """S06-15: the dead target's activation deadline passed before its lease did: the
    restarted lifecycle aborts the reservation with the exact fence and deletes the root;
    the message is dropped (counted as activation_aborted), nothing runs."""
    rec = Recorder(factory_gate=trio.Event())
    recording = RecordingStore(store)
    # A send's activation runs to the caller's create timeout (its own timeout bounds
    # only its admission): 0.5 s here, so the deadline passes before the dead lease.
    async with _cluster(rec, recording, recording, default_create_timeout=0.5) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        await caller.spots.send("c1", "note", b"first").instance("cart").timeout(0.5)
        await rec.factory_entered.wait()
        row = await store.read(KEY)
        assert row is not None and row.recovery is not None
        await cluster.kill(1)
        assert rec.factory_gate is not None
        rec.factory_gate.set()
        replacement = await _restart(cluster, recording)
        await recording.wait_for(
            lambda h: any(c.method == "abort_creation" and c.key == KEY and c.applied for c in h)
        )
        await recording.wait_for(lambda h: any(c.method == "delete_root" for c in h))
        assert await store.read(KEY) is None
        assert await store.read_root(row.recovery.root) is None
        assert flow_count(replacement, FlowEvent.ACTIVATION_ABORTED) == 1
        assert rec.of("c1") == []
