"""Adversarial review of Spot direct calls and Instance Spot cold activation (spec 06 §4,
§4.1, §4.1.1, §4.2, §5, §6 route cache; S06-10 … S06-17) through the public surface only:
``zlink_trio``, ``zlink_trio.testing`` (open_cluster over real TCP, WireTap, CountingStore,
RecordingStore) and what docs/api.md promises. Both stores; MockClock on memory.

Tests marked ``xfail(strict=True, reason="BUG: ...")`` pin a behaviour that contradicts
the spec or the docs; the others are probes that could fail.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio import (
    App,
    ApplicationError,
    DeadlineExceeded,
    DisableRelocation,
    InvalidOperation,
    MeshConfig,
    NotFound,
    ObjectRole,
    RecreateOnRelocation,
    ServerConfig,
    SpotCallback,
    SpotContext,
    SpotKind,
    SpotWide,
    TypeMismatch,
    Unavailable,
    ZLinkError,
    on_lifecycle,
    on_request,
    on_send,
    on_timer,
)
from zlink_trio.testing import (
    CountingStore,
    RecordingStore,
    TapDirection,
    WireTap,
    node_of,
    open_cluster,
    spot_statistics,
)

SPOT_DIRECT = 39
"""Command 39 (spec 06 §4.1: Spot direct route, kinds 1 and 2)."""
SECRET = b"zlink-trio review of spot calls secret"
LONG = 60.0
"""Bound of every wait of these tests."""


@attrs.frozen
class Item:
    sku: str


@attrs.frozen
class Other:
    n: int


@attrs.define
class Log:
    """What the application observed, on every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    handled: list[tuple[str, int, str, str, bytes]] = attrs.field(factory=list)
    """(spot id, generation, node, what, payload) in handling order (ticks: what="tick")."""
    gate: trio.Event | None = None
    """Handlers "block" wait on it."""
    create_gate: trio.Event | None = None
    """The CREATE callback (part of the activation, before Ready) waits on it."""
    entered: trio.Event = attrs.field(factory=trio.Event)
    create_entered: trio.Event = attrs.field(factory=trio.Event)
    arm_in_factory: float | None = None
    """When set, the factory arms the one-shot timer "tick" with this delay."""
    close_on_tick: bool = False
    close_gate: trio.Event | None = None
    """The CLOSE callback (close step 3, the row still Closing) waits on it."""
    close_entered: trio.Event = attrs.field(factory=trio.Event)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def runs(self, spot_id: str) -> int:
        return self.factory_runs.get(spot_id, 0)

    def record(self, context: SpotContext, node: str, what: str, payload: bytes) -> None:
        self.handled.append(
            (context.spot_id.value, context.object_generation.value, node, what, payload)
        )
        self._changed.set()
        self._changed = trio.Event()

    def of(self, spot_id: str) -> list[tuple[str, bytes]]:
        return [(what, p) for sid, _, _, what, p in self.handled if sid == spot_id]

    def generations(self, spot_id: str) -> list[int]:
        return [g for sid, g, _, _, _ in self.handled if sid == spot_id]

    async def wait_handled(self, count: int) -> None:
        with trio.fail_after(LONG):
            while len(self.handled) < count:
                await self._changed.wait()


def make_class(log: Log, node: str) -> type[Any]:
    class Cart:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            sid = context.spot_id.value
            log.factory_runs[sid] = log.factory_runs.get(sid, 0) + 1
            self.items: list[bytes] = []
            if log.arm_in_factory is not None:
                context.timers.once("tick", log.arm_in_factory, b"f")

        @on_lifecycle(SpotCallback.CREATE)
        async def created(self, request: bytes | None) -> None:
            log.create_entered.set()
            if log.create_gate is not None:
                await log.create_gate.wait()

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            log.close_entered.set()
            if log.close_gate is not None:
                await log.close_gate.wait()

        @on_request("add")
        async def add(self, payload: bytes) -> bytes:
            log.record(self.context, node, "add", payload)
            self.items.append(payload)
            return str(len(self.items)).encode()

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            log.record(self.context, node, "note", payload)
            self.items.append(payload)

        @on_request("whoami")
        async def whoami(self, payload: bytes) -> bytes:
            log.record(self.context, node, "whoami", payload)
            return f"{node}:{self.context.object_generation.value}".encode()

        @on_send("block")
        async def block(self, payload: bytes) -> None:
            log.record(self.context, node, "block", payload)
            log.entered.set()
            if log.gate is not None:
                await log.gate.wait()

        @on_send("close")
        async def close(self, payload: bytes) -> None:
            log.record(self.context, node, "close", payload)
            self.context.close()

        @on_request("boom")
        async def boom(self, payload: bytes) -> bytes:
            log.record(self.context, node, "boom", payload)
            raise RuntimeError("the handler failed")

        @on_request("big")
        async def big(self, payload: bytes) -> bytes:
            log.record(self.context, node, "big", payload)
            return b"x" * int(payload.decode())

        @on_request("typed")
        async def typed(self, item: Item) -> bytes:
            log.record(self.context, node, "typed", item.sku.encode())
            return item.sku.encode()

        @on_request("arm")
        async def arm(self, payload: bytes) -> bytes:
            log.record(self.context, node, "arm", payload)
            self.context.timers.once("tick", float(payload.decode()), b"t")
            return b"armed"

        @on_timer("tick")
        async def tick(self, payload: bytes) -> None:
            log.record(self.context, node, "tick", payload)
            if log.close_on_tick:
                self.context.close()

    return Cart


def host_app(
    log: Log, node: str, *, instance: tuple[str, ...] = ("cart",), user: tuple[str, ...] = ()
) -> App:
    app = App()
    app.register_codec(Item)
    app.register_codec(Other)
    cls = make_class(log, node)
    for stable_type in instance:
        app.register_spot(stable_type, cls, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    for stable_type in user:
        app.register_spot(stable_type, cls, execution=SpotWide(), relocation=RecreateOnRelocation())
    return app


def caller_app() -> App:
    app = App()
    app.register_codec(Item)
    app.register_codec(Other)
    return app


def server(**changes: Any) -> ServerConfig:
    return ServerConfig(meshes=(MeshConfig(name="test"),), cluster_secret=SECRET, **changes)


def client(**changes: Any) -> ServerConfig:
    return ServerConfig(
        meshes=(MeshConfig(name="test", object_role=ObjectRole.CLIENT),),
        cluster_secret=SECRET,
        **changes,
    )


def sent_39(tap: WireTap, srv: Any) -> int:
    return tap.count(
        node=node_of(srv).identity.node_rid, direction=TapDirection.SENT, command=SPOT_DIRECT
    )


async def wait_released(recording: RecordingStore, spot_id: str) -> None:
    """Until the Store row of ``spot_id`` was released (a close ended)."""
    with trio.fail_after(LONG):
        await recording.wait_for(
            lambda h: any(
                c.method == "release" and c.applied and c.key is not None
                and c.key.object_id == spot_id
                for c in h
            )
        )  # fmt: skip


# --- §4.2: concurrent first messages --------------------------------------------------------


async def test_s06_16_concurrent_first_sends_and_requests_from_three_hosts_run_once(
    clock: object, store: CountingStore
) -> None:
    """S06-16: three nodes that all host "cart" each send a first request AND a first send
    with Instance intent for one id at the same moment, while the winner's activation is
    held in its CREATE callback: ONE factory run, one reservation in the cluster, every
    message handled exactly once by the one incarnation, and the requests' replies are
    the distinct positions 1..n of the Spot's own sequence (nothing lost, nothing twice)."""
    log = Log(create_gate=trio.Event())
    tap = WireTap()
    async with open_cluster(
        3,
        store=store,
        app=lambda i: host_app(log, f"n{i}"),
        config=lambda i: server(),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        replies: dict[int, bytes | None] = {}

        async def request(i: int) -> None:
            call = cluster.servers[i].spots.request("c1", "add", f"r{i}".encode())
            replies[i] = await call.instance("cart").timeout(30)

        async def send(i: int) -> None:
            await (
                cluster.servers[i].spots.send("c1", "note", f"s{i}".encode()).instance().timeout(30)
            )

        with trio.fail_after(LONG):
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(request, i)
                    nursery.start_soon(send, i)
                await log.create_entered.wait()
                await trio.testing.wait_all_tasks_blocked()
                assert log.create_gate is not None
                log.create_gate.set()
            await log.wait_handled(6)
        assert log.runs("c1") == 1
        payloads = sorted(p for _, p in log.of("c1"))
        assert payloads == sorted(
            [f"r{i}".encode() for i in range(3)] + [f"s{i}".encode() for i in range(3)]
        )
        assert len(set(log.generations("c1"))) == 1
        assert len({node for _sid, _g, node, _w, _p in log.handled}) == 1
        positions = {p: str(k + 1).encode() for k, (_w, p) in enumerate(log.of("c1"))}
        for i in range(3):
            assert replies[i] == positions[f"r{i}".encode()]
        reservations = 0
        for srv in cluster.servers:
            spots = srv.statistics().spots
            assert spots is not None and spots.calls is not None
            reservations += spots.calls.reservations
        assert reservations == 1


# --- §5: deadlines, completion, no re-send ----------------------------------------------------


async def test_s06_10_a_request_whose_deadline_passes_during_activation_ends_once_and_never_runs(
    clock: object, store: CountingStore
) -> None:
    """S06-10/S06-15: a cold-activating request whose deadline passes while the activation
    is held (CREATE callback) ends DeadlineExceeded, exactly once, after ONE command 39;
    its message never runs (not when the activation is released, not with the next
    activation), and the next call activates a fresh incarnation whose first message is
    its own."""
    log = Log(create_gate=trio.Event())
    tap = WireTap()
    async with open_cluster(
        2,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1"),
        config=lambda i: client() if i == 0 else server(),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with trio.fail_after(LONG):
            start = trio.current_time()
            with pytest.raises(DeadlineExceeded):
                await caller.spots.request("c1", "add", b"late").instance("cart").timeout(2)
            assert trio.current_time() - start >= 2
            assert sent_39(tap, caller) == 1
            assert log.create_gate is not None
            log.create_gate.set()
            reply = await caller.spots.request("c1", "add", b"next").instance("cart").timeout(20)
        assert reply == b"1"
        assert log.of("c1") == [("add", b"next")]
        assert sent_39(tap, caller) == 2


async def test_s06_16_a_request_that_times_out_at_a_losing_target_is_never_forwarded(
    clock: object, store: CountingStore
) -> None:
    """S06-16/S06-10: a first message reaches a LOSING target (mesh B's node 2) while the
    winner's activation (mesh A's node 1) is held; its request's deadline passes there: the
    caller gets DeadlineExceeded once, the loser never forwards it afterwards, and the
    winner's Spot never handles it."""
    log = Log(create_gate=trio.Event())
    tap = WireTap()
    c = ObjectRole.CLIENT
    meshes = (
        (MeshConfig(name="A", object_role=c), MeshConfig(name="B", object_role=c)),
        (MeshConfig(name="A"),),
        (MeshConfig(name="B"), MeshConfig(name="A", object_role=c)),
    )
    async with open_cluster(
        3,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, f"n{i}"),
        config=lambda i: ServerConfig(meshes=meshes[i], cluster_secret=SECRET),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, winner, loser = cluster.servers
        with trio.fail_after(LONG):
            async with trio.open_nursery() as nursery:
                first: list[bytes | None] = []

                async def call_a() -> None:
                    call = caller.spots.request("c1", "add", b"A").instance("cart")
                    first.append(await call.in_mesh("A").timeout(30))

                nursery.start_soon(call_a)
                await log.create_entered.wait()
                with pytest.raises(DeadlineExceeded):
                    await (
                        caller.spots.request("c1", "add", b"B")
                        .instance("cart")
                        .in_mesh("B")
                        .timeout(2)
                    )
                assert log.create_gate is not None
                log.create_gate.set()
            assert first == [b"1"]
            assert await caller.spots.request("c1", "add", b"after").timeout(10) == b"2"
        assert log.of("c1") == [("add", b"A"), ("add", b"after")]
        lost, won = loser.statistics().spots, winner.statistics().spots
        assert lost is not None and lost.calls is not None
        assert won is not None and won.calls is not None
        assert (lost.calls.reservations, lost.calls.forwarded) == (0, 0)
        assert won.calls.reservations == 1
        assert sent_39(tap, loser) == 0


async def test_s06_10_an_admitted_cold_send_is_handled_even_if_activation_outlasts_its_timeout(
    clock: object, store: CountingStore
) -> None:
    """S06-10: a one-way send with Instance intent completes at admission (before the
    factory), and its ``.timeout`` bounds that admission only (docs/api.md); once admitted
    it is handled when the activation completes, however long that takes."""
    log = Log(create_gate=trio.Event())
    async with open_cluster(
        2,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1"),
        config=lambda i: client() if i == 0 else server(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with trio.fail_after(LONG):
            await caller.spots.send("c1", "note", b"first").instance("cart").timeout(1)
            await log.create_entered.wait()
            assert log.handled == []
            await trio.sleep(2)  # the activation takes longer than the send's admission bound
            assert log.create_gate is not None
            log.create_gate.set()
            reply = await caller.spots.request("c1", "add", b"second").instance("cart").timeout(20)
        assert log.of("c1") == [("note", b"first"), ("add", b"second")]
        assert reply == b"2"


async def test_s06_10_a_cancelled_cold_request_is_sent_once_and_runs_at_most_once(
    clock: object, store: CountingStore
) -> None:
    """S06-10: a cold-activating request cancelled by its caller's scope while the
    activation is held: ONE command 39 (never re-sent); its message runs at most once
    (here: the target, unaware of the cancel, handles it first, once), and the next call
    follows it in the same incarnation."""
    log = Log(create_gate=trio.Event())
    tap = WireTap()
    async with open_cluster(
        2,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1"),
        config=lambda i: client() if i == 0 else server(),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with trio.fail_after(LONG):
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:

                    async def first() -> None:
                        await (
                            caller.spots.request("c1", "add", b"first").instance("cart").timeout(30)
                        )

                    nursery.start_soon(first)
                    await log.create_entered.wait()
                    scope.cancel()
            assert sent_39(tap, caller) == 1
            assert log.create_gate is not None
            log.create_gate.set()
            await log.wait_handled(1)
            reply = await caller.spots.request("c1", "add", b"next").instance("cart").timeout(20)
        assert reply == b"2"
        assert log.of("c1") == [("add", b"first"), ("add", b"next")]
        assert log.runs("c1") == 1
        assert sent_39(tap, caller) == 2


# --- §7 with §4: self-close with queued messages, then a new activation ---------------------


async def test_s06_15_a_self_closed_instance_runs_what_it_accepted_then_a_new_one_activates(
    clock: object, store: CountingStore
) -> None:
    """S06-15/S06-10: an Instance Spot closes itself from a handler while messages are
    queued behind it: what was accepted before the seal runs once on the old
    incarnation; the caller's stale cached route ends ONE call Unavailable (never
    re-sent); the next Instance-intent call activates a NEW incarnation (new
    ObjectGeneration, its own first message first, fresh state); nothing ran twice."""
    log = Log()
    recording = RecordingStore(store)
    tap = WireTap()
    async with open_cluster(
        2,
        store=recording,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1"),
        config=lambda i: client() if i == 0 else server(),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with trio.fail_after(LONG):
            assert await caller.spots.request("c1", "add", b"a").instance("cart") == b"1"
            log.gate = trio.Event()
            await caller.spots.send("c1", "block", b"b")
            await log.entered.wait()
            for packet, payload in (("note", b"n1"), ("close", b""), ("note", b"n2")):
                await caller.spots.send("c1", packet, payload)
            log.gate.set()
            await wait_released(recording, "c1")
            old = log.generations("c1")[0]
            assert log.of("c1") == [
                ("add", b"a"), ("block", b"b"), ("note", b"n1"), ("close", b""), ("note", b"n2")
            ]  # fmt: skip
            tap.clear()
            with pytest.raises(Unavailable):
                await caller.spots.request("c1", "add", b"stale").instance("cart").timeout(10)
            assert sent_39(tap, caller) == 1
            reply = await caller.spots.request("c1", "add", b"fresh").instance("cart").timeout(10)
        assert reply == b"1"  # fresh state
        assert log.runs("c1") == 2
        assert log.of("c1")[5:] == [("add", b"fresh")]
        assert log.generations("c1")[5] != old
        assert sent_39(tap, caller) == 2


async def test_s06_15_an_owner_node_calls_its_own_self_closed_instance_again(
    clock: object, store: CountingStore
) -> None:
    """S06-15: on the owner node itself (local caller, local route cache), an Instance Spot
    that closed itself is activated again by the next Instance-intent call: new
    ObjectGeneration, fresh state, the first message first."""
    log = Log()
    recording = RecordingStore(store)
    async with open_cluster(
        1, store=recording, app=lambda i: host_app(log, "n0"), config=lambda i: server()
    ) as cluster:
        (owner,) = cluster.servers
        with trio.fail_after(LONG):
            assert await owner.spots.request("c1", "add", b"a").instance("cart") == b"1"
            await owner.spots.send("c1", "close")
            await wait_released(recording, "c1")
            reply = await owner.spots.request("c1", "add", b"again").instance("cart").timeout(10)
        assert reply == b"1"
        assert log.runs("c1") == 2
        g = log.generations("c1")
        assert g[0] == g[1] != g[2]


async def test_s06_10_close_then_recreate_of_an_instance_reaches_the_new_incarnation(
    clock: object, store: CountingStore
) -> None:
    """S06-10 (§5): a caller resolved an Instance Spot (cached route, generation g1); it
    closes itself and ANOTHER caller activates it again on the same owner (g2): the first
    caller's next call, with its old route, is handled by the current Ready Spot g2."""
    log = Log()
    recording = RecordingStore(store)
    long = {"route_cache_max_age": 25.0, "owner_lease_ttl": 60.0}
    async with open_cluster(
        3,
        store=recording,
        app=lambda i: host_app(log, "n1") if i == 1 else caller_app(),
        config=lambda i: server(**long) if i == 1 else client(**long),
    ) as cluster:
        await cluster.wait_all_admitted()
        first, _owner, second = cluster.servers
        with trio.fail_after(LONG):
            g1 = await first.spots.request("c1", "whoami").instance("cart")
            await first.spots.send("c1", "close")
            await wait_released(recording, "c1")
            g2 = await second.spots.request("c1", "whoami").instance("cart")
            assert g1 != g2
            again = await first.spots.request("c1", "whoami").timeout(10)
        assert again == g2


async def test_s06_15_a_first_message_that_closes_its_spot_then_a_new_activation(
    clock: object, store: CountingStore
) -> None:
    """S06-15: the cold activation's FIRST message closes the Instance Spot (its completion
    record and the close meet): the close completes, the id is Missing, and the next
    Instance-intent call (another caller) activates a new incarnation once."""
    log = Log()
    recording = RecordingStore(store)
    async with open_cluster(
        3,
        store=recording,
        app=lambda i: host_app(log, "n1") if i == 1 else caller_app(),
        config=lambda i: server() if i == 1 else client(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, _owner, other = cluster.servers
        with trio.fail_after(LONG):
            await caller.spots.send("c1", "close").instance("cart")
            await wait_released(recording, "c1")
            assert await caller.spots.find("c1") is None
            assert await other.spots.request("c1", "add", b"a").instance("cart") == b"1"
        assert log.of("c1") == [("close", b""), ("add", b"a")]
        assert log.runs("c1") == 2
        g = log.generations("c1")
        assert g[0] != g[1]


async def test_s06_16_an_instance_call_to_a_closing_spot_waits_and_activates_a_new_one(
    clock: object, store: CountingStore
) -> None:
    """S06-16 with §7: while an Instance Spot's close is in progress (held in its CLOSE
    callback, the row Closing), a call without intent is NotFound (not Ready), and a call
    with Instance intent from a caller with no cached route waits for the close to end and
    then activates a NEW incarnation with its message first; nothing ran twice."""
    log = Log(close_gate=trio.Event())
    async with open_cluster(
        3,
        store=store,
        app=lambda i: host_app(log, "n1") if i == 1 else caller_app(),
        config=lambda i: server() if i == 1 else client(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, _owner, other = cluster.servers
        with trio.fail_after(LONG):
            assert await caller.spots.request("c1", "add", b"a").instance("cart") == b"1"
            await caller.spots.send("c1", "close")
            await log.close_entered.wait()
            with pytest.raises(NotFound):
                await other.spots.request("c1", "add", b"x").timeout(5)
            replies: list[bytes | None] = []
            async with trio.open_nursery() as nursery:

                async def again() -> None:
                    call = other.spots.request("c1", "add", b"new").instance("cart")
                    replies.append(await call.timeout(30))

                nursery.start_soon(again)
                await trio.testing.wait_all_tasks_blocked()
                assert log.runs("c1") == 1
                assert log.close_gate is not None
                log.close_gate.set()
        assert replies == [b"1"]
        assert log.of("c1") == [("add", b"a"), ("close", b""), ("add", b"new")]
        assert log.runs("c1") == 2


# --- timers on Instance Spots -----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_s06_15_a_factory_armed_zero_delay_timer_never_overtakes_the_first_message(
    clock: object, store: CountingStore
) -> None:
    """S06-15: the factory arms a one-shot timer due at once; the cold activation's first
    message is still the first thing the Spot runs (the tick comes after it)."""
    log = Log(arm_in_factory=0.0)
    async with open_cluster(
        2,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1"),
        config=lambda i: client() if i == 0 else server(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with trio.fail_after(LONG):
            assert await caller.spots.request("c1", "add", b"first").instance("cart") == b"1"
            await log.wait_handled(2)
        assert log.of("c1") == [("add", b"first"), ("tick", b"f")]


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_s06_15_a_timer_closes_its_instance_while_messages_wait_by_acceptance(
    clock: object, store: CountingStore
) -> None:
    """Spot timers against Spot messages, ordered by acceptance: while a handler blocks, a
    note accepted before the tick's due time, the tick (which closes the Instance Spot),
    and a note accepted after it run in that order, all before the release; no tick of the
    old incarnation ever runs again, and a new activation (another caller, fresh cache)
    starts a new incarnation with no timer of the old one."""
    log = Log(close_on_tick=True)
    recording = RecordingStore(store)
    async with open_cluster(
        3,
        store=recording,
        app=lambda i: host_app(log, "n1") if i == 1 else caller_app(),
        config=lambda i: server() if i == 1 else client(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, _owner, other = cluster.servers
        with trio.fail_after(LONG):
            t0 = trio.current_time()
            assert await caller.spots.request("c1", "arm", b"1.0").instance("cart") == b"armed"
            log.gate = trio.Event()
            await caller.spots.send("c1", "block", b"b")
            await log.entered.wait()
            await trio.sleep_until(t0 + 0.5)
            await caller.spots.send("c1", "note", b"before")
            await trio.sleep_until(t0 + 1.5)
            await caller.spots.send("c1", "note", b"after")
            await trio.sleep_until(t0 + 2.0)
            log.gate.set()
            await wait_released(recording, "c1")
            assert log.of("c1") == [
                ("arm", b"1.0"), ("block", b"b"), ("note", b"before"), ("tick", b"t"),
                ("note", b"after"),
            ]  # fmt: skip
            reply = await other.spots.request("c1", "add", b"new").instance("cart").timeout(10)
            await trio.sleep(5)  # virtual: an old tick would have fired by now
        assert reply == b"1"
        assert log.of("c1")[5:] == [("add", b"new")]
        assert log.runs("c1") == 2


# --- §4.1 and §4.2 error kinds -----------------------------------------------------------------


async def test_s06_12_error_kinds_of_direct_calls_are_typed_and_leave_nothing_on_the_wire(
    clock: object, store: CountingStore
) -> None:
    """S06-11/S06-12/S06-13: the typed errors of §4.1–§4.2 and docs/api.md, each after
    nothing was sent (no command 39) and nothing was created: ``in_mesh`` without
    Instance intent (request and send) → InvalidOperation; an untyped intent with two
    Instance types → InvalidOperation; an unknown type or mesh → NotFound; a User Spot
    with Instance intent (typed, untyped, send) → TypeMismatch; an Instance Spot of
    another named type → TypeMismatch; an oversized payload or an unregistered payload
    class → InvalidOperation at the call."""
    log = Log()
    tap = WireTap()
    counting = CountingStore(store)
    async with open_cluster(
        2,
        store=store,
        app=lambda i: (
            caller_app()
            if i == 0
            else host_app(log, "n1", instance=("cart", "bag"), user=("room",))
        ),
        config=lambda i: (
            client(location_store=counting, max_request_bytes=1024) if i == 0 else server()
        ),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        spots = caller.spots
        with trio.fail_after(LONG):
            await spots.get_or_create("r1", "room").timeout(10)
            assert await spots.request("c1", "add", b"x").instance("cart") == b"1"
            tap.clear()
            counting.reset()
            with pytest.raises(InvalidOperation):
                await spots.request("m1", "add").in_mesh("test")
            with pytest.raises(InvalidOperation):
                await spots.send("m1", "note").in_mesh("test")
            assert counting.count("read") == 0
            with pytest.raises(InvalidOperation):
                await spots.request("m1", "add").instance()
            with pytest.raises(NotFound):
                await spots.request("m1", "add").instance("nope")
            with pytest.raises(NotFound):
                await spots.request("m1", "add").instance("cart").in_mesh("nowhere")
            with pytest.raises(TypeMismatch):
                await spots.request("r1", "add").instance("cart")
            with pytest.raises(TypeMismatch):
                await spots.request("r1", "add").instance()
            with pytest.raises(TypeMismatch):
                await spots.send("r1", "note").instance()
            with pytest.raises(TypeMismatch):
                await spots.request("c1", "add").instance("bag")
            with pytest.raises(InvalidOperation):
                spots.request("c1", "add", b"x" * 1025)
            with pytest.raises(InvalidOperation):
                spots.send("c1", "note", b"x" * 1025)
            with pytest.raises(InvalidOperation):
                spots.request("c1", "add", object())
            assert sent_39(tap, caller) == 0
            # Untyped intent to an existing Instance Spot uses its stored type (two types).
            assert await spots.request("c1", "add", b"y").instance() == b"2"
        assert log.runs("m1") == 0 and log.runs("r1") == 1
        assert log.of("c1") == [("add", b"x"), ("add", b"y")]


async def test_s06_15_first_messages_that_fail_at_the_spot_are_typed_and_the_spot_lives_on(
    clock: object, store: CountingStore
) -> None:
    """S06-15: a cold activation's first message that is an unknown packet (NotFound), a
    handler that raises (ApplicationError) or a typed payload of the wrong class
    (InvalidOperation) ends the caller's request with that typed error, the same kinds as
    on a Ready Spot; the activation itself completed (one factory run each, the Spot is
    Ready and serves the next message), and nothing ran twice."""
    log = Log()
    async with open_cluster(
        2,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1"),
        config=lambda i: client() if i == 0 else server(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers
        cases: list[tuple[str, str, object, type[ZLinkError]]] = [
            ("u", "nope", b"", NotFound),
            ("b", "boom", b"", ApplicationError),
            ("t", "typed", Other(1), InvalidOperation),
            ("r", "typed", b"raw", InvalidOperation),
        ]
        with trio.fail_after(LONG):
            for who in (caller, host):  # remote and local callers
                for prefix, packet, payload, kind in cases:
                    sid = f"{prefix}-{'remote' if who is caller else 'local'}"
                    with pytest.raises(kind):
                        await who.spots.request(sid, packet, payload).instance("cart").timeout(10)
                    with pytest.raises(kind):  # the same kind on the Ready Spot
                        await who.spots.request(sid, packet, payload).timeout(10)
                    assert await who.spots.request(sid, "add", b"next").timeout(10) == b"1"
                    assert log.runs(sid) == 1
            assert await caller.spots.request("typed-ok", "typed", Item("k")).instance() == b"k"
            assert await host.spots.request("typed-ok2", "typed", Item("k")).instance() == b"k"
        boom = [h for h in log.handled if h[3] == "boom"]
        assert len(boom) == 4  # twice per caller, each once
        stats = spot_statistics(host)
        (cart,) = [t for t in stats.types if t.stable_type == "cart"]
        assert cart.factory_runs == 10


async def test_s06_15_an_oversized_first_reply_is_a_typed_error_and_the_spot_lives_on(
    clock: object, store: CountingStore
) -> None:
    """S06-15: a cold activation's first handler returns a reply over ``max_reply_bytes``:
    the request (remote and local caller) ends with a typed error, once, without hanging;
    the handler ran once and the Spot serves the next message in the same incarnation."""
    log = Log()
    async with open_cluster(
        2,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1"),
        config=lambda i: client() if i == 0 else server(max_reply_bytes=1024),
    ) as cluster:
        await cluster.wait_all_admitted()
        with trio.fail_after(LONG):
            for who, sid in zip(cluster.servers, ("remote", "local"), strict=True):
                with pytest.raises(ZLinkError):
                    await who.spots.request(sid, "big", b"4096").instance("cart").timeout(10)
                assert await who.spots.request(sid, "add", b"a").timeout(10) == b"1"
                assert log.of(sid) == [("big", b"4096"), ("add", b"a")]
                assert log.runs(sid) == 1


async def test_s06_13_untyped_intent_while_creating_waits_for_that_activation(
    clock: object, store: CountingStore
) -> None:
    """S06-13/S06-16: with two Instance types in the mesh, a call with ``.instance()`` (no
    type) to an id whose activation (as "cart") is in progress waits for it and is handled
    by it, exactly as the same call to the Ready Spot uses its stored type."""
    log = Log(create_gate=trio.Event())
    async with open_cluster(
        2,
        store=store,
        app=lambda i: caller_app() if i == 0 else host_app(log, "n1", instance=("cart", "bag")),
        config=lambda i: client() if i == 0 else server(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        replies: list[bytes | None] = []
        with trio.fail_after(LONG):
            async with trio.open_nursery() as nursery:

                async def first() -> None:
                    call = caller.spots.request("c1", "add", b"first").instance("cart")
                    replies.append(await call.timeout(30))

                nursery.start_soon(first)
                await log.create_entered.wait()

                async def second() -> None:
                    call = caller.spots.request("c1", "add", b"second").instance()
                    replies.append(await call.timeout(30))

                nursery.start_soon(second)
                # The second call runs until it waits for the activation in progress
                # (before the fix it failed here at once with InvalidOperation).
                await trio.testing.wait_all_tasks_blocked()
                assert log.create_gate is not None
                log.create_gate.set()
        assert log.of("c1") == [("add", b"first"), ("add", b"second")]
        assert sorted(r or b"" for r in replies) == [b"1", b"2"]


# --- §6 route cache -------------------------------------------------------------------------------


async def test_s06_17_not_found_is_never_cached_but_a_warm_type_mismatch_reads_nothing(
    clock: object, store: CountingStore
) -> None:
    """S06-17: every call to a Missing id without intent reads the Store again (NotFound
    is not cached; after another node activates it the same caller reaches it at once),
    while a warm Ready route answers TypeMismatch for another named type without a Store
    read (decisions: the cached route carries kind and stable type)."""
    log = Log()
    counting = CountingStore(store)
    async with open_cluster(
        3,
        store=store,
        app=lambda i: host_app(log, "n1", instance=("cart", "bag")) if i == 1 else caller_app(),
        config=lambda i: (
            client(location_store=counting) if i == 0 else (server() if i == 1 else client())
        ),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, _owner, other = cluster.servers
        with trio.fail_after(LONG):
            counting.reset()
            for _ in range(3):
                with pytest.raises(NotFound):
                    await caller.spots.request("c1", "add").timeout(5)
                with pytest.raises(NotFound):
                    await caller.spots.send("c1", "note").timeout(5)
            assert counting.count("read") == 6
            assert await other.spots.request("c1", "add", b"a").instance("cart") == b"1"
            assert await caller.spots.request("c1", "add", b"b").timeout(5) == b"2"
            counting.reset()
            with pytest.raises(TypeMismatch):
                await caller.spots.request("c1", "add").instance("bag").timeout(5)
            with pytest.raises(TypeMismatch):
                await caller.spots.send("c1", "note").instance("bag").timeout(5)
            assert counting.count("read") == 0
        assert log.of("c1") == [("add", b"a"), ("add", b"b")]
