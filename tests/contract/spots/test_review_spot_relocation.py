"""Adversarial review of live Spot relocation (spec 06 §6, §6.1, §7, §8; spec 04 §6.1,
§6.7): races and bad inputs around ``server.relocate`` of a Spot, over real TCP, through
the public surface and ``zlink_trio.testing`` hooks only."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing
from spot_relocation_kit import (
    LONG,
    SpotLog,
    apps,
    instance_on,
    make_spot_reloc_app,
    owner_row,
    user_spot_on,
)

from zlink_trio import (
    App,
    InvalidOperation,
    NotConfigured,
    NotFound,
    PreserveStateWith,
    SpotContext,
    SpotCreated,
    SpotKind,
    StaleRoute,
    Unavailable,
    ZLinkError,
    on_request,
    on_send,
    on_timer,
)
from zlink_trio.ids import NodeRid, SpotId
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, FaultPlan, open_cluster
from zlink_trio.wire.commands import Command


async def test_review_source_stops_while_its_spot_move_waits_for_the_target(
    clock: object, store: CountingStore
) -> None:
    """A04-07: node 0 is stopped (a clean stop, drain) while a user ``relocate`` of its
    Instance Spot waits for the target's Restore; once the Restore ends, the Spot has one
    owner that answers, and every message sent while it was sealed ran exactly once."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "dstop", "bag", store)
        log.restore_gate = trio.Event()
        outcome: list[object] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        outcome.append(await a.relocate(SpotId(spot), to=b.identity.node_rid))
                    except ZLinkError as exc:
                        outcome.append(exc)

                nursery.start_soon(move)
                await log.restore_entered.wait()
                for i in range(3):
                    await c.spots.send(spot, "add", f"held-{i}".encode())
                nursery.start_soon(cluster.stop, 0)
                await trio.testing.wait_all_tasks_blocked()
                log.restore_gate.set()
        assert len(outcome) == 1
        try:
            reply = await c.spots.request(spot, "get").instance("bag").timeout(LONG)
        except StaleRoute:  # c's cache named the stopped node: the next call resolves
            reply = await c.spots.request(spot, "get").instance("bag").timeout(LONG)
        assert log.payloads(spot) == [f"held-{i}".encode() for i in range(3)], (reply, outcome)
        assert reply is not None and reply.startswith(b"4@node"), (reply, outcome)


async def test_review_a_timer_due_during_an_aborted_move_fires_once_on_the_source(
    clock: object, store: CountingStore
) -> None:
    """A04-07 (failure before relay-ready) and spec 06 §8 (timers move with the Spot): a
    one-shot timer that comes due while the Spot is sealed (its target's Restore held)
    fires exactly once, on the source, after the target's Restore fails; nothing fires on
    the target."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "tab", "bag", store)
        assert await b.spots.request(spot, "once", b"2").timeout(LONG) == b"ok"
        log.restore_gate = trio.Event()
        log.fail_restore = True
        errors: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                try:
                    await a.relocate(SpotId(spot), to=b.identity.node_rid)
                except ZLinkError as exc:
                    errors.append(exc)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            await trio.sleep(5)  # the timer comes due while sealed
            assert log.ticks == []
            log.restore_gate.set()
        assert len(errors) == 1
        await log.wait_for(lambda: len(log.ticks) >= 1)
        await trio.sleep(10)
        assert log.ticks == [(spot, "node0", b"ding")]
        assert await b.spots.request(spot, "timers").timeout(LONG) == b""


def _capture_failing_app(node_name: str) -> App:
    app = App()

    class Bag:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            self.seen: list[bytes] = []

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self.seen.append(payload)

        @on_request("add-req")
        async def add_req(self, payload: bytes) -> bytes:
            return payload

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return (node_name + ":" + ",".join(p.decode() for p in self.seen)).encode()

    class Adapter:
        async def capture(self, spot: Bag) -> bytes:
            raise RuntimeError("injected capture failure")

        async def restore(self, spot: Bag, payload: bytes) -> None:
            raise AssertionError("never")

    app.register_spot("bad", Bag, kind=SpotKind.INSTANCE, relocation=PreserveStateWith(Adapter()))
    return app


async def test_review_a_capture_that_raises_leaves_the_spot_on_the_source(
    clock: object, store: CountingStore
) -> None:
    """A04-07: the PreserveStateWith adapter's capture raises: ``relocate`` fails with a
    typed error, the Spot stays Ready on the source (row unchanged, no mark), what it had
    been sent before and after runs there in order, and a second ``relocate`` fails the
    same way (nothing wedged)."""
    async with open_cluster(2, store=store, app=lambda i: _capture_failing_app(f"n{i}")) as cl:
        await cl.wait_all_admitted()
        a, b = cl.servers
        spot = await instance_on(b, cl.servers, 0, "cap", "bad", store)
        before = await store.read(ObjectKey.spot(spot))
        await b.spots.send(spot, "add", b"1")
        for _ in range(2):
            with pytest.raises(ZLinkError):
                await a.relocate(SpotId(spot), to=b.identity.node_rid)
            after = await store.read(ObjectKey.spot(spot))
            assert after is not None and before is not None
            assert after.relocation is None and after.owner == before.owner
            assert after.owner_generation == before.owner_generation
        await b.spots.send(spot, "add", b"2")
        assert await b.spots.request(spot, "get").timeout(LONG) == b"n0:1,2"


def _partial_apps(log: SpotLog) -> object:
    """Node 0 registers the relocation kit's types, node 1 registers none of them."""

    def app(i: int) -> App:
        return make_spot_reloc_app(log, f"node{i}") if i == 0 else App()

    return app


async def test_review_a_target_without_the_spot_type_refuses_and_the_spot_stays(
    clock: object, store: CountingStore
) -> None:
    """Spec 06 §8: a target that does not register the Spot's type refuses the move; the
    Spot stays Ready on its owner (no relocation mark), answers, and a message sent
    meanwhile ran once there. The refusal is not a NotFound of the Spot (the Spot exists:
    what is missing is configuration on the target)."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=_partial_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "notype", "bag", store)
        with pytest.raises(NotConfigured):
            await a.relocate(SpotId(spot), to=b.identity.node_rid)
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None and row.relocation is None
        assert (await b.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node0")


async def test_review_bad_targets_are_typed_refusals(clock: object, store: CountingStore) -> None:
    """Spec 06 §8: relocate to a NodeRid that is not a node of the mesh, to the owner
    itself, or of an unknown SpotId are typed refusals and leave the Spot untouched."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "badt", "bag", store)
        with pytest.raises(Unavailable):
            await a.relocate(SpotId(spot), to=NodeRid.new())
        with pytest.raises(InvalidOperation):
            await a.relocate(SpotId(spot), to=a.identity.node_rid)
        with pytest.raises(NotFound):
            await a.relocate(SpotId("unknown-spot"), to=b.identity.node_rid)
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None and row.relocation is None
        assert (await b.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node0")


async def test_review_get_or_create_and_create_of_a_sealed_user_spot(
    clock: object, store: CountingStore
) -> None:
    """S06-09 (convergence of Create and GetOrCreate) during a move: while a User Spot is
    sealed, GetOrCreate of its SpotId from another node converges on it (no second
    incarnation, no factory run), and after the commit the Spot answers on the target
    with the same ObjectGeneration."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        ref = await user_spot_on(c, cluster.servers, 0, "goc", "hall")
        spot = ref.spot_id.value
        log.restore_gate = trio.Event()
        got: list[object] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    await a.relocate(ref, to=b.identity.node_rid)

                async def goc() -> None:
                    try:
                        got.append(await c.spots.get_or_create(spot, "hall").timeout(LONG))
                    except ZLinkError as exc:
                        got.append(exc)

                nursery.start_soon(move)
                await log.restore_entered.wait()
                runs = log.factory_runs[spot]
                nursery.start_soon(goc)
                await trio.testing.wait_all_tasks_blocked()
                log.restore_gate.set()
        assert len(got) == 1
        assert not isinstance(got[0], SpotCreated) or got[0].spot.object_generation == (
            ref.object_generation
        ), got
        assert log.factory_runs[spot] == runs
        await owner_row(store, spot, b, 2)
        reply = await c.spots.request(spot, "get").timeout(LONG)
        assert reply == f"0@node1:{ref.object_generation.value}".encode()


async def test_review_two_concurrent_moves_of_one_spot_one_wins(
    clock: object, store: CountingStore
) -> None:
    """S06-18 / spec 06 §8: two ``relocate`` calls of the same Spot at once, to two
    different targets: exactly one commits, the other is Unavailable; the row names the
    winner's target, the Spot answers there, and every message sent meanwhile ran once."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "twice", "bag", store)
        log.restore_gate = trio.Event()
        outcomes: dict[str, object] = {}
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def move(name: str, to: NodeRid) -> None:
                    try:
                        outcomes[name] = await a.relocate(SpotId(spot), to=to)
                    except ZLinkError as exc:
                        outcomes[name] = exc

                nursery.start_soon(move, "b", b.identity.node_rid)
                nursery.start_soon(move, "c", c.identity.node_rid)
                await log.restore_entered.wait()
                await c.spots.send(spot, "add", b"m")
                await trio.testing.wait_all_tasks_blocked()
                log.restore_gate.set()
        errors = [o for o in outcomes.values() if isinstance(o, ZLinkError)]
        wins = [n for n, o in outcomes.items() if not isinstance(o, ZLinkError)]
        assert len(errors) == 1 and isinstance(errors[0], Unavailable), outcomes
        (win,) = wins
        reply = await a.spots.request(spot, "get").timeout(LONG)
        assert reply.startswith(b"2@node1" if win == "b" else b"2@node2"), (reply, outcomes)
        assert log.payloads(spot) == [b"m"]


async def test_review_back_and_forth_quickly_keeps_every_message_once_in_order(
    clock: object, store: CountingStore
) -> None:
    """A04-06 / S06-18: a Spot moved node 0 → 1 → 0 → 1 back to back while node 2 keeps
    sending to it: every message runs exactly once, in the order node 2 sent them, and
    the state that moved counts them all."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "pingpong", "bag", store)
        done = trio.Event()
        sent: list[bytes] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def sender() -> None:
                    i = 0
                    while not done.is_set():
                        payload = f"m{i}".encode()
                        await c.spots.send(spot, "add", payload)
                        sent.append(payload)
                        i += 1
                        await trio.sleep(0.001)

                nursery.start_soon(sender)
                for src, dst in ((a, b), (b, a), (a, b)):
                    result = await src.relocate(SpotId(spot), to=dst.identity.node_rid)
                    assert result.committed
                done.set()
        await log.wait_for(lambda: len(log.payloads(spot)) >= len(sent))
        assert log.payloads(spot) == sent
        reply = await c.spots.request(spot, "get").timeout(LONG)
        assert reply.startswith(f"{len(sent) + 1}@node1".encode())


async def test_review_a_request_whose_deadline_passes_while_sealed(
    clock: object, store: CountingStore
) -> None:
    """A04-06 (requests with deadlines straddling the move): a request sent with a 2 s
    timeout while the Spot is sealed (its target's Restore held 5 s) ends
    DeadlineExceeded for its caller and never runs; one sent with a long timeout is
    answered once, from the target."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "ddl", "bag", store)
        log.restore_gate = trio.Event()
        results: dict[str, object] = {}
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    await a.relocate(SpotId(spot), to=b.identity.node_rid)

                async def ask(name: str, timeout: float) -> None:
                    try:
                        results[name] = await c.spots.request(
                            spot, "add-req", name.encode()
                        ).timeout(timeout)
                    except ZLinkError as exc:
                        results[name] = exc

                nursery.start_soon(move)
                await log.restore_entered.wait()
                nursery.start_soon(ask, "short", 2.0)
                nursery.start_soon(ask, "long", LONG)
                await trio.sleep(5)
                log.restore_gate.set()
        assert results["long"] == b"long", results
        assert type(results["short"]).__name__ == "DeadlineExceeded", results
        await trio.sleep(1)
        assert log.payloads(spot, "add-req") == [b"first", b"long"]


async def test_review_target_stops_before_relay_ready_the_spot_stays(
    clock: object, store: CountingStore
) -> None:
    """A04-07 (the target goes away during the move): node 1 is stopped while it restores
    a Spot moving to it; whichever way the move ends (aborted, or committed and then
    drained on), the Spot has one live owner that answers with its state, no relocation
    mark is left, and what was sent while it was sealed ran exactly once, in order."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "tstop", "bag", store)
        log.restore_gate = trio.Event()
        outcome: list[object] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        outcome.append(await a.relocate(SpotId(spot), to=b.identity.node_rid))
                    except ZLinkError as exc:
                        outcome.append(exc)

                nursery.start_soon(move)
                await log.restore_entered.wait()
                for i in range(3):
                    await c.spots.send(spot, "add", f"held-{i}".encode())
                nursery.start_soon(cluster.stop, 1)
                await trio.testing.wait_all_tasks_blocked()
                log.restore_gate.set()
        assert len(outcome) == 1, outcome
        reply = await c.spots.request(spot, "get").instance("bag").timeout(LONG)
        assert log.payloads(spot) == [f"held-{i}".encode() for i in range(3)], (reply, outcome)
        assert reply.startswith(b"4@node0") or reply.startswith(b"4@node2"), (reply, outcome)
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None and row.relocation is None


async def test_review_every_node_sends_while_the_spot_moves_back_and_forth(
    clock: object, store: CountingStore
) -> None:
    """A04-05 / A04-06 / S06-18 (sends): see
    ``test_review_every_node_requests_while_the_spot_moves_back_and_forth``."""
    await _every_node_while_moving(store, "add")


async def test_review_every_node_requests_while_the_spot_moves_back_and_forth(
    clock: object, store: CountingStore
) -> None:
    """A04-05 / A04-06 / S06-18 (requests): see ``_every_node_while_moving``."""
    await _every_node_while_moving(store, "add-req")


async def _every_node_while_moving(store: CountingStore, packet: str) -> None:
    """A04-05 / A04-06 / S06-18: while a Spot moves 0 → 1 → 0 → 1 back to back, the
    source, the target and a third node each keep sending (or requesting) to it by
    SpotId: every message runs exactly once, each sender's messages in the order it sent
    them, every request is answered with its own payload, and the moved state counts
    them all."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, f"all-{packet}", "bag", store)
        done = trio.Event()
        sent: dict[str, list[bytes]] = {"a": [], "b": [], "c": []}
        wrong: list[object] = []
        with trio.fail_after(180):
            async with trio.open_nursery() as nursery:

                async def sender(name: str, server: object) -> None:
                    i = 0
                    while not done.is_set():
                        payload = f"{name}{i}".encode()
                        if packet == "add":
                            await server.spots.send(spot, "add", payload)  # type: ignore[attr-defined]
                        else:
                            try:
                                reply = await server.spots.request(  # type: ignore[attr-defined]
                                    spot, "add-req", payload
                                ).timeout(LONG)
                            except ZLinkError as exc:
                                wrong.append((payload, exc))
                                reply = payload
                            if reply != payload:
                                wrong.append((payload, reply))
                        sent[name].append(payload)
                        i += 1
                        await trio.sleep(0.002)

                for name, server in (("a", a), ("b", b), ("c", c)):
                    nursery.start_soon(sender, name, server)
                for src, dst in ((a, b), (b, a), (a, b)):
                    await trio.sleep(0.02)
                    result = await src.relocate(SpotId(spot), to=dst.identity.node_rid)
                    assert result.committed
                await trio.sleep(0.02)
                done.set()
        total = sum(len(v) for v in sent.values())
        await log.wait_for(lambda: len(log.payloads(spot, packet)) >= total)
        assert wrong == []
        handled = log.payloads(spot, packet)
        if packet == "add-req":
            handled = [p for p in handled if p != b"first"]
        for name, payloads in sent.items():
            mine = [(p, n) for s_, k, p, n in log.handled if s_ == spot and k == packet]
            mine = [(p, n) for p, n in mine if p.startswith(name.encode())]
            assert [p for p, _ in mine] == payloads, name
        assert len(handled) == total
        reply = await c.spots.request(spot, "get").timeout(LONG)
        assert reply.startswith(f"{total + 1}@node1".encode()), reply


async def test_review_relocate_by_a_spot_ref_of_an_older_incarnation(
    clock: object, store: CountingStore
) -> None:
    """S06-09 / S06-19 (a SpotRef names one incarnation; Close never re-targets a new
    one, and neither may a move): a User Spot is closed and created again under the same
    SpotId on the same node; ``relocate`` with the SpotRef of the first incarnation is
    InvalidOperation and moves nothing — the current incarnation stays on its owner, its
    row unchanged."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        old = await user_spot_on(b, cluster.servers, 0, "reinc", "hall")
        spot = old.spot_id.value
        assert await b.spots.close(old) is True
        new = None
        for _ in range(16):
            created = await b.spots.get_or_create(spot, "hall").timeout(LONG)
            if created.spot.node_rid == a.identity.node_rid:
                new = created.spot
                break
            assert await b.spots.close(created.spot) is True
        assert new is not None and new.object_generation != old.object_generation
        row = await store.read(ObjectKey.spot(spot))
        with pytest.raises(InvalidOperation):
            await a.relocate(old, to=b.identity.node_rid)
        assert await store.read(ObjectKey.spot(spot)) == row
        assert (await b.spots.request(spot, "get").timeout(LONG)).startswith(b"0@node0")


def _periodic_app(node_name: str, ticks: list[tuple[str, float]], gate: list[trio.Event]) -> App:
    app = App()

    class Clocked:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_request("add-req")
        async def add_req(self, payload: bytes) -> bytes:
            return payload

        @on_request("start")
        async def start(self, payload: bytes) -> bytes:
            self.context.timers.every("beat", 1.0)
            return b"ok"

        @on_request("stop")
        async def stop(self, payload: bytes) -> bytes:
            return str(self.context.timers.cancel("beat")).encode()

        @on_timer("beat")
        async def beat(self, payload: bytes) -> None:
            ticks.append((node_name, trio.current_time()))

    class Adapter:
        async def capture(self, spot: Clocked) -> bytes:
            return b""

        async def restore(self, spot: Clocked, payload: bytes) -> None:
            if gate:
                await gate[0].wait()

    app.register_spot(
        "clocked", Clocked, kind=SpotKind.INSTANCE, relocation=PreserveStateWith(Adapter())
    )
    return app


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_review_a_periodic_timer_keeps_its_grid_across_a_move(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Spec 06 §8 (timers move with the Spot, registered once): a 1 s periodic timer of a
    Spot that moves (its target's Restore held 3 s) ticks on the source until the seal,
    never on the source after it, on the target after the commit at most once per period
    (the ticks missed while sealed coalesce), and its cancel on the target stops it for
    good. (Memory store: exact virtual times.)"""
    ticks: list[tuple[str, float]] = []
    gate: list[trio.Event] = []
    async with open_cluster(
        2, store=store, app=lambda i: _periodic_app(f"node{i}", ticks, gate)
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "beat", "clocked", store)
        assert await b.spots.request(spot, "start").timeout(LONG) == b"ok"
        await trio.sleep(5.5)
        before = len(ticks)
        assert before == 5 and {n for n, _ in ticks} == {"node0"}
        gate.append(trio.Event())
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await a.relocate(SpotId(spot), to=b.identity.node_rid)

            nursery.start_soon(move)
            await trio.sleep(3)
            assert len(ticks) == before  # sealed: nothing ticks
            gate[0].set()
        moved_at = trio.current_time()
        await trio.sleep(10.2)
        after = ticks[before:]
        assert {n for n, _ in after} == {"node1"}, ticks
        assert 10 <= len(after) <= 11, after
        assert all(t2 - t1 >= 0.999 for (_, t1), (_, t2) in itertools.pairwise(after)), after
        assert after[0][1] >= moved_at - 0.001
        assert await a.spots.request(spot, "stop").timeout(LONG) == b"True"
        count = len(ticks)
        await trio.sleep(5)
        assert len(ticks) == count


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_review_a_relay_ready_after_the_source_gave_up_never_makes_two_owners(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-07 (failure before relay-ready acceptance: the source stays owner): the 120 is
    2 s late on the wire and the abort (124) 5 s late; the target's Restore ends just
    after the source's ``relocation_timeout`` (the source gave up: DeadlineExceeded,
    reopened). The target must not commit over it: afterwards the row still names the
    source, only the source runs the Spot's messages, and its state is the source's.
    (Memory store: exact virtual times.)"""
    log = SpotLog()
    plan = FaultPlan(seed=31)
    async with open_cluster(3, store=store, app=apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "late", "bag", store)
        before = await store.read(ObjectKey.spot(spot))
        assert before is not None
        plan.delay(2.0, command=Command.RELOCATION_PREPARE)
        plan.delay(5.0, command=Command.RELOCATION_ABORT)
        log.restore_gate = trio.Event()
        errors: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                try:
                    await a.relocate(SpotId(spot), to=b.identity.node_rid)
                except ZLinkError as exc:
                    errors.append(exc)

            started = trio.current_time()
            nursery.start_soon(move)
            await log.restore_entered.wait()
            await trio.sleep_until(started + 10.5)  # the source's deadline passed
            log.restore_gate.set()
        assert len(errors) == 1, errors
        await trio.sleep(10)  # the target's cutover fallback and its own timeout
        await c.spots.send(spot, "add", b"after")
        await log.wait_for(lambda: len(log.payloads(spot)) == 1)
        replies = {
            (await server.spots.request(spot, "get").timeout(LONG))[:7] for server in (a, b, c)
        }
        assert replies == {b"2@node0"}, replies  # one owner answers, with its state
        assert log.nodes(spot) == {"node0"}
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None and row.owner == before.owner, row
        assert row.owner_generation == before.owner_generation


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_review_a_stale_spot_ref_after_the_follow_route_expired(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """S06-09 / S06-19 (a stale SpotRef after a move, once Message Follow is over): 40 s
    after a User Spot moved node 0 → node 1 (MessageFollowDuration 30 s), messages by
    SpotId from both nodes still reach node 1, ``find`` names node 1, and ``close`` with
    the SpotRef taken before the move closes it (True), from the old owner."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        ref = await user_spot_on(c, cluster.servers, 0, "expire", "hall")
        spot = ref.spot_id.value
        await c.spots.send(spot, "add", b"1")
        assert (await c.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node0")
        await a.relocate(ref, to=b.identity.node_rid)
        await trio.sleep(40)
        for server in (a, b, c):
            assert (await server.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node1")
        found = await a.spots.find(spot)
        assert found is not None and found.node_rid == b.identity.node_rid
        assert await a.spots.close(ref) is True
        assert await c.spots.find(spot) is None


async def test_review_a_local_send_on_the_target_during_its_restore_runs_once(
    clock: object, store: CountingStore
) -> None:
    """A04-04 / A04-06 (exactly once): a Spot moves node 0 → node 1 and then back to
    node 0; while node 0 restores it (its Restore held), a local caller on node 0 (whose
    route cache still names node 0) sends to it and requests from it: each runs exactly
    once, on node 0, after the commit."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "local", "bag", store)
        assert (await a.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node0")
        await a.relocate(SpotId(spot), to=b.identity.node_rid)
        await a.spots.send(spot, "add", b"via-follow")
        log.restore_gate = trio.Event()
        log.restore_entered = trio.Event()
        replies: list[object] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    await b.relocate(SpotId(spot), to=a.identity.node_rid)

                async def ask() -> None:
                    replies.append(await a.spots.request(spot, "add-req", b"r").timeout(LONG))

                nursery.start_soon(move)
                await log.restore_entered.wait()
                await a.spots.send(spot, "add", b"x")
                nursery.start_soon(ask)
                await trio.testing.wait_all_tasks_blocked()
                log.restore_gate.set()
        await log.wait_for(lambda: len(log.payloads(spot)) >= 2)
        await trio.sleep(1)
        assert log.payloads(spot) == [b"via-follow", b"x"]
        assert replies == [b"r"]
        assert log.payloads(spot, "add-req") == [b"first", b"r"]
        assert (await b.spots.request(spot, "get").timeout(LONG)).startswith(b"4@node0")


async def test_review_held_requests_of_an_aborted_move_are_answered_once_on_the_source(
    clock: object, store: CountingStore
) -> None:
    """A04-07 / S06-18 (an abort before relay-ready returns the held ingress to the source
    queue): requests from the source itself and from a third node, held while the
    target's Restore runs and then fails, are each answered once, by the source."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "heldreq", "bag", store)
        log.restore_gate = trio.Event()
        log.fail_restore = True
        replies: dict[str, object] = {}
        errors: list[BaseException] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        await a.relocate(SpotId(spot), to=b.identity.node_rid)
                    except ZLinkError as exc:
                        errors.append(exc)

                async def ask(name: str, server: object) -> None:
                    replies[name] = await server.spots.request(  # type: ignore[attr-defined]
                        spot, "add-req", name.encode()
                    ).timeout(LONG)

                nursery.start_soon(move)
                await log.restore_entered.wait()
                nursery.start_soon(ask, "ra", a)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(ask, "rc", c)
                await trio.testing.wait_all_tasks_blocked()
                log.restore_gate.set()
        assert len(errors) == 1
        assert replies == {"ra": b"ra", "rc": b"rc"}
        # (two senders: their relative arrival order is not observable here)
        assert sorted(log.payloads(spot, "add-req")) == [b"first", b"ra", b"rc"]
        assert log.nodes(spot, "add-req") == {"node0"}


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
@pytest.mark.parametrize("fail", [True, False], ids=["aborted", "committed"])
async def test_review_local_senders_on_the_source_at_the_seal_edges_are_never_refused(
    clock: object, store: CountingStore, fail: bool
) -> None:
    """S06-18 (ingress that arrives at a sealed source goes to the relocation hold; an
    abort returns it in order; after acceptance it follows): many local senders on the
    source keep sending while its Spot's move is aborted (the target's Restore fails) or
    committed. No send is refused, and every one runs exactly once. (Memory store: the
    interleaving is the same on every run.)"""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "edges", "bag", store)
        log.fail_restore = fail
        done = trio.Event()
        sent: list[bytes] = []
        refused: list[object] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def sender(k: int) -> None:
                    for i in range(400):
                        if done.is_set():
                            return
                        payload = f"s{k}-{i}".encode()
                        try:
                            await a.spots.send(spot, "add", payload)
                            sent.append(payload)
                        except ZLinkError as exc:
                            refused.append((payload, exc))
                        if i % 50 == 49:
                            await trio.sleep(0.001)

                for k in range(8):
                    nursery.start_soon(sender, k)
                await trio.lowlevel.checkpoint()
                try:
                    await a.relocate(SpotId(spot), to=b.identity.node_rid)
                except ZLinkError:
                    assert fail
                await trio.sleep(0.01)
                done.set()
        assert refused == []
        await log.wait_for(lambda: len(log.payloads(spot)) >= len(sent))
        assert sorted(log.payloads(spot)) == sorted(sent)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_review_a_restore_slower_than_the_relocation_timeout(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-07 (121's deadline): the target's Restore takes 15 s (relocation_timeout 10 s):
    ``relocate`` ends DeadlineExceeded, the Spot stays Ready on the source with the work
    held meanwhile run there once, in order; the target discards its shell (nothing runs
    there), no mark is left, and the next move commits. (Memory store: exact times.)"""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "slow", "bag", store)
        log.restore_gate = trio.Event()
        errors: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                try:
                    await a.relocate(SpotId(spot), to=b.identity.node_rid)
                except ZLinkError as exc:
                    errors.append(exc)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            for i in range(3):
                await b.spots.send(spot, "add", f"held-{i}".encode())
            await trio.sleep(15)
            log.restore_gate.set()
        assert len(errors) == 1 and type(errors[0]).__name__ == "DeadlineExceeded", errors
        await log.wait_for(lambda: len(log.payloads(spot)) == 3)
        await trio.sleep(5)
        assert log.payloads(spot) == [f"held-{i}".encode() for i in range(3)]
        assert log.nodes(spot) == {"node0"}
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None and row.relocation is None
        assert row.owner.node_rid == a.identity.node_rid
        log.restore_gate = None
        assert (await a.relocate(SpotId(spot), to=b.identity.node_rid)).committed
        assert (await b.spots.request(spot, "get").timeout(LONG)).startswith(b"4@node1")


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_review_a_move_whose_seal_waits_past_its_deadline_leaves_the_spot_open(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-07 (the move's deadline before relay-ready) while its seal turn still waits: the
    Spot's handler runs 15 s (relocation_timeout 10 s), so the seal turn queued behind it
    never ran when ``relocate`` gave up (DeadlineExceeded). Once the handler ends, the
    Spot is not sealed by that stale turn: what was sent meanwhile and afterwards runs on
    the source, in order, no mark is left, and the next move commits. (Memory store.)"""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "stale-seal", "bag", store)
        log.gate = trio.Event()
        errors: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await b.spots.request(spot, "hold").timeout(LONG)

            async def move() -> None:
                try:
                    await a.relocate(SpotId(spot), to=b.identity.node_rid)
                except ZLinkError as exc:
                    errors.append(exc)

            nursery.start_soon(hold)
            await log.entered.wait()
            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()
            await b.spots.send(spot, "add", b"during")
            await trio.sleep(15)
            assert len(errors) == 1, errors
            log.gate.set()
        with trio.fail_after(30):
            await b.spots.send(spot, "add", b"after")
            await log.wait_for(lambda: len(log.payloads(spot)) == 2)
        assert log.payloads(spot) == [b"during", b"after"]
        assert log.nodes(spot) == {"node0"}
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None and row.relocation is None
        assert (await a.relocate(SpotId(spot), to=b.identity.node_rid)).committed
        assert (await b.spots.request(spot, "get").timeout(LONG)).startswith(b"4@node1")


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_review_a_timer_due_during_a_committed_move_fires_once_on_the_target(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Spec 06 §8 (timers move with the Spot): a one-shot timer that comes due while the
    Spot is sealed (its target's Restore held 5 s) fires exactly once, on the target,
    after the commit; never on the source; and it is no longer registered afterwards.
    (Memory store: exact times.)"""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "tcommit", "bag", store)
        assert await b.spots.request(spot, "once", b"2").timeout(LONG) == b"ok"
        log.restore_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await a.relocate(SpotId(spot), to=b.identity.node_rid)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            await trio.sleep(5)
            assert log.ticks == []
            log.restore_gate.set()
        await log.wait_for(lambda: len(log.ticks) >= 1)
        await trio.sleep(10)
        assert log.ticks == [(spot, "node1", b"ding")]
        assert await b.spots.request(spot, "timers").timeout(LONG) == b""


@pytest.mark.parametrize("delay", [0, 1, 2, 3])
async def test_review_close_and_relocate_of_one_user_spot_at_once(
    clock: object, store: CountingStore, delay: int
) -> None:
    """S06-19 (Close during a move seal → Unavailable) racing the start of the move: a
    ``close`` of a User Spot's SpotRef from another node and its ``relocate`` start
    together (``delay`` checkpoints apart). Exactly one wins: either the Spot is closed
    (gone everywhere, the move refused) or it moved (the close refused Unavailable, the
    Spot answers on the target) — never both, never neither with a wedged Spot."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        ref = await user_spot_on(b, cluster.servers, 0, f"cr{delay}", "hall")
        spot = ref.spot_id.value
        results: dict[str, object] = {}
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        results["move"] = await a.relocate(ref, to=b.identity.node_rid)
                    except ZLinkError as exc:
                        results["move"] = exc

                async def close() -> None:
                    for _ in range(delay):
                        await trio.lowlevel.checkpoint()
                    try:
                        results["close"] = await b.spots.close(ref)
                    except ZLinkError as exc:
                        results["close"] = exc

                nursery.start_soon(move)
                nursery.start_soon(close)
        moved = not isinstance(results["move"], ZLinkError)
        closed = results["close"] is True
        assert moved != closed, results
        if closed:
            assert await a.spots.find(spot) is None
        else:
            assert isinstance(results["close"], Unavailable), results
            reply = await a.spots.request(spot, "get").timeout(LONG)
            assert reply.startswith(b"0@node1"), reply
