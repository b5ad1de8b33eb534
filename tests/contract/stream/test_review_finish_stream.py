"""Adversarial review of ``zlink-trio node --stream-listen`` (issue 13): a STREAM
endpoint that cannot be opened (its port taken, its host unresolvable) ends the real node
process with one clear line on stderr and a non-zero status, never a traceback; a
malformed value is a configuration error (status 2)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from stream_kit import Record, bind, connect, create, relay, stream_app, stream_cluster
from test_b02_rebind import _receive

import zlink_trio
from zlink_trio import App, PerActor, RecreateOnRelocation, SpotContext, on_request
from zlink_trio.stream import Packet
from zlink_trio.testing import CountingStore, TapDirection, WireTap
from zlink_trio.wire.stream import Push

ROOT = Path(zlink_trio.__file__).resolve().parents[1]


async def _node(*flags: str) -> tuple[int, list[str]]:
    env_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": env_path}
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-m", "zlink_trio.cli", "node", *flags],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    return result.returncode, result.stderr.decode().splitlines()


@pytest.mark.process
@pytest.mark.parametrize("how", ["port-in-use", "unresolvable-host"])
async def test_a_stream_endpoint_that_cannot_open_is_one_line_and_a_failure_status(
    how: str,
) -> None:
    """``--stream-listen`` naming a port another socket holds, or a host that does not
    resolve: exit status 1, exactly one stderr line naming the cause, no traceback."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        value = f"127.0.0.1:{port}" if how == "port-in-use" else "no-such-host.invalid:5"
        status, lines = await _node("--stream-listen", value)
    assert status == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("zlink-trio node: cannot run: ")
    assert "Traceback" not in lines[0]


@pytest.mark.process
@pytest.mark.parametrize("value", ["nonsense", "127.0.0.1:", "127.0.0.1:99999", "h:-1"])
async def test_a_malformed_stream_listen_is_a_configuration_error(value: str) -> None:
    """A malformed ``--stream-listen``: status 2, one stderr line, no traceback."""
    status, lines = await _node("--stream-listen", value)
    assert status == 2
    assert len(lines) == 1 and lines[0].startswith("zlink-trio node: "), lines


def _notify_bind_twice_app(rec: Any, node: int, tap: WireTap) -> App:
    """The STREAM test app plus ``notify_bind_twice <actor>``: NotifyDisconnected of the
    session's binding, a bind while it runs, NotifyDisconnected of that new binding, and
    a third bind, all while the first notification waits behind the Actor's slow
    request; replies the three binding generations."""
    app = stream_app(rec, node, host=node == 1)

    @app.on_packet("notify_bind_twice")
    async def notify_bind_twice(packet: Packet, payload: bytes) -> bytes:
        actors = packet.session.actors
        name = payload.decode()
        generations: list[int] = []
        async with trio.open_nursery() as nursery:
            first = actors.find(name)
            assert first is not None
            generations.append(first.binding_generation)
            nursery.start_soon(first.notify_disconnected)
            await tap.wait_for(count=2, direction=TapDirection.RECEIVED, command=38)
            second = await actors.bind(rec.refs[name])
            generations.append(second.binding_generation)
            nursery.start_soon(second.notify_disconnected)
            await tap.wait_for(count=4, direction=TapDirection.RECEIVED, command=38)
            third = await actors.bind(rec.refs[name])
            generations.append(third.binding_generation)
            again = await actors.bind(rec.refs[name])  # idempotent: the same one
            generations.append(again.binding_generation)
            assert rec.gate is not None
            rec.gate.set()
        return ",".join(map(str, generations)).encode()

    return app


async def test_b02_16_rebinding_repeatedly_during_disconnect_notifications(
    clock: object, store: CountingStore
) -> None:
    """B02-16 / B02-19 (race, repeated): while the first binding's NotifyDisconnected
    waits at the owner, the session binds again, notifies that new binding's disconnect
    too, and binds a third time (and once more, idempotently): the last binding survives
    both notifications' tombstones — relays and pushes work, the session still holds it —
    each notification ran once, and no 51 was sent to the session about itself."""
    rec = Record()
    rec.gate = trio.Event()
    tap = WireTap()
    async with stream_cluster(
        2,
        rec,
        store=store,
        hosts=lambda i: i == 1,
        app=lambda i: _notify_bind_twice_app(rec, i, tap),
        tap=tap,
    ) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client, trio.open_nursery() as nursery:
            await bind(client, "a")

            async def slow() -> None:
                await actor_node.actors.request("a", "slow", b"hold").timeout(30)

            nursery.start_soon(slow)
            await rec.wait_until(lambda: bool(rec.handled_by("a", "slow")))
            reply = await client.request("notify_bind_twice", b"a")
            assert reply is not None
            g1, g2, g3, g4 = (int(g) for g in reply.split(b","))
            assert len({g1, g2, g3}) == 3 and g4 == g3
            await rec.wait_until(lambda: len(rec.disconnects) == 2)
            assert await relay(client, "a", "echo", b"after") == b"after"
            assert await actor_node.actors.request("a", "push_req", b"still") == b"pushed"
            push = await _receive(client, Push)
            assert isinstance(push, Push) and push.payload == b"still"
            assert await client.request("bound") == b"a"
            assert rec.replaced == []
            assert tap.count(command=51) == 0
            await trio.testing.wait_all_tasks_blocked()
            assert len(rec.disconnects) == 2


def _keep_app(rec: Any, node: int, entered: trio.Event, gate: trio.Event) -> App:
    """The STREAM test app (rooms) plus, on the Actor host, a User Spot "keep" whose
    request ``hold-leave <actor>`` Defers its member's leave and waits for ``gate``."""
    app = stream_app(rec, node, host=node == 1, rooms=True)
    if node != 1:
        return app

    class Keep:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_request("hold-leave")
        async def hold_leave(self, payload: bytes) -> bytes:
            self.context.join_entry_spot(payload.decode()).timeout(60).defer()
            entered.set()
            await gate.wait()
            return b""

    app.register_spot("keep", Keep, execution=PerActor(), relocation=RecreateOnRelocation())
    return app


async def test_a04_15_a_bind_while_a_spot_handler_defers_the_members_join(
    clock: object, store: CountingStore
) -> None:
    """A04-15 (binding independent of membership): while a User Spot's handler that
    Deferred its member's leave still runs (the member parked behind its barrier), a
    client binds that member: the bind succeeds (membership and binding are independent;
    the Join has not started); a relay through it waits behind the barrier and is
    answered after the Join; the binding is still bound afterwards."""
    rec = Record()
    entered, gate = trio.Event(), trio.Event()
    async with stream_cluster(
        2, rec, store=store, hosts=lambda i: i == 1, app=lambda i: _keep_app(rec, i, entered, gate)
    ) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        created = await actor_node.spots.create("keep").timeout(30)
        assert created.ref is not None
        keep = created.ref.spot_id.value
        await actor_node.actors.request("a", "join_spot", keep.encode()).timeout(30)
        await rec.wait_until(lambda: len(rec.joins) == 1)
        async with connect(session_node, "user") as client:
            relayed: list[bytes | None] = []
            async with trio.open_nursery() as nursery:

                async def held() -> None:
                    await actor_node.spots.request(keep, "hold-leave", b"a").timeout(60)

                async def relay_parked() -> None:
                    relayed.append(await relay(client, "a", "echo", b"parked"))

                nursery.start_soon(held)
                await entered.wait()
                with trio.fail_after(30):
                    generation = await bind(client, "a")
                assert generation > 0
                nursery.start_soon(relay_parked)
                await trio.testing.wait_all_tasks_blocked()
                assert relayed == []  # behind the barrier
                gate.set()
            with trio.fail_after(30):
                await rec.wait_until(lambda: len(rec.joins) == 2)
            assert relayed == [b"parked"]
            assert await relay(client, "a", "echo", b"after") == b"after"
