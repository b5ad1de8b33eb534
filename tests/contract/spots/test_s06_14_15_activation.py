"""S06-14, S06-15: the cold-activation source creates no owner claim and submits ONE route-
kind-2 envelope holding the first message; only the target that wins creation authority
records itself as owner and runs the factory, and the first message is always the first one
its Spot handles (spec 06 §4.1 steps 8–16). Two and three nodes, both stores; the Store
order is observed with ``RecordingStore``, the wire with ``WireTap``.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from call_kit import Recorder, client_app, client_config, server_config, spot_app

from zlink_trio import MessageKind
from zlink_trio.store.api import AuthorityState, ObjectKey, RecoveryPointer
from zlink_trio.testing import (
    STORE_WRITE_METHODS,
    CountingStore,
    RecordingStore,
    TapDirection,
    WireTap,
    node_of,
    open_cluster,
)
from zlink_trio.wire.activation import ACTIVATION_RECOVERY_FORMAT, decode_activation_root
from zlink_trio.wire.commands import Command
from zlink_trio.wire.records import SpotDirectRoute
from zlink_trio.wire.tails import ColdActivation

SPOT_DIRECT = int(Command.SPOT_DIRECT_ROUTE)
MUTATIONS = STORE_WRITE_METHODS - {"renew_lease"}


@pytest.mark.parametrize("kind", [MessageKind.REQUEST, MessageKind.SEND])
async def test_s06_14_the_source_writes_nothing_and_sends_one_route_kind_2_envelope(
    clock: object, store: CountingStore, kind: MessageKind
) -> None:
    """S06-14: the source of a cold activation (send or request) makes no Location Store
    mutation (its only Store calls are the authority read and the node list) and sends ONE
    command 39 with route kind 2: target mesh, node RID and lifecycle, SpotId, stable type,
    descriptor version (the target's lease generation) and deadline, no authority
    generation; a non-zero operation id, the source identity, the metadata flag agreeing
    with the (absent) frame, and the first message itself."""
    rec = Recorder()
    source_store = CountingStore(store)
    tap = WireTap()
    configs = [client_config(location_store=source_store), server_config()]
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1"),
        config=lambda i: configs[i],
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        source, target = cluster.servers
        source_store.reset()
        if kind is MessageKind.REQUEST:
            assert (
                await source.spots.request("c1", "add", b"first").instance("cart").timeout(7)
                == b"1"
            )
        else:
            await source.spots.send("c1", "note", b"first").instance("cart").timeout(7)
            await rec.wait_handled(1)
        assert sum(source_store.count(m) for m in MUTATIONS) == 0
        assert source_store.count("read") == 1 and source_store.count("list_nodes") == 1
        me = node_of(source).identity
        sent = tap.select(node=me.node_rid, direction=TapDirection.SENT, command=SPOT_DIRECT)
        assert len(sent) == 1
        record = sent[0].record
        assert isinstance(record, SpotDirectRoute)
        route = record.route
        assert isinstance(route, ColdActivation)
        assert not hasattr(route, "object_generation")
        them = node_of(target).identity
        assert (route.target_rid, route.target_generation) == (them.node_rid, them.node_generation)
        assert route.target_mesh.value == "test" and route.spot_id.value == "c1"
        assert route.stable_type.value == "cart"
        [published] = [
            n for n in await store.list_nodes() if n.descriptor.node_rid == them.node_rid
        ]
        assert route.descriptor_version == published.lease_generation.value
        if kind is MessageKind.REQUEST:
            assert 0 < route.timeout_ms <= 7000  # the request's one deadline
        else:
            # a send's timeout bounds its admission only; its activation runs to the
            # create timeout (docs/decisions.md)
            assert 7000 < route.timeout_ms <= 30000
        assert record.operation_id.value != 0
        assert (record.source_rid, record.source_generation) == (me.node_rid, me.node_generation)
        assert record.metadata_present is False and record.metadata is None
        assert record.message_kind is kind and record.payload == b"first"
        assert (record.correlation == 0) is (kind is MessageKind.SEND)
        assert rec.runs("c1") == 1


async def test_s06_15_the_first_message_is_handled_first_even_when_follow_ups_race(
    clock: object, store: CountingStore
) -> None:
    """S06-15: while the factory of a cold activation runs, follow-ups with and without
    Instance intent race it from three nodes; the Spot's handler trace starts with the
    first message, the factory ran once, and every caller got its own reply."""
    rec = Recorder(factory_gate=trio.Event())
    async with open_cluster(
        3,
        store=store,
        app=lambda i: spot_app(
            rec, f"n{i}", slow_factory=True, instance_types=("cart",) if i == 1 else ()
        ),
        config=lambda i: server_config(),
    ) as cluster:
        await cluster.wait_all_admitted()
        replies: dict[str, object] = {}

        async def call(name: str, server_index: int, intent: bool) -> None:
            call = cluster.servers[server_index].spots.request("c1", "add", name.encode())
            if intent:
                call = call.instance("cart")
            replies[name] = await call.timeout(20)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "first", 0, True)
            await rec.factory_entered.wait()
            for i, server_index in enumerate((0, 1, 2, 0, 2)):
                nursery.start_soon(call, f"follow{i}", server_index, True)
            await trio.testing.wait_all_tasks_blocked()
            assert rec.factory_gate is not None
            rec.factory_gate.set()
        handled = rec.of("c1")
        assert handled[0] == ("add", b"first")
        assert sorted(p for _, p in handled[1:]) == sorted(f"follow{i}".encode() for i in range(5))
        assert replies["first"] == b"1"
        assert sorted(replies.values()) == sorted(str(i).encode() for i in range(1, 7))  # type: ignore[type-var]
        assert rec.runs("c1") == 1


async def test_s06_15_the_store_order_of_an_activation(clock: object, store: CountingStore) -> None:
    """S06-15: the target stores the complete envelope as an immutable recovery root
    (its ``instance-activation-recovery-v1`` record IS the received command 39, whose
    route-kind-2 deadline it carries) BEFORE it reserves; the reservation (Missing →
    Creating) records the recovery receipt (root, cursor 0) and the target as owner; the
    Ready commit keeps it; while the first handler runs the pointer stays; only after it
    completed: cursor 1, then the pointer removed by CAS, then the root deleted."""
    rec = Recorder(gate=trio.Event())
    recording = RecordingStore(store, reads=True)
    tap = WireTap()
    async with open_cluster(
        2,
        store=recording,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1"),
        config=lambda i: client_config() if i == 0 else server_config(),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, target = cluster.servers
        key = ObjectKey.spot("c1")
        async with trio.open_nursery() as nursery:
            result: list[object] = []
            replied_at: list[float] = []

            async def first() -> None:
                result.append(await caller.spots.request("c1", "block", b"first").instance("cart"))
                replied_at.append(trio.current_time())

            nursery.start_soon(first)
            await rec.entered.wait()
            row = await store.read(key)
            assert row is not None and row.state is AuthorityState.READY
            assert row.recovery is not None and row.recovery.replay_cursor == 0
            assert row.owner.node_rid == node_of(target).identity.node_rid
            data = await store.read_root(row.recovery.root)
            assert data is not None and data.startswith(ACTIVATION_RECOVERY_FORMAT.encode())
            envelope = decode_activation_root(data)
            [sent] = tap.select(
                node=node_of(caller).identity.node_rid,
                direction=TapDirection.SENT,
                command=SPOT_DIRECT,
            )
            assert envelope.route == sent.record.route  # the same deadline (timeout_ms)
            assert (envelope.operation_id, envelope.payload) == (sent.record.operation_id, b"first")
            assert rec.gate is not None
            rec.gate.set()
        assert result == [b"unblocked"]
        # The reply went out once the completion was durable (cursor 1); the pointer
        # removal and the root's deletion follow it.
        await recording.wait_for(lambda h: any(c.method == "delete_root" for c in h))
        assert (await store.read(key)).recovery is None  # type: ignore[union-attr]
        assert await store.read_root(row.recovery.root) is None
        calls = [c for c in recording.history if c.method != "renew_lease"]
        put = next(i for i, c in enumerate(calls) if c.method == "put_root")
        reserve = next(i for i, c in enumerate(calls) if c.method == "reserve" and c.applied)
        commit = next(i for i, c in enumerate(calls) if c.method == "commit_ready" and c.key == key)
        recoveries = [i for i, c in enumerate(calls) if c.method == "set_recovery" and c.applied]
        delete = next(i for i, c in enumerate(calls) if c.method == "delete_root")
        assert put < reserve < commit < recoveries[0] < recoveries[1] < delete
        reserved = calls[reserve].row
        assert reserved is not None and reserved.state is AuthorityState.CREATING
        assert reserved.recovery == RecoveryPointer(row.recovery.root, 0)
        assert reserved.owner.node_rid == node_of(target).identity.node_rid
        assert calls[commit].row is not None and calls[commit].row.recovery == reserved.recovery
        assert calls[recoveries[0]].row.recovery == RecoveryPointer(row.recovery.root, 1)  # type: ignore[union-attr]
        assert calls[recoveries[1]].row.recovery is None  # type: ignore[union-attr]
        assert calls[recoveries[0]].at <= replied_at[0]  # the reply came after cursor 1
        assert rec.runs("c1") == 1


async def test_s06_15_an_instance_spot_handler_may_not_defer_a_join(
    clock: object, store: CountingStore
) -> None:
    """S06-15 / spec 04 §3.1: the Context of an Instance Spot's handler says Join is not
    allowed there (the Join barrier refuses it with InvalidOperation); a User Spot's says
    it is. The first message of the activation is the handler that asks."""
    rec = Recorder()
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1"),
        config=lambda i: client_config() if i == 0 else server_config(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        assert await caller.spots.request("c1", "joinable").instance("cart") == b"0"
        await caller.spots.get_or_create("r1", "room")
        assert await caller.spots.request("r1", "joinable") == b"1"
        assert rec.of("c1") == [("joinable", b"")]
