"""A04-15 (its Join and leave part) and a User Spot's OnDisconnectActor, over real
websocket clients: Spot membership and the session binding change independently (spec
04 §3; 02 §9). The cross-node move of a bound Actor belongs to the relocation issue (the
binding does not follow a cross-node Join yet)."""

from __future__ import annotations

import trio
import trio.testing
from stream_kit import Record, bind, connect, create, relay, stream_app, stream_cluster
from test_b02_rebind import _receive

from zlink_trio import App, JoinOutcome
from zlink_trio.stream import Packet
from zlink_trio.testing import CountingStore, TapDirection, WireTap, spot_members
from zlink_trio.wire.stream import Push


async def _join(server: object, rec: Record, actor: str, spot: str) -> None:
    count = len([a for a, _ in rec.joins if a == actor])
    await server.actors.request(actor, "join_spot", spot.encode()).timeout(30)  # type: ignore[attr-defined]
    await rec.wait_until(lambda: len([a for a, _ in rec.joins if a == actor]) == count + 1)
    assert rec.joins[-1][1].outcome is JoinOutcome.ACCEPTED


async def _pushed(server: object, client: object, actor: str, data: bytes) -> None:
    """A push of ``actor`` reaches ``client`` (the binding is still bound)."""
    assert await server.actors.request(actor, "push_req", data) == b"pushed"  # type: ignore[attr-defined]
    push = await _receive(client, Push)
    assert isinstance(push, Push) and push.payload == data


async def test_a04_15_join_and_leave_keep_the_binding_and_disconnect_keeps_membership(
    clock: object, store: CountingStore
) -> None:
    """A04-15 (Join and leave): a bound Actor joins a User Spot and leaves it again: its
    binding stays bound throughout (pushes reach the client, relays reach the Actor, the
    session still finds it); then it joins again and the client disconnects: the User
    Spot's DISCONNECT_ACTOR callback runs once (not the Entry Spot's), and the Actor is
    still the Spot's member with the same SpotId."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1, rooms=True) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        entry = await actor_node.actors.request("a", "whoami")
        created = await session_node.spots.create("room").timeout(30)
        assert created.ref is not None
        room = created.ref.spot_id.value
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            await _join(actor_node, rec, "a", room)
            assert await actor_node.actors.request("a", "whoami") == room.encode()
            await _pushed(actor_node, client, "a", b"in the room")
            assert await relay(client, "a", "echo", b"relayed") == b"relayed"
            assert await client.request("find", b"a") == b"1"
            await _join(actor_node, rec, "a", "")  # leave: back to the Entry Spot
            assert await actor_node.actors.request("a", "whoami") == entry
            await _pushed(actor_node, client, "a", b"left")
            assert await relay(client, "a", "echo", b"again") == b"again"
            await _join(actor_node, rec, "a", room)
            connection = client.connection_id
        await rec.wait_until(lambda: len(rec.spot_disconnects) == 1)
        assert rec.spot_disconnects == [(1, room, "a", connection)]
        assert rec.disconnects == []  # the Entry Spot's callback: not its Spot any more
        assert await actor_node.actors.request("a", "whoami") == room.encode()
        assert "a" in {m.value for m in spot_members(actor_node, room)}
        await trio.sleep(10)
        assert len(rec.spot_disconnects) == 1


def _notify_bind_app(rec: Record, node: int, tap: WireTap) -> App:
    """The STREAM test app plus a packet ``notify_bind <actor>``: NotifyDisconnected of
    the session's binding of ``<actor>`` (left running), then a bind of the same Actor
    from the same session while that notification is in progress."""
    app = stream_app(rec, node, host=node == 1)

    @app.on_packet("notify_bind")
    async def notify_bind(packet: Packet, payload: bytes) -> bytes:
        actors = packet.session.actors
        bound = actors.find(payload.decode())
        assert bound is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bound.notify_disconnected)
            # the DISCONNECT (the second 38) reached the Actor's owner: it waits there
            # behind the Actor's slow request
            await tap.wait_for(count=2, direction=TapDirection.RECEIVED, command=38)
            again = await actors.bind(rec.refs[payload.decode()])
            assert rec.gate is not None
            rec.gate.set()  # the notification's turn runs behind the slow request
        return str(again.binding_generation).encode()

    return app


async def test_b02_16_a_bind_during_its_own_disconnect_notification_gets_a_new_binding(
    clock: object, store: CountingStore
) -> None:
    """B02-16 / B02-19 (race): the session binds an Actor again while the NotifyDisconnected
    of its current binding still runs (the notification waits behind the Actor's slow
    request): the bind gets a NEW binding that survives the notification's tombstone —
    relays and pushes work afterwards, OnDisconnectActor ran once, the session was not
    told it was replaced (no 51 to itself)."""
    rec = Record()
    rec.gate = trio.Event()
    tap = WireTap()
    async with stream_cluster(
        2,
        rec,
        store=store,
        hosts=lambda i: i == 1,
        app=lambda i: _notify_bind_app(rec, i, tap),
        tap=tap,
    ) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client, trio.open_nursery() as nursery:
            first = await bind(client, "a")

            async def slow() -> None:
                await actor_node.actors.request("a", "slow", b"hold").timeout(30)

            nursery.start_soon(slow)
            await rec.wait_until(lambda: bool(rec.handled_by("a", "slow")))
            again = await client.request("notify_bind", b"a")
            assert again is not None and int(again) != first
            await rec.wait_until(lambda: len(rec.disconnects) == 1)
            assert await relay(client, "a", "echo", b"after") == b"after"
            await _pushed(actor_node, client, "a", b"still bound")
            assert await client.request("bound") == b"a"
            assert rec.replaced == []
            assert tap.count(command=51) == 0
        with trio.fail_after(30):  # the new binding's own notification, at the disconnect
            await rec.wait_until(lambda: len(rec.disconnects) == 2)
