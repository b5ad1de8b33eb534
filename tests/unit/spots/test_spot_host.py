"""The Spot host white-box (spots/host.py, spots/hosted.py, spots/close.py): what the
direct-call, timer and Join engineers build on -- message dispatch with typed payloads
and counters, lifecycle work before application work, the SpotWide gate shared with the
Spot's lane, parking while staging, and an Instance Spot closing itself from a handler
(created the way a cold activation's target does: its own reserve, then
``CreateTarget.run_reserved``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from zlink_trio import (
    App,
    DisableRelocation,
    MessageKind,
    NotFound,
    PerActor,
    RecreateOnRelocation,
    SpotCallback,
    SpotContext,
    SpotCreated,
    SpotKind,
    SpotWide,
    StableType,
    StaleRoute,
    Unavailable,
    on_lifecycle,
    on_request,
    on_send,
)
from zlink_trio.engine.oneshot import OneShot
from zlink_trio.ids import OperationId, SpotId
from zlink_trio.objects.kind import CreateOrder
from zlink_trio.server import Server, runtime_of
from zlink_trio.spots.hosted import SPOT_READY, HostedSpot, SpotMessage
from zlink_trio.spots.kind import spot_key
from zlink_trio.spots.runtime import SpotRuntime
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    ObjectKind,
    OperationKey,
    OwnerFence,
    Reservation,
)
from zlink_trio.testing import open_cluster, spot_statistics
from zlink_trio.wire.enums import TerminalResult
from zlink_trio.wire.payloads import TypedPayload
from zlink_trio.wire.tails import ReservationFence


@attrs.frozen
class Move:
    x: int


LOG: list[str] = []


class Room:
    def __init__(self, context: SpotContext) -> None:
        self.context = context
        self.gate: trio.Event | None = None

    @on_request("echo")
    async def echo(self, payload: bytes) -> bytes:
        LOG.append(f"echo:{payload.decode()}")
        return payload

    @on_send("note")
    async def note(self, payload: bytes) -> None:
        LOG.append(f"note:{payload.decode()}")
        if self.gate is not None:
            await self.gate.wait()

    @on_request("move")
    async def move(self, payload: Move) -> Move:
        return Move(payload.x + 1)

    @on_request("fail")
    async def fail(self, payload: bytes) -> bytes:
        raise RuntimeError("on purpose")


class Cart:
    def __init__(self, context: SpotContext) -> None:
        self.context = context

    @on_request("done")
    async def done(self, payload: bytes) -> bytes:
        self.context.close()
        self.context.close()  # a second request while the close runs: nothing more
        return b"closing"

    @on_lifecycle(SpotCallback.CLOSE)
    async def closed(self, event: object) -> None:
        LOG.append(f"close:{self.context.spot_id.value}")


def _app() -> App:
    app = App()
    app.register_codec(Move)
    app.register_spot("room", Room, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot("lobby", Room, execution=PerActor(), relocation=RecreateOnRelocation())
    app.register_spot("cart", Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    app.register_spot("bag", Room, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    return app


@pytest.fixture
async def server(autojump_clock: trio.testing.MockClock) -> AsyncIterator[Server]:
    LOG.clear()
    async with open_cluster(1, app=_app()) as cluster:
        yield cluster.servers[0]


def _runtime(server: Server) -> SpotRuntime:
    runtime = runtime_of(server).spots.runtime
    assert runtime is not None
    return runtime


async def _spot(server: Server, spot_id: str, stable_type: str = "room") -> HostedSpot:
    created = await server.spots.get_or_create(spot_id, stable_type).timeout(5)
    assert isinstance(created, SpotCreated)
    hosted = _runtime(server).host.get(SpotId(spot_id))
    assert hosted is not None and hosted.state is SPOT_READY
    return hosted


async def _request(server: Server, spot_id: str, packet: str, payload: Any) -> Any:
    reply: OneShot[Any] = OneShot()
    message = SpotMessage(MessageKind.REQUEST, packet, payload, reply, trio.current_time() + 5)
    await _runtime(server).host.admit(SpotId(spot_id), message)
    return await reply.wait()


async def test_messages_run_their_handlers_and_are_counted(server: Server) -> None:
    await _spot(server, "r1")
    assert await _request(server, "r1", "echo", b"a") == b"a"
    host = _runtime(server).host
    host.admit_nowait(SpotId("r1"), SpotMessage(MessageKind.SEND, "note", b"n", None, 1e9))
    codec = runtime_of(server).app.payloads.get(Move)  # type: ignore[union-attr]
    assert codec is not None
    moved = await _request(server, "r1", "move", TypedPayload(codec, Move(1)))
    assert isinstance(moved, TypedPayload) and moved.value == Move(2)  # not encoded
    with pytest.raises(NotFound, match="no request handler for 'nope'"):
        await _request(server, "r1", "nope", b"")
    from zlink_trio import ApplicationError

    with pytest.raises(ApplicationError, match="on purpose"):
        await _request(server, "r1", "fail", b"")
    (room,) = [t for t in spot_statistics(server).types if t.stable_type == "room"]
    assert (room.request_handlers, room.packet_handlers) == (2, 1)
    assert (room.handler_failures, room.no_handler) == (1, 1)
    assert room.application_turns == 5
    assert LOG == ["echo:a", "note:n"]
    with pytest.raises(StaleRoute):
        await _request(server, "nowhere", "echo", b"")


async def test_lifecycle_work_runs_before_queued_application_work(server: Server) -> None:
    hosted = await _spot(server, "r2")
    hosted.instance.gate = trio.Event()
    host = _runtime(server).host
    host.admit_nowait(SpotId("r2"), SpotMessage(MessageKind.SEND, "note", b"1", None, 1e9))
    await trio.testing.wait_all_tasks_blocked()  # note 1 runs and blocks
    host.admit_nowait(SpotId("r2"), SpotMessage(MessageKind.SEND, "note", b"2", None, 1e9))

    async def lifecycle(_: Any) -> str:
        LOG.append("lifecycle")
        return "done"

    async with trio.open_nursery() as nursery:

        async def run() -> None:
            assert await hosted.run_lifecycle_work(lifecycle) == "done"

        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        hosted.instance.gate.set()
    await trio.testing.wait_all_tasks_blocked()
    assert LOG == ["note:1", "lifecycle", "note:2"]


async def test_spot_wide_runs_under_its_own_gate_and_per_actor_has_none(server: Server) -> None:
    wide = await _spot(server, "r3", "room")
    per_actor = await _spot(server, "l1", "lobby")
    assert wide.gate is not None and wide.lane is not None and wide.lane.gate is wide.gate
    assert wide.spot_wide and not per_actor.spot_wide
    assert per_actor.gate is None
    # A member lane under the Spot's gate never runs beside the Spot's turn.
    engine = runtime_of(server).engine
    order: list[str] = []
    hold = trio.Event()

    async def member_turn(item: str) -> None:
        order.append(item)

    member = engine.new_lane(type(wide.lane.policy)(), member_turn, gate=wide.gate)

    async def spot_work(_: Any) -> None:
        order.append("spot-start")
        await hold.wait()
        order.append("spot-end")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wide.run_lifecycle_work, spot_work)
        await trio.testing.wait_all_tasks_blocked()
        member.submit_nowait("member")
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["spot-start"]
        hold.set()
    await trio.testing.wait_all_tasks_blocked()
    assert order == ["spot-start", "spot-end", "member"]
    member.close()


async def test_membership_and_callbacks(server: Server) -> None:
    from zlink_trio.ids import ActorId

    hosted = await _spot(server, "r4")
    assert await hosted.run_callback(SpotCallback.JOIN, object()) is None  # no callback
    hosted.add_member(ActorId("a"))
    assert hosted.members == {ActorId("a")} and hosted.has_members
    assert await server.spots.close(hosted.ref()) is False
    hosted.remove_member(ActorId("a"))
    cleaned: list[str] = []
    hosted.on_cleanup(lambda: cleaned.append("timers"))
    assert await server.spots.close(hosted.ref()) is True
    assert cleaned == ["timers"]
    with pytest.raises(Unavailable):
        await hosted.run_lifecycle_work(_nothing)


async def _nothing(_: Any) -> None:
    await trio.lowlevel.checkpoint()


async def _reserve(
    server: Server, spot_id: str, stable_type: str = "cart"
) -> tuple[AuthorityRow, CreateOrder[SpotId]]:
    """Reserve an Instance Spot the way a cold activation's target does: the Creating row
    and the order of its attempt."""
    runtime = _runtime(server)
    store = runtime.store
    me = server.identity
    (record,) = [r for r in await store.list_nodes() if r.descriptor.node_rid == me.node_rid]
    owner = OwnerFence(
        record.descriptor.mesh_name, me.node_rid, me.node_generation, record.lease_generation
    )
    operation = OperationKey(me.node_rid, me.node_generation, OperationId.new())
    reserved = await store.reserve(
        Reservation(
            key=spot_key(SpotId(spot_id)),
            kind=ObjectKind.INSTANCE_SPOT,
            stable_type=StableType(stable_type),
            owner=owner,
            operation=operation,
            attempt_ttl=5.0,
        )
    )
    assert isinstance(reserved, Applied)
    row = reserved.row
    fence = ReservationFence(
        expected_store_version=row.store_version,
        object_generation=row.object_generation,
        authority_owner_generation=row.owner_generation,
        target_rid=me.node_rid,
        target_generation=me.node_generation,
        target_owner_lease_generation=row.owner.lease_generation,
        pending_capacity_delta=1,
    )
    return row, CreateOrder(operation, SpotId(spot_id), row.key, row.stable_type, fence, 5000)


async def _instance(server: Server, spot_id: str) -> HostedSpot:
    """Create an Instance Spot the way a cold activation's target does."""
    row, order = await _reserve(server, spot_id)
    runtime = _runtime(server)
    terminal = await runtime.target.run_reserved(order, row, trio.current_time() + 5)
    assert terminal.terminal_result is TerminalResult.OK
    hosted = runtime.host.get(SpotId(spot_id))
    assert hosted is not None and hosted.kind is SpotKind.INSTANCE
    return hosted


async def test_an_instance_spot_closes_itself_from_a_handler(server: Server) -> None:
    hosted = await _instance(server, "cart-1")
    assert await server.spots.find("cart-1") == hosted.ref()
    assert await _request(server, "cart-1", "done", b"") == b"closing"
    await trio.testing.wait_all_tasks_blocked()
    assert LOG == ["close:cart-1"]
    assert await server.spots.find("cart-1") is None
    assert _runtime(server).host.get(SpotId("cart-1")) is None
    assert spot_statistics(server).closes == 1
    from zlink_trio import InvalidOperation

    user = await _spot(server, "r5")
    with pytest.raises(InvalidOperation, match="User Spot"):
        user.context.close()


async def test_messages_parked_while_staging_run_first(server: Server) -> None:
    """While an id stages here (a cold activation holds it from before its reserve),
    messages admitted for it are parked; the first message parked at the head runs first,
    then the others in arrival order, then what came after the publish."""
    host = _runtime(server).host
    sid = SpotId("r6")
    with pytest.raises(StaleRoute):
        host.admit_nowait(sid, SpotMessage(MessageKind.SEND, "note", b"x", None, 1e9))
    host.begin_staging(sid)
    host.admit_nowait(sid, SpotMessage(MessageKind.SEND, "note", b"second", None, 1e9))
    row, order = await _reserve(server, "r6", "bag")
    host.park_first(
        sid, row.object_generation, SpotMessage(MessageKind.SEND, "note", b"first", None, 1e9)
    )
    terminal = await _runtime(server).target.run_reserved(order, row, trio.current_time() + 5)
    assert terminal.terminal_result is TerminalResult.OK
    assert host.end_staging_of(sid) == []
    await _request(server, "r6", "echo", b"after")
    assert LOG == ["note:first", "note:second", "echo:after"]
    host.begin_staging(SpotId("gone"))
    host.admit_nowait(SpotId("gone"), SpotMessage(MessageKind.SEND, "note", b"y", None, 1e9))
    (left,) = host.end_staging_of(SpotId("gone"))
    assert left.payload == b"y"


async def test_a_given_up_attempts_first_message_never_runs_on_a_later_attempt(
    server: Server,
) -> None:
    """S06-10: a cold activation's attempt ends without a Spot (its deadline passed) while
    its hold of the id is still open; the next attempt of the id (another incarnation)
    publishes: it runs its own first message and what was parked, never the given-up
    first message — that one fails (not created) as its attempt ends, and never runs."""
    runtime = _runtime(server)
    host = runtime.host
    sid = SpotId("r9")
    given_up: OneShot[Any] = OneShot()
    host.begin_staging(sid)  # attempt A's hold, from before its reserve
    row_a, order_a = await _reserve(server, "r9", "bag")
    host.park_first(
        sid, row_a.object_generation, SpotMessage(MessageKind.REQUEST, "echo", b"a", given_up, 1e9)
    )
    host.admit_nowait(sid, SpotMessage(MessageKind.SEND, "note", b"parked", None, 1e9))
    failed = await runtime.target.run_reserved(order_a, row_a, trio.current_time())
    assert failed.terminal_result is not TerminalResult.OK  # A's deadline passed: given back
    with trio.fail_after(5), pytest.raises(Unavailable, match="was not created"):
        await given_up.wait()  # StaleRoute, as the caller sees it
    host.begin_staging(sid)  # attempt B's hold, while A's is still open
    row_b, order_b = await _reserve(server, "r9", "bag")
    assert row_b.object_generation != row_a.object_generation
    reply: OneShot[Any] = OneShot()
    host.park_first(
        sid, row_b.object_generation, SpotMessage(MessageKind.REQUEST, "echo", b"b", reply, 1e9)
    )
    created = await runtime.target.run_reserved(order_b, row_b, trio.current_time() + 5)
    assert created.terminal_result is TerminalResult.OK
    assert await reply.wait() == b"b"
    assert host.end_staging_of(sid) == []  # A's hold ends
    assert host.end_staging_of(sid) == []  # B's hold ends
    assert await _request(server, "r9", "echo", b"after") == b"after"
    assert LOG == ["echo:b", "note:parked", "echo:after"]


async def test_a_close_runs_what_was_accepted_before_its_seal_and_refuses_the_rest(
    server: Server,
) -> None:
    """Spec 06 §7 steps 1-2: messages accepted before the Closing CAS still run in the
    old incarnation (a request's caller gets its reply); a message admitted after the
    seal ends Unavailable ("closing") and never runs; application work (a timer tick)
    too; the close returns once what was accepted ran."""
    hosted = await _spot(server, "r7")
    busy, held = trio.Event(), trio.Event()
    hosted.instance.gate = busy
    host = _runtime(server).host
    sid = SpotId("r7")
    host.admit_nowait(sid, SpotMessage(MessageKind.SEND, "note", b"busy", None, 1e9))
    await trio.testing.wait_all_tasks_blocked()  # "busy" runs and holds the turn
    host.admit_nowait(sid, SpotMessage(MessageKind.SEND, "note", b"before", None, 1e9))
    accepted: OneShot[Any] = OneShot()
    host.admit_nowait(sid, SpotMessage(MessageKind.REQUEST, "echo", b"also", accepted, 1e9))
    outcome: list[bool] = []
    async with trio.open_nursery() as nursery:

        async def close() -> None:
            outcome.append(await server.spots.close(hosted.ref()))

        nursery.start_soon(close)
        await trio.testing.wait_all_tasks_blocked()  # its lifecycle turn waits for "busy"
        hosted.instance.gate = held  # "before" will hold the turn after the seal
        busy.set()
        await trio.testing.wait_all_tasks_blocked()
        assert LOG == ["note:busy", "note:before"]
        assert type(hosted.state).__name__ == "SpotClosing"  # sealed, still running
        late: OneShot[Any] = OneShot()
        with pytest.raises(Unavailable, match="closing"):
            host.admit_nowait(sid, SpotMessage(MessageKind.REQUEST, "echo", b"late", late, 1e9))
        with pytest.raises(Unavailable, match="closing"):
            hosted.submit_application_work_nowait(_nothing)
        assert outcome == []
        held.set()
    assert outcome == [True]
    assert await accepted.wait() == b"also"
    assert LOG == ["note:busy", "note:before", "echo:also"]
    assert not late.done


async def test_a_close_awaited_under_the_spots_gate_is_refused(server: Server) -> None:
    """A close awaited inside a turn that holds the SpotWide Spot's gate (its own turn,
    or a member lane's) could never run its lifecycle turn: InvalidOperation at once."""
    from zlink_trio import InvalidOperation

    hosted = await _spot(server, "r8")
    assert hosted.gate is not None and hosted.lane is not None
    engine = runtime_of(server).engine
    seen: list[BaseException] = []

    async def member_turn(_: object) -> None:
        try:
            await server.spots.close(hosted.ref())
        except InvalidOperation as exc:
            seen.append(exc)

    member = engine.new_lane(type(hosted.lane.policy)(), member_turn, gate=hosted.gate)
    member.submit_nowait("close")
    await trio.testing.wait_all_tasks_blocked()
    assert len(seen) == 1 and "own close inside its turn" in str(seen[0])
    member.close()
    assert await server.spots.close(hosted.ref()) is True
