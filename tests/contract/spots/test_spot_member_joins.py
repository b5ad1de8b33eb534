"""A User Spot's handlers Defer the Joins of their local member Actors (spec 04 §3.1):
``self.context.join_spot(actor_id, spot_id, request)`` /
``join_entry_spot(actor_id, entry_spot_id=None, request)`` from a request, packet or timer
handler of the Spot; the limits of one handler (64 Joins, 1 MiB each, 8 MiB together); an
Instance Spot handler, a lifecycle callback, a factory, a detached task and a non-member
refused; the member's barrier from ``defer()`` on; a failing handler discards its
registrations. Two and three nodes, both stores (public surface and ``zlink_trio.testing``
hooks only)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parents[1] / "actors"))

from join_kit import JoinLog, attempt, create_on, entry_id, make_join_app, spot_on

from zlink_trio import (
    ActorId,
    App,
    Approve,
    ConfigurationError,
    DisableRelocation,
    InvalidOperation,
    JoinEvent,
    JoinOutcome,
    LeaveEvent,
    OperationId,
    PerActor,
    RecreateOnRelocation,
    SpotCallback,
    SpotContext,
    SpotId,
    SpotKind,
    on_lifecycle,
    on_request,
    on_send,
    on_timer,
)
from zlink_trio.testing import CountingStore, open_cluster, spot_members

MIB = 1024 * 1024


def add_guild(app: App, log: JoinLog) -> None:
    """A PerActor User Spot "guild" whose handlers move its members, and an Instance Spot
    "crate" whose handler tries to."""

    class Guild:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            self.members: list[str] = []
            attempt(log, "guild-factory", lambda: context.join_entry_spot("nobody").defer())

        @on_lifecycle(SpotCallback.JOIN)
        async def join(self, event: JoinEvent) -> Approve:
            return Approve(reply=b"guild")

        @on_lifecycle(SpotCallback.JOINED)
        async def joined(self, event: JoinEvent) -> None:
            self.members.append(event.actor_id.value)
            attempt(
                log,
                "guild-joined",
                lambda: self.context.join_entry_spot(event.actor_id).defer(),
            )

        @on_lifecycle(SpotCallback.LEAVE)
        async def left(self, event: LeaveEvent) -> None:
            self.members.remove(event.actor_id.value)
            log.spot_events.append((self.context.spot_id.value, "leave", event))
            log._bump()

        @on_request("move")
        async def move(self, payload: bytes) -> bytes:
            """``<actor>|<user spot>`` (an empty spot: the member's Entry Spot)."""
            actor, _, spot = payload.decode().partition("|")
            if spot:
                call = self.context.join_spot(actor, spot, b"from-guild")
            else:
                call = self.context.join_entry_spot(actor)
            return str(call.timeout(10).defer().value).encode()

        @on_request("move-held")
        async def move_held(self, payload: bytes) -> bytes:
            """Defer the member's leave, then wait for the test's gate."""
            op = self.context.join_entry_spot(payload.decode()).defer()
            log.spot_entered.set()
            assert log.spot_gate is not None
            await log.spot_gate.wait()
            return str(op.value).encode()

        @on_request("move-fail")
        async def move_fail(self, payload: bytes) -> bytes:
            self.context.join_entry_spot(payload.decode()).defer()
            raise RuntimeError("the Spot handler fails after its defer")

        @on_send("move-send")
        async def move_send(self, payload: bytes) -> None:
            log.errors["packet"] = self.context.join_entry_spot(payload.decode()).defer()
            log._bump()

        @on_request("leave-later")
        async def leave_later(self, payload: bytes) -> bytes:
            self.context.timers.once("leave", 5.0, payload)
            return b""

        @on_timer("leave")
        async def leave_timer(self, payload: bytes) -> None:
            log.errors["timer"] = self.context.join_entry_spot(payload.decode()).defer()
            log._bump()

        @on_request("misuse")
        async def misuse(self, payload: bytes) -> bytes:
            """A non-member, a second defer of one call, a detached task."""
            attempt(log, "non-member", lambda: self.context.join_entry_spot("stranger").defer())
            call = self.context.join_entry_spot(payload.decode())
            attempt(log, "first-defer", call.defer)
            attempt(log, "second-defer", call.defer)
            done = trio.Event()

            async def detached() -> None:
                attempt(
                    log,
                    "detached",
                    lambda: self.context.join_entry_spot(self.members[-1]).defer(),
                )
                done.set()

            assert log.outside is not None
            log.outside.start_soon(detached)
            await done.wait()
            return b""

        @on_request("limits")
        async def limits(self, payload: bytes) -> bytes:
            """04 §3.1's limits over 65 members: 8 x 1 MiB, one byte more (refused),
            then the rest with empty requests up to the 64th; the 65th is refused."""
            members = payload.decode().split(",")
            for i, actor in enumerate(members[:8]):
                attempt(
                    log,
                    f"mib:{i}",
                    lambda actor=actor: (
                        self.context.join_entry_spot(actor, None, b"m" * MIB).timeout(30).defer()
                    ),
                )
            attempt(
                log,
                "over-8-mib",
                lambda: self.context.join_entry_spot(members[8], None, b"x").defer(),
            )
            for i, actor in enumerate(members[8:64], start=8):
                attempt(
                    log,
                    f"count:{i}",
                    lambda actor=actor: self.context.join_entry_spot(actor).timeout(30).defer(),
                )
            attempt(log, "65th", lambda: self.context.join_entry_spot(members[64]).defer())
            return b""

    class Crate:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_request("try-join")
        async def try_join(self, payload: bytes) -> bytes:
            attempt(log, "instance", lambda: self.context.join_spot("someone", "guild-x"))
            attempt(log, "instance-entry", lambda: self.context.join_entry_spot("someone"))
            return b"tried"

    app.register_spot("guild", Guild, execution=PerActor(), relocation=RecreateOnRelocation())
    app.register_spot("crate", Crate, kind=SpotKind.INSTANCE, relocation=DisableRelocation())


def make_app(log: JoinLog) -> App:
    app = make_join_app(log, spots=True)
    add_guild(app, log)
    return app


async def _enter(server: Any, log: JoinLog, actor: str, spot: str, count: int) -> None:
    """``actor`` joins ``spot`` (its own handler's Join); wait for its completion."""
    await server.actors.request(actor, "join-spot", f"{spot}|x".encode()).timeout(30)
    await log.wait_for(lambda: len(log.completions_of(actor)) == count)
    assert log.completions_of(actor)[-1].outcome is JoinOutcome.ACCEPTED


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_10_a_user_spot_handler_moves_its_member_same_node_and_back(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-10 (Spot handler part) on 2 and 3 nodes: a User Spot's request handler Defers the
    Join of its local member to another User Spot of its node; the Join runs after the
    handler, the member's ``@on_join_complete`` sees ACCEPTED with the target's reply, the
    old Spot runs LEAVE, the Store row names the new Spot; a packet handler then Defers
    the member's leave back to its Entry Spot. A lifecycle callback and the factory of
    the Spot get InvalidOperation."""
    log = JoinLog()
    async with open_cluster(nodes, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, *_ = cluster.servers
        actor = await create_on(b, cluster.servers, 1, "member")
        guild = await spot_on(b, cluster.servers, 1, "guild")
        lobby = await spot_on(b, cluster.servers, 1, "lobby")
        await _enter(a, log, actor, guild, 1)
        assert spot_members(b, guild) == {ActorId(actor)}
        assert isinstance(log.errors["guild-factory"], InvalidOperation)
        assert isinstance(log.errors["guild-joined"], InvalidOperation)
        op = await a.spots.request(guild, "move", f"{actor}|{lobby}".encode()).timeout(30)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        done = log.completions_of(actor)[1]
        assert str(done.operation_id.value) == op.decode()
        assert done.outcome is JoinOutcome.ACCEPTED and done.reply == b"welcome"
        assert done.spot_id == SpotId(lobby)
        join_events = [e for s, n, e in log.spot_events if s == lobby and n == "join"]
        assert isinstance(join_events[-1], JoinEvent)
        assert join_events[-1].request == b"from-guild"
        assert join_events[-1].from_spot_id == SpotId(guild)
        assert spot_members(b, guild) == frozenset()
        assert spot_members(b, lobby) == {ActorId(actor)}
        assert await a.actors.request(actor, "whoami") == lobby.encode()
        # the lobby has no guild handler; back via the guild needs membership of it
        await _enter(a, log, actor, guild, 3)
        await a.spots.send(guild, "move-send", actor.encode())
        await log.wait_for(lambda: len(log.completions_of(actor)) == 4)
        left = log.completions_of(actor)[3]
        assert left.operation_id == log.errors["packet"]
        assert left.outcome is JoinOutcome.ACCEPTED and left.spot_id == await entry_id(b)
        assert await a.actors.request(actor, "whoami") == (await entry_id(b)).value.encode()


async def test_a04_13_a_spot_handler_moves_its_member_across_nodes(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (cross-node, Spot handler part) on 3 nodes: node 1's guild Defers its
    member's Join to a User Spot of node 2: the member is recreated there with the same
    ObjectGeneration (its completion runs on the new instance), the guild runs LEAVE and
    loses the member, the Store row names node 2 and the new Spot."""
    log = JoinLog()
    async with open_cluster(3, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(a, cluster.servers, 1, "wanderer")
        guild = await spot_on(a, cluster.servers, 1, "guild")
        lobby = await spot_on(a, cluster.servers, 2, "lobby")
        await _enter(a, log, actor, guild, 1)
        before = await a.actors.find(actor)
        assert before is not None and before.node_rid == b.identity.node_rid
        await a.spots.request(guild, "move", f"{actor}|{lobby}".encode()).timeout(30)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        done = log.completions_of(actor)[1]
        assert done.outcome is JoinOutcome.ACCEPTED and done.spot_id == SpotId(lobby)
        old, new = log.instances[actor]
        assert log.completions[-1][2] is new and old.context.retired
        await log.wait_for(lambda: spot_members(b, guild) == frozenset())
        assert spot_members(c, lobby) == {ActorId(actor)}
        after = await a.actors.find(actor)
        assert after is not None and after.node_rid == c.identity.node_rid
        assert after.object_generation == before.object_generation
        assert await a.actors.request(actor, "whoami") == lobby.encode()
        # the Join counters (server.statistics()): the source counted a move out (after
        # one accepted same-node Join into the guild), the target a move in
        source, target = b.statistics().actors, c.statistics().actors
        assert source is not None and target is not None
        assert (source.joins_accepted, source.joins_moved_out) == (1, 1)
        assert (target.joins_moved_in, target.joins_moved_out) == (1, 0)
        assert source.joins_failed == source.joins_rejected == 0


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_11_the_members_barrier_holds_from_defer_and_a_failure_discards_it(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-11 (Spot handler part) on 2 and 3 nodes: while the guild's handler that Deferred a
    PerActor member's leave still runs, a payload sent to the member waits behind the
    barrier (the member runs no turn), and runs after the member's completion; a guild
    handler that raises after its Defer discards the Join: no completion, the member
    stays a member and handles its next message."""
    log = JoinLog()
    async with open_cluster(nodes, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, *_ = cluster.servers
        one = await create_on(a, cluster.servers, 0, "held")
        two = await create_on(a, cluster.servers, 0, "kept")
        guild = await spot_on(a, cluster.servers, 0, "guild")
        await _enter(b, log, one, guild, 1)
        await _enter(b, log, two, guild, 1)
        # a failing handler: discarded, nothing moves, the member still runs
        before = len(log.completions)
        result = await _raises(b.spots.request(guild, "move-fail", two.encode()).timeout(30))
        assert result is not None
        assert await b.actors.request(two, "echo", b"still here").timeout(10) == b"still here"
        assert len(log.completions) == before
        assert spot_members(a, guild) == {ActorId(one), ActorId(two)}
        # the barrier from defer() on
        log.spot_gate = trio.Event()
        async with trio.open_nursery() as nursery:
            replies: list[bytes | None] = []

            async def held() -> None:
                replies.append(await b.spots.request(guild, "move-held", one.encode()).timeout(30))

            nursery.start_soon(held)
            await log.spot_entered.wait()
            await b.actors.send(one, "note", b"behind the barrier")
            await trio.testing.wait_all_tasks_blocked()
            assert ("note", b"behind the barrier") not in log.packets(one)
            log.spot_gate.set()
        await log.wait_for(lambda: ("note", b"behind the barrier") in log.packets(one))
        completion_at = log.trace.index("complete:accepted", log.trace.index("echo:still here"))
        assert log.trace.index("note:behind the barrier") > completion_at
        assert log.completions_of(one)[-1].spot_id == await entry_id(a)
        assert spot_members(a, guild) == {ActorId(two)}


async def _raises(awaitable: Any) -> Exception | None:
    try:
        await awaitable
    except Exception as exc:
        return exc
    return None


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_10_a_spot_timer_handler_defers_a_members_leave(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-10 (timer handler part): a guild timer's tick Defers its member's leave; the
    Join runs after the tick's handler and the member's completion reports the Entry
    Spot."""
    log = JoinLog()
    async with open_cluster(nodes, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, *_ = cluster.servers
        actor = await create_on(a, cluster.servers, 0, "timed")
        guild = await spot_on(a, cluster.servers, 0, "guild")
        await _enter(b, log, actor, guild, 1)
        await b.spots.request(guild, "leave-later", actor.encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        done = log.completions_of(actor)[1]
        assert done.operation_id == log.errors["timer"]
        assert done.outcome is JoinOutcome.ACCEPTED and done.spot_id == await entry_id(a)
        assert spot_members(a, guild) == frozenset()


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_10_refusals_in_spot_handlers(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-10 (Spot side): an Instance Spot handler's join_spot / join_entry_spot is
    InvalidOperation; in a User Spot handler a non-member, a second defer() of one call
    and a detached task are InvalidOperation, and the valid first defer() still runs."""
    log = JoinLog()
    async with open_cluster(nodes, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, *_ = cluster.servers
        assert await b.spots.request("crate-1", "try-join").instance("crate") == b"tried"
        assert isinstance(log.errors["instance"], InvalidOperation)
        assert isinstance(log.errors["instance-entry"], InvalidOperation)
        one = await create_on(a, cluster.servers, 0, "misused")
        two = await create_on(a, cluster.servers, 0, "other")
        guild = await spot_on(a, cluster.servers, 0, "guild")
        await _enter(b, log, one, guild, 1)
        await _enter(b, log, two, guild, 1)
        async with trio.open_nursery() as outside:
            log.outside = outside
            await b.spots.request(guild, "misuse", one.encode()).timeout(30)
        assert isinstance(log.errors["non-member"], InvalidOperation)
        assert isinstance(log.errors["first-defer"], OperationId)
        assert isinstance(log.errors["second-defer"], InvalidOperation)
        assert isinstance(log.errors["detached"], InvalidOperation)
        await log.wait_for(lambda: len(log.completions_of(one)) == 2)
        assert log.completions_of(one)[1].operation_id == log.errors["first-defer"]
        assert len(log.completions_of(two)) == 1
        assert spot_members(a, guild) == {ActorId(two)}


async def test_a04_12_the_limits_of_one_spot_handler(clock: object, store: CountingStore) -> None:
    """A04-12 (Spot handler part): one guild handler registers Joins for its 65 members:
    8 requests of exactly 1 MiB (8 MiB together) are accepted, one byte more is a
    ConfigurationError; with empty requests the 64th registration succeeds and the 65th
    is a ConfigurationError; the refused ones left nothing (the 64 accepted Joins all
    complete, the 65th member stays in the guild)."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        guild = await spot_on(a, cluster.servers, 0, "guild")
        members: list[str] = []
        for i in range(65):
            actor = await create_on(a, cluster.servers, 0, f"crowd{i}")
            await _enter(b, log, actor, guild, 1)
            members.append(actor)
        await b.spots.request(guild, "limits", ",".join(members).encode()).timeout(60)
        for i in range(8):
            assert isinstance(log.errors[f"mib:{i}"], OperationId)
        assert isinstance(log.errors["over-8-mib"], ConfigurationError)
        for i in range(8, 64):
            assert isinstance(log.errors[f"count:{i}"], OperationId)
        assert isinstance(log.errors["65th"], ConfigurationError)
        await log.wait_for(
            lambda: all(len(log.completions_of(m)) == 2 for m in members[:64]), timeout=120
        )
        assert all(log.completions_of(m)[1].outcome is JoinOutcome.ACCEPTED for m in members[:64])
        assert len(log.completions_of(members[64])) == 1
        assert spot_members(a, guild) == {ActorId(members[64])}


@pytest.mark.parametrize("fail", [False, True], ids=["activated", "discarded"])
async def test_a04_11_a_members_turn_in_progress_ends_before_its_join_or_its_next_message(
    clock: object, store: CountingStore, fail: bool
) -> None:
    """A04-11 (Spot handler part): the PerActor member is inside a turn of its own (its
    handler blocked) when the guild's handler Defers its leave and ends: the Join (its
    completion) runs only after that turn ended — never beside it; when the guild's
    handler fails instead, the message sent to the member meanwhile also waits for that
    turn: one Actor never runs two turns at once."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        member = await create_on(a, cluster.servers, 0, "busy")
        guild = await spot_on(a, cluster.servers, 0, "guild")
        await _enter(b, log, member, guild, 1)
        log.gate = trio.Event()
        log.entered = trio.Event()
        async with trio.open_nursery() as nursery:
            done: list[bytes | None] = []

            async def block() -> None:
                done.append(await b.actors.request(member, "block", b"busy").timeout(60))

            nursery.start_soon(block)
            await log.entered.wait()
            if fail:
                await _raises(b.spots.request(guild, "move-fail", member.encode()).timeout(30))
            else:
                await b.spots.request(guild, "move", f"{member}|".encode()).timeout(30)
            await b.actors.send(member, "note", b"next")
            await trio.testing.wait_all_tasks_blocked()
            assert done == []  # its turn still runs ...
            assert len(log.completions_of(member)) == 1  # ... and nothing of it ran beside
            assert ("note", b"next") not in log.packets(member)
            log.gate.set()
        await log.wait_for(lambda: ("note", b"next") in log.packets(member))
        assert done == [b"unblocked"]
        assert len(log.completions_of(member)) == (1 if fail else 2)
        assert spot_members(a, guild) == (frozenset({ActorId(member)}) if fail else frozenset())
