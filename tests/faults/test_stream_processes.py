"""A STREAM session bound to an Actor whose owner is a real OS process that gets SIGKILLed
(shared PostgreSQL Location Store, 1 s leases): the session learns it — the client gets
Unbound(OWNER_LOST) once the owner's lifecycle ended, a relay ends session-not-bound
instead of going into the void — and the session, its connection and the server go on.

Real time: short leases, every wait event-driven (client frames), bounded by fail_after.
"""

from __future__ import annotations

import pathlib
import secrets
import signal
import sys
from typing import Any

import attrs
import pytest
import trio
from process_kit import pg_schema

from zlink_trio import ActorId, ActorRef, InvalidOperation, MeshName, ObjectGeneration
from zlink_trio.ids import NodeRid
from zlink_trio.testing import open_cluster
from zlink_trio.wire.stream import Bound, Unbound, UnboundReason

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "contract" / "stream"))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "contract" / "actors"))
from owner_loss_kit import short_leases
from stream_kit import Record, bind, connect, relay, stream_app
from test_owner_loss_processes import host_process

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]


async def test_a_sigkilled_actor_owner_ends_the_binding_for_the_client(pg_dsn: str) -> None:
    """The Actor's owner process is SIGKILLed while a client session is bound to the
    Actor and relaying to it: the client gets Unbound(OWNER_LOST) (typed, not a hang),
    a relay then ends session-not-bound, and the same connection keeps being served."""
    secret = secrets.token_bytes(32)
    rec = Record()
    base = short_leases(sweep=0.3)

    def config(index: int) -> Any:
        from zlink_trio.config import StreamConfig

        return attrs.evolve(
            base(index), cluster_secret=secret, hello_timeout=1.0, stream=StreamConfig()
        )

    with trio.fail_after(60):
        async with (
            pg_schema(pg_dsn, "zlink_stream_faults") as (schema, store),
            host_process(pg_dsn, schema, secret, actors=1) as victim,
        ):
            ((actor_id, generation, owner),) = victim.ready["actors"]
            rec.refs["v"] = ActorRef(
                ActorId(actor_id),
                ObjectGeneration(generation),
                MeshName("test"),
                NodeRid.from_hex(owner),
            )
            async with open_cluster(
                1, store=store, app=lambda i: stream_app(rec, i, host=False), config=config
            ) as cluster:
                await cluster.wait_all_admitted()
                session_node = cluster.servers[0]
                async with connect(session_node, "user") as client:
                    await bind(client, "v")
                    assert isinstance(await client.receive(), Bound)
                    assert await relay(client, actor_id, "echo", b"alive") == b"alive"
                    victim.process.send_signal(signal.SIGKILL)
                    assert await victim.process.wait() == -signal.SIGKILL
                    event = await client.receive()
                    assert isinstance(event, Unbound)
                    assert event.reason is UnboundReason.OWNER_LOST
                    with pytest.raises(InvalidOperation):
                        await relay(client, actor_id, "echo", b"void")
                    assert await client.request("local", b"still") == b"local:still"
                    assert client.closed is None
