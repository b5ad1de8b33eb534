"""Spec 02 §14 "Rebind and replacement" over real websocket clients: B02-11 … B02-15."""

from __future__ import annotations

import attrs
import pytest
import trio
from stream_kit import Record, bind, connect, create, relay, stream_cluster, stream_config

from zlink_trio import MemoryLocationStore, ServerConfig, Unavailable
from zlink_trio.testing import (
    CountingStore,
    FaultPlan,
    FlowEvent,
    TapDirection,
    WireTap,
    flow_count,
    node_of,
)
from zlink_trio.wire import BindTail
from zlink_trio.wire.stream import Bound, CloseReason, Message, Push, Unbound, UnboundReason


async def _receive(client: object, kind: type) -> object:
    while True:
        event = await client.receive()  # type: ignore[attr-defined]
        if isinstance(event, kind):
            return event


async def test_b02_11_rebind_completes_without_waiting_for_the_old_session(
    clock: object, store: CountingStore
) -> None:
    """B02-11: with the old session's duplicate-connection callback held open, a bind
    from a new session on another node completes; later pushes reach only the new
    client; exactly one command 51 goes to the old session owner, after the 38's
    terminal."""
    rec = Record()
    rec.replace_gate = trio.Event()  # the replacement callback never finishes here
    tap = WireTap()
    async with stream_cluster(3, rec, store=store, hosts=lambda i: i == 1, tap=tap) as cluster:
        old_node, actor_node, new_node = cluster.servers
        old_rid = node_of(old_node).identity.node_rid
        a_rid = node_of(actor_node).identity.node_rid
        await create(old_node, rec, "a")
        async with connect(old_node, "one") as one, connect(new_node, "two") as two:
            await bind(one, "a")
            tap.clear()
            with trio.fail_after(5):
                await bind(two, "a")
            await rec.wait_until(lambda: len(rec.replaced) == 1)
            assert rec.replaced_done == []  # the callback is still running
            assert await old_node.actors.request("a", "push_req", b"after") == b"pushed"
            push = await _receive(two, Push)
            assert isinstance(push, Push) and push.payload == b"after"
            sent = tap.select(node=a_rid, direction=TapDirection.SENT)
            order = [
                e.command
                for e in sent
                if e.command == 51 or (e.command == 20 and isinstance(e.record.tail, BindTail))
            ]
            assert order == [20, 51]
            replaced = [e for e in sent if e.command == 51]
            assert replaced[0].peer is not None and replaced[0].peer.node_rid == old_rid
            assert one.received["Push"] == 0
            rec.replace_gate.set()
            await one.wait_closed()
            assert tap.count(node=a_rid, direction=TapDirection.SENT, command=51) == 1


async def test_b02_11_a_full_queue_to_the_old_owner_ends_the_51_without_retry(
    autojump_clock: object,
) -> None:
    """B02-11 (full queue): the Actor owner's writer lane to the old session owner is
    full (that peer stopped reading): the new bind still completes at once; the 51 waits
    ``peer_send_timeout`` and ends DeadlineExceeded (recorded), is never retried (it is
    never on the wire, also after the peer reads again), and the new binding is not
    rolled back: pushes reach the new session only."""
    rec = Record()
    plan = FaultPlan(seed=11)
    tap = WireTap()

    def config(i: int) -> ServerConfig:
        base = stream_config(i, host=i == 1)
        return attrs.evolve(base, peer_send_queue=2, peer_send_timeout=1.0, hello_timeout=30.0)

    store = CountingStore(MemoryLocationStore())
    async with stream_cluster(
        3, rec, store=store, hosts=lambda i: i == 1, fault_plan=plan, tap=tap, config=config
    ) as cluster:
        old_node, actor_node, new_node = cluster.servers
        old_rid = node_of(old_node).identity.node_rid
        a_rid = node_of(actor_node).identity.node_rid
        await create(old_node, rec, "a")
        async with connect(old_node, "one") as one, connect(new_node, "two") as two:
            await bind(one, "a")
            stall = plan.stall(sender=a_rid, to=old_rid)
            # pushes to the old session fill the writer lane to its owner
            results = []
            while not results or results[-1] != b"DeadlineExceeded":
                results.append(await actor_node.actors.request("a", "try_push", b"p").timeout(30))
            assert results[0] == b"ok" and stall.fired == 1
            started = trio.current_time()
            with trio.fail_after(0.5):
                await bind(two, "a")
            bound_at = trio.current_time()
            await trio.sleep(5.0)  # well past the 51's send timeout
            assert flow_count(actor_node, FlowEvent.SESSION_REPLACED_NOT_SENT) == 1
            assert bound_at - started < 1.0
            assert await actor_node.actors.request("a", "push_req", b"new") == b"pushed"
            push = await _receive(two, Push)
            assert isinstance(push, Push) and push.payload == b"new"
            stall.release()  # the old owner reads again: what was queued is written
            await trio.sleep(5.0)
            assert tap.count(node=a_rid, direction=TapDirection.SENT, command=51) == 0
            assert rec.replaced == []  # the old session never heard of the replacement
            assert one.received["Push"] == len([r for r in results if r == b"ok"])
            assert await actor_node.actors.request("a", "push_req", b"again") == b"pushed"
            push = await _receive(two, Push)
            assert isinstance(push, Push) and push.payload == b"again"
            assert tap.count(node=a_rid, direction=TapDirection.SENT, command=51) == 0


@pytest.mark.parametrize("lose_51", [False, True], ids=["with-51", "51-dropped"])
async def test_b02_12_the_old_session_relay_is_refused(
    clock: object, store: CountingStore, lose_51: bool
) -> None:
    """B02-12: after a replacement a relay through the old session is refused
    (Unavailable) and its Actor handler never runs, also when the 51 was lost on the wire
    (the Actor owner refuses the retired binding's ingress itself); the current binding
    does not change: pushes still go to the new session."""
    rec = Record()
    plan = FaultPlan(seed=12)
    async with stream_cluster(
        3, rec, store=store, hosts=lambda i: i == 1, fault_plan=plan, on_replaced=False
    ) as cluster:
        old_node, actor_node, new_node = cluster.servers
        await create(old_node, rec, "a")
        lost = plan.cut(command=51) if lose_51 else None  # the 51 is never written
        async with connect(old_node, "one") as one, connect(new_node, "two") as two:
            await bind(one, "a")
            await bind(two, "a")
            if lost is not None:
                await lost.wait_fired()
                await cluster.wait_all_admitted()  # the link is back; the 51 is not
            if not lose_51:
                await one.wait_closed()
                with pytest.raises(Exception):  # noqa: B017 - the connection is gone
                    await relay(one, "a", "echo", b"old")
            else:
                with pytest.raises(Unavailable):
                    await relay(one, "a", "echo", b"old")
            assert rec.handled_by("a", "echo") == []
            assert await relay(two, "a", "echo", b"new") == b"new"
            assert await actor_node.actors.request("a", "push_req", b"p") == b"pushed"
            assert isinstance(await _receive(two, Push), Push)


async def test_b02_13_old_connection_closes_100_ms_after_the_callback(
    autojump_clock: object,
) -> None:
    """B02-13: the old session goes closing before its duplicate-connection callback;
    the callback's own notice reaches the old client; the old connection closes exactly
    100 ms after the callback's terminal (MockClock), even though its outbound queue is
    empty; other work of that session still runs during the 100 ms (a push of its second
    Actor arrives); closing it cleans its second binding once (one OnDisconnectActor)
    and leaves the replaced Actor's new binding working."""
    rec = Record()
    rec.replace_gate = trio.Event()
    store = CountingStore(MemoryLocationStore())
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        old_node, actor_node = cluster.servers
        await create(old_node, rec, "a")
        await create(old_node, rec, "y")
        async with connect(old_node, "one") as one, connect(actor_node, "two") as two:
            await bind(one, "a")
            await bind(one, "y")
            await bind(two, "a")
            await rec.wait_until(lambda: len(rec.replaced) == 1)
            with pytest.raises(Unavailable):  # closing: no new inbound dispatch
                await one.request("local", b"x")
            await trio.sleep(1.0)  # the callback holds; nothing closes meanwhile
            assert one.closed is None
            rec.replace_gate.set()
            await rec.wait_until(lambda: len(rec.replaced_done) == 1)
            terminal = rec.replaced_done[0]
            # a push of the session's other Actor during the 100 ms still arrives
            assert await actor_node.actors.request("y", "push_req", b"during") == b"pushed"
            closed = await one.wait_closed()
            assert trio.current_time() - terminal == pytest.approx(0.1)
            assert closed.closing is not None and closed.closing.reason is CloseReason.REPLACED
            events: list[object] = []
            while True:
                try:
                    events.append(await one.receive())
                except Exception:
                    break
            kinds = [type(e) for e in events]
            assert Message in kinds and Push in kinds
            assert kinds.index(Message) < kinds.index(Push)
            assert any(
                isinstance(e, Unbound) and e.reason is UnboundReason.REPLACED for e in events
            )
            await rec.wait_until(lambda: len(rec.disconnects) == 1)
            assert [d[1] for d in rec.disconnects] == ["y"]
            assert await relay(two, "a", "echo", b"new") == b"new"
            await trio.sleep(10)
            assert [d[1] for d in rec.disconnects] == ["y"]


async def test_b02_13_a_callback_that_never_ends_is_forced_at_30_s(autojump_clock: object) -> None:
    """B02-13: a duplicate-connection callback that never reaches its terminal is cut at
    SessionReplacementCallbackTimeout (30,000 ms by default): the old connection is closed
    at that very moment (MockClock)."""
    rec = Record()
    rec.replace_gate = trio.Event()  # never set
    store = CountingStore(MemoryLocationStore())
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        old_node, actor_node = cluster.servers
        await create(old_node, rec, "a")
        async with connect(old_node, "one") as one, connect(actor_node, "two") as two:
            await bind(one, "a")
            await bind(two, "a")
            await rec.wait_until(lambda: len(rec.replaced) == 1)
            started = rec.replaced_started[0]
            await one.wait_closed()
            assert trio.current_time() - started == pytest.approx(30.0)
            assert rec.replaced_done == []


async def test_b02_14_rebinding_the_current_binding_is_idempotent(
    clock: object, store: CountingStore
) -> None:
    """B02-14: the same session binding its current binding again succeeds with the same
    binding generation; no replacement callback runs, no command 51 is on the wire and the
    connection stays open."""
    rec = Record()
    tap = WireTap()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1, tap=tap) as cluster:
        session_node = cluster.servers[0]
        await create(session_node, rec, "a")
        async with connect(session_node, "one") as one:
            first = await bind(one, "a")
            again = await bind(one, "a")
            assert again == first
            assert await one.request("bind_or_get", b"a") == str(first).encode()
            assert rec.replaced == []
            assert tap.count(command=51) == 0
            assert one.closed is None
            assert await relay(one, "a", "echo", b"still") == b"still"
            assert len(one.bound) == 1


async def test_b02_15_a_late_push_of_the_old_pair_is_not_applied(
    clock: object, store: CountingStore
) -> None:
    """B02-15: a push the Actor sent through the old binding, delayed on the wire until
    after a replacement (its (connection id, sequence) pair is the retired one), is not
    applied to the current connection: the new client gets nothing of it, its binding is
    unchanged, no callback runs for it, and the rejection is recorded."""
    rec = Record()
    plan = FaultPlan(seed=15)
    async with stream_cluster(
        2, rec, store=store, hosts=lambda i: i == 1, fault_plan=plan, on_replaced=False
    ) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        async with connect(session_node, "one") as one, connect(session_node, "two") as two:
            await bind(one, "a")
            bound_one = await _receive(one, Bound)
            plan.delay(2.0, command=36, sender=node_of(actor_node).identity.node_rid, count=1)
            rejected = flow_count(session_node, FlowEvent.SESSION_PUSH_REJECTED)
            await actor_node.actors.request("a", "push_req", b"late")
            await bind(two, "a")
            bound_two = await _receive(two, Bound)
            assert isinstance(bound_one, Bound) and isinstance(bound_two, Bound)
            assert bound_two.sequence != bound_one.sequence
            await one.wait_closed()
            await trio.sleep(3.0)  # the delayed push has arrived by now
            assert flow_count(session_node, FlowEvent.SESSION_PUSH_REJECTED) == rejected + 1
            assert two.received["Push"] == 0
            assert await two.request("bound") == b"a"
            assert rec.replaced == []
            assert await relay(two, "a", "echo", b"ok") == b"ok"
