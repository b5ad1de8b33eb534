"""The shared object layer is generic: a second, non-Actor kind (a User Spot kind made
here, with its own ids, refs, results and factory) gets create convergence, replay of a
retained terminal, give-back of a refused or timed-out reservation and reclaim of an
orphaned one from ``zlink_trio.objects`` alone, through the real memory Location Store.

Nothing of ``zlink_trio.actors`` is involved: the kind adapter below is everything a new
kind supplies (see the ``zlink_trio.objects`` docstring)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio.config import ObjectRole, ServerConfig
from zlink_trio.errors import (
    AlreadyExists,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    TypeMismatch,
    Unavailable,
    ZLinkError,
)
from zlink_trio.ids import (
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    SpotId,
    SpotRef,
    StableType,
    new_entry_spot_id,
)
from zlink_trio.mesh.api import NodeIdentity
from zlink_trio.objects.authority import Authority
from zlink_trio.objects.create_source import CreateSource
from zlink_trio.objects.create_target import CreateTarget
from zlink_trio.objects.destroy import Destroyer, Release, ReleaseOutcome
from zlink_trio.objects.kind import Commit, CreateOrder, Decision, Refuse
from zlink_trio.objects.reclaim import RETRY_INTERVAL, Reclaimer
from zlink_trio.objects.results import Created, CreateResult, Existing, Rejected
from zlink_trio.objects.sinks import LocalSink
from zlink_trio.observe import FlowTrace
from zlink_trio.routing.route_cache import RouteCache
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    Endpoint,
    NodeDescriptor,
    NodeRecord,
    ObjectKey,
    ObjectKind,
    OperationKey,
    OwnerFence,
    Reservation,
)
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import advance_store_clock
from zlink_trio.wire.codec import decode, encode
from zlink_trio.wire.enums import CreateState, TerminalResult
from zlink_trio.wire.records import UserSpotCreate
from zlink_trio.wire.tails import CreateTail, ReservationFence

MESH = MeshName("m")
ROOM = StableType("room")
LOBBY = StableType("lobby")


def _spot_key(spot_id: SpotId) -> ObjectKey:
    return ObjectKey.spot(spot_id.value)


def _ref(row: AuthorityRow) -> SpotRef:
    return SpotRef(
        SpotId(row.key.object_id), row.object_generation, row.owner.mesh_name, row.owner.node_rid
    )


class SpotSourceKind:
    """The caller side of a User Spot create (command 47 would carry it remotely)."""

    kind = ObjectKind.USER_SPOT

    def key(self, object_id: SpotId) -> ObjectKey:
        return _spot_key(object_id)

    def membership(self, descriptor: NodeDescriptor) -> SpotId | None:
        return None  # a Spot is nobody's member

    def existing(self, row: AuthorityRow) -> CreateResult[SpotRef]:
        return Existing(_ref(row))

    def outcome(self, tail: CreateTail) -> CreateResult[SpotRef]:
        if tail.state is CreateState.REJECTED:
            return Rejected(tail.reply)
        ref = tail.spot_ref()
        return Existing(ref) if tail.state is CreateState.EXISTING else Created(ref, tail.reply)

    def record(self, order: CreateOrder[SpotId]) -> UserSpotCreate:
        operation = order.operation
        return UserSpotCreate(
            correlation=0,
            operation_id=operation.operation_id,
            source_rid=operation.source_rid,
            source_generation=operation.source_generation,
            spot_id=order.object_id,
            stable_type=order.stable_type,
            reservation=order.fence,
            timeout_ms=order.timeout_ms,
        )


def spot_order(record: UserSpotCreate) -> CreateOrder[SpotId]:
    """The creation attempt a command 47 carries (what its inbound handler hands to
    ``CreateTarget.handle``)."""
    return CreateOrder(
        operation=OperationKey(record.source_rid, record.source_generation, record.operation_id),
        object_id=record.spot_id,
        key=_spot_key(record.spot_id),
        stable_type=record.stable_type,
        fence=record.reservation,
        timeout_ms=record.timeout_ms,
    )


@attrs.define
class _Staging:
    factory: SpotFactory
    order: CreateOrder[SpotId]
    row: AuthorityRow
    request: bytes | None
    built: object | None = None

    async def stage(self, deadline: float) -> Decision:
        factory = self.factory
        factory.runs[(self.row.key.object_id, self.row.object_generation.value)] += 1
        if factory.gate is not None:
            await factory.gate.wait()
        self.built = {"spot": self.row.key.object_id, "request": self.request}
        if self.request == b"refuse":
            return Refuse(b"no room")
        return Commit(b"welcome")

    def publish(self, committed: AuthorityRow) -> None:
        self.factory.published[committed.key.object_id] = (committed, self.built)

    def end(self) -> None:
        self.factory.ended += 1


@attrs.define
class SpotFactory:
    """The owner side: builds Spots of the registered types, refuses on request."""

    types: frozenset[StableType]
    runs: Counter[tuple[str, int]] = attrs.field(factory=Counter)
    published: dict[str, tuple[AuthorityRow, object]] = attrs.field(factory=dict)
    ended: int = 0
    gate: trio.Event | None = None

    def refuse(self, order: CreateOrder[SpotId], row: AuthorityRow) -> NotFound | None:
        if order.stable_type not in self.types:
            return NotFound(f"spot type {order.stable_type.value!r} is not registered here")
        return None

    def begin(
        self, order: CreateOrder[SpotId], row: AuthorityRow, request: bytes | None
    ) -> _Staging:
        return _Staging(self, order, row, request)


@attrs.define
class SpotHost:
    """Destroy of the Spots the factory published: the shared Store step, then drop it."""

    factory: SpotFactory

    def hosted(self, object_id: SpotId) -> AuthorityRow | None:
        published = self.factory.published.get(object_id.value)
        return None if published is None else published[0]

    def generation(self, hosted: AuthorityRow) -> ObjectGeneration:
        return hosted.object_generation

    def in_own_turn(self, object_id: SpotId) -> bool:
        return False

    async def destroy(
        self, hosted: AuthorityRow, release: Release, fence: object = None
    ) -> ZLinkError | None:
        outcome = await release(fresh=True)
        if outcome is ReleaseOutcome.GONE:
            del self.factory.published[hosted.key.object_id]
            return None
        return Unavailable(f"not released: {outcome}")


@attrs.frozen
class _Node:
    """This process's node lifecycle, as the create path sees it (its identity only:
    every target here is this node, so nothing goes over a mesh)."""

    identity: NodeIdentity


def _descriptor(rid: NodeRid, generation: NodeGeneration, **types: Any) -> NodeDescriptor:
    return NodeDescriptor(
        mesh_name=MESH,
        node_rid=rid,
        node_generation=generation,
        endpoint=Endpoint("127.0.0.1", 7000),
        object_role=ObjectRole.SERVER,
        actor_types=types.get("actor_types", frozenset()),
        spot_types=types.get("spot_types", frozenset()),
        instance_types=frozenset(),
        placement_weight=1.0,
        entry_spot_id=new_entry_spot_id("node"),
    )


@attrs.define
class Kit:
    store: MemoryLocationStore
    node: _Node
    source: CreateSource[SpotId, CreateResult[SpotRef]]
    target: CreateTarget[SpotId]
    factory: SpotFactory
    reclaimer: Reclaimer
    destroyer: Destroyer[SpotId, AuthorityRow]

    async def record(self) -> NodeRecord:
        me = self.node.identity
        (record,) = [
            r for r in await self.store.list_nodes(MESH) if r.descriptor.node_rid == me.node_rid
        ]
        return record

    async def get_or_create(
        self,
        spot: str,
        stable_type: StableType = ROOM,
        request: bytes | None = None,
        *,
        timeout: float = 5.0,
        exclusive: bool = False,
        operation_id: OperationId | None = None,
    ) -> CreateResult[SpotRef]:
        return await self.source.run(
            SpotId(spot),
            stable_type,
            MESH,
            request,
            trio.current_time() + timeout,
            exclusive=exclusive,
            operation_id=operation_id,
        )


class FlakyStore:
    """The real memory store whose next ``failures`` ``abort_creation`` calls cannot reach
    it (Unavailable, nothing applied)."""

    def __init__(self, store: MemoryLocationStore, failures: int) -> None:
        self._store = store
        self.failures = failures
        self.hide_terminal_once = False
        self.terminal_reads_failing = 0

    async def read_terminal(self, key: OperationKey) -> Any:
        """With ``hide_terminal_once``: the next read misses a terminal recorded at the
        same moment (a read that raced the give-back committing it). The next
        ``terminal_reads_failing`` reads cannot reach the Store (Unavailable)."""
        if self.terminal_reads_failing > 0:
            self.terminal_reads_failing -= 1
            await trio.lowlevel.checkpoint()
            raise Unavailable("the Store is unreachable")
        found = await self._store.read_terminal(key)
        if self.hide_terminal_once:
            self.hide_terminal_once = False
            return None
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def abort_creation(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            await trio.lowlevel.checkpoint()
            raise Unavailable("the Store is unreachable")
        return await self._store.abort_creation(*args, **kwargs)


@contextlib.asynccontextmanager
async def open_kit(store: Any) -> AsyncIterator[Kit]:
    rid, generation = NodeRid.new(), NodeGeneration.new()
    await store.register_node(
        rid,
        generation,
        [_descriptor(rid, generation, spot_types=frozenset({ROOM, LOBBY}))],
        capacity=10,
        lease_ttl=1000.0,
    )
    # Another live node hosts "room" only as an ACTOR type: placement by kind never
    # picks it for a Spot (its descriptor registers no Spot type).
    other, other_generation = NodeRid.new(), NodeGeneration.new()
    await store.register_node(
        other,
        other_generation,
        [_descriptor(other, other_generation, actor_types=frozenset({ROOM}))],
        capacity=10,
        lease_ttl=1000.0,
    )
    config = ServerConfig()
    node = _Node(NodeIdentity(rid, generation))
    authority: Authority[SpotId] = Authority(
        store, RouteCache(max_age=15.0, lease_bound=10.0), _spot_key
    )
    factory = SpotFactory(frozenset({ROOM}))  # LOBBY is advertised but not buildable
    async with trio.open_nursery() as nursery:
        reclaimer = Reclaimer(store, nursery)
        target: CreateTarget[SpotId] = CreateTarget(
            kind=factory,
            config=config,
            node=node,  # only .identity is used: every target here is this node
            store=store,
            nursery=nursery,
            authority=authority,
            reclaimer=reclaimer,
        )
        source: CreateSource[SpotId, CreateResult[SpotRef]] = CreateSource(
            kind=SpotSourceKind(),
            config=config,
            node=node,  # only .identity is used: every target here is this node
            store=store,
            target=target,
            authority=authority,
            reclaimer=reclaimer,
            flow=FlowTrace(),
        )
        destroyer: Destroyer[SpotId, AuthorityRow] = Destroyer(
            kind=SpotHost(factory),
            object_kind=ObjectKind.USER_SPOT,
            store=store,
            authority=authority,
            drain_timeout=config.drain_timeout,
            nursery=nursery,
        )
        yield Kit(store, node, source, target, factory, reclaimer, destroyer)
        nursery.cancel_scope.cancel()


@pytest.fixture
async def kit(autojump_clock: trio.testing.MockClock) -> AsyncIterator[Kit]:
    # Time-dependent (backoff, deadlines, background give-backs): on the MockClock.
    async with open_kit(MemoryLocationStore()) as kit:
        yield kit


async def test_concurrent_get_or_create_converges_on_one_factory_run(kit: Kit) -> None:
    kit.factory.gate = trio.Event()
    results: list[CreateResult[SpotRef]] = []

    async def one() -> None:
        results.append(await kit.get_or_create("lobby-1", request=b"hello"))

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(one)
        await trio.testing.wait_all_tasks_blocked()
        kit.factory.gate.set()
    created = [r for r in results if isinstance(r, Created)]
    existing = [r for r in results if isinstance(r, Existing)]
    assert len(created) == 1 and len(existing) == 7
    ref = created[0].ref
    assert created[0].reply == b"welcome"
    assert all(r.ref == ref for r in existing)
    assert ref.spot_id == SpotId("lobby-1") and ref.node_rid == kit.node.identity.node_rid
    assert sum(kit.factory.runs.values()) == 1 and kit.source.creates == 1
    row = await kit.store.read(_spot_key(SpotId("lobby-1")))
    assert row is not None and row.state is AuthorityState.READY
    assert row.kind is ObjectKind.USER_SPOT and row.membership is None
    assert row.pending_content is None and row.operation is None
    published, built = kit.factory.published["lobby-1"]
    assert published.object_generation == ref.object_generation
    assert built == {"spot": "lobby-1", "request": b"hello"}  # read back from the Store
    record = await kit.record()
    assert (record.active, record.pending) == (1, 0)
    assert kit.factory.ended == 1 and kit.target.in_flight == 0


async def test_exclusive_create_and_type_mismatch(kit: Kit) -> None:
    first = await kit.get_or_create("s", exclusive=True)
    assert isinstance(first, Created)
    with pytest.raises(AlreadyExists, match="user spot 's' already exists"):
        await kit.get_or_create("s", exclusive=True)
    with pytest.raises(TypeMismatch, match="user spot 's' exists with type 'room'"):
        await kit.get_or_create("s", LOBBY)
    assert await kit.get_or_create("s") == Existing(first.ref)


async def test_a_resubmitted_operation_gets_its_retained_terminal(kit: Kit) -> None:
    operation = OperationId.new()
    first = await kit.get_or_create("r", request=b"x", operation_id=operation)
    assert isinstance(first, Created)
    again = await kit.get_or_create("r", request=b"x", operation_id=operation)
    # The terminal record, not a fresh look at the row (which would say Existing).
    assert again == first
    assert sum(kit.factory.runs.values()) == 1
    me = kit.node.identity
    retained = await kit.store.read_terminal(
        OperationKey(me.node_rid, me.node_generation, operation)
    )
    assert retained is not None


async def test_a_refused_spot_gives_its_reservation_back(kit: Kit) -> None:
    refused = await kit.get_or_create("q", request=b"refuse")
    assert refused == Rejected(b"no room")
    assert await kit.store.read(_spot_key(SpotId("q"))) is None
    record = await kit.record()
    assert (record.active, record.pending) == (0, 0)
    assert kit.factory.published == {} and kit.target.rejected == 1
    # Another operation competes anew with its own request (no shared Rejected state).
    again = await kit.get_or_create("q", request=b"please")
    assert isinstance(again, Created)
    assert sum(kit.factory.runs.values()) == 2


async def test_a_type_this_node_cannot_build_fails_and_frees_the_id(kit: Kit) -> None:
    with pytest.raises(NotFound, match="spot type 'lobby' is not registered here"):
        await kit.get_or_create("l", LOBBY)
    assert await kit.store.read(_spot_key(SpotId("l"))) is None
    assert kit.target.failed == 1 and sum(kit.factory.runs.values()) == 0
    with pytest.raises(NotFound, match="no live node hosts user spot type 'hall'"):
        await kit.get_or_create("h", StableType("hall"))


async def test_a_factory_past_the_deadline_fails_and_gives_the_reservation_back(
    kit: Kit,
) -> None:
    kit.factory.gate = trio.Event()  # never set: the factory outlives the deadline
    with pytest.raises(DeadlineExceeded):
        await kit.get_or_create("slow", timeout=0.5)
    await trio.testing.wait_all_tasks_blocked()
    assert await kit.store.read(_spot_key(SpotId("slow"))) is None
    record = await kit.record()
    assert (record.active, record.pending) == (0, 0)
    assert kit.factory.published == {} and kit.factory.ended == 1


async def test_a_waiter_reclaims_a_reservation_whose_source_is_gone(kit: Kit) -> None:
    """A Creating row made by a node lifecycle that died is aborted by the next
    GetOrCreate that finds it stuck, which then creates the Spot itself."""
    dead, dead_generation = NodeRid.new(), NodeGeneration.new()
    await kit.store.register_node(
        dead,
        dead_generation,
        [_descriptor(dead, dead_generation)],
        capacity=1,
        lease_ttl=5.0,
    )
    me = await kit.record()
    owner = OwnerFence(
        MESH, me.descriptor.node_rid, me.descriptor.node_generation, me.lease_generation
    )
    stuck = await kit.store.reserve(
        Reservation(
            key=_spot_key(SpotId("orphan")),
            kind=ObjectKind.USER_SPOT,
            stable_type=ROOM,
            owner=owner,
            operation=OperationKey(dead, dead_generation, OperationId.new()),
        )
    )
    assert isinstance(stuck, Applied)
    await advance_store_clock(kit.store, 10.0)  # the reserving lifecycle's lease expires
    result = await kit.get_or_create("orphan")
    assert isinstance(result, Created)
    assert result.ref.object_generation != stuck.row.object_generation
    assert sum(kit.factory.runs.values()) == 1
    record = await kit.record()
    assert (record.active, record.pending) == (1, 0)


async def test_a_give_back_the_store_missed_is_settled_in_the_background(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The refused Spot's abort cannot reach the Store inline (nor in the first background
    round): the caller still gets its Rejected terminal at once, a replay of the operation
    gets the same terminal from the target while the give-back is pending, and the
    reclaimer settles it later (row gone, capacity back, terminal recorded)."""
    store = FlakyStore(MemoryLocationStore(), failures=2)
    async with open_kit(store) as kit:
        operation = OperationId.new()
        first = await kit.get_or_create("f", request=b"refuse", operation_id=operation)
        assert first == Rejected(b"no room")
        await trio.testing.wait_all_tasks_blocked()
        assert len(kit.reclaimer) == 1 and store.failures == 0
        row = await kit.store.read(_spot_key(SpotId("f")))
        assert row is not None and row.state is AuthorityState.CREATING  # not given back yet
        # The replay finds the row Creating under its own operation and drives it: the
        # target answers with the held terminal (no second factory run).
        again = await kit.get_or_create("f", request=b"refuse", operation_id=operation)
        assert again == first and sum(kit.factory.runs.values()) == 1
        await trio.sleep(RETRY_INTERVAL * 2)
        assert len(kit.reclaimer) == 0 and kit.reclaimer.settled == 1
        assert await kit.store.read(_spot_key(SpotId("f"))) is None
        record = await kit.record()
        assert (record.active, record.pending) == (0, 0)
        me = kit.node.identity
        key = OperationKey(me.node_rid, me.node_generation, operation)
        assert await kit.store.read_terminal(key) is not None  # recorded with the abort


async def test_a_replay_racing_the_give_back_leaves_no_reservation_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Regression: a re-submitted operation whose terminal was recorded just after its
    retained-terminal check reserved the id again under the same OperationId, got the old
    terminal from the target and left that new Creating row for ever (both lifecycles
    live, so no waiter's backstop aborts it)."""
    store = FlakyStore(MemoryLocationStore(), failures=1)
    async with open_kit(store) as kit:
        operation = OperationId.new()
        first = await kit.get_or_create("g", request=b"refuse", operation_id=operation)
        assert first == Rejected(b"no room")
        await trio.testing.wait_all_tasks_blocked()
        assert kit.reclaimer.settled == 1  # given back, terminal recorded
        store.hide_terminal_once = True
        again = await kit.get_or_create("g", request=b"refuse", operation_id=operation)
        assert again == first  # the operation's one terminal
        assert sum(kit.factory.runs.values()) == 1
        assert await kit.store.read(_spot_key(SpotId("g"))) is None
        record = await kit.record()
        assert (record.active, record.pending) == (0, 0)
        # The id is free: another operation creates it at once.
        assert isinstance(await kit.get_or_create("g", timeout=1.0), Created)


async def test_destroy_names_one_incarnation(kit: Kit) -> None:
    first = await kit.get_or_create("d")
    assert isinstance(first, Created)
    spot, generation = first.ref.spot_id, first.ref.object_generation
    assert await kit.destroyer.destroy(spot, generation) is True
    assert await kit.store.read(_spot_key(spot)) is None
    record = await kit.record()
    assert (record.active, record.pending) == (0, 0)
    assert await kit.destroyer.destroy(spot, generation) is False  # already gone
    second = await kit.get_or_create("d")
    assert isinstance(second, Created)
    assert second.ref.object_generation != generation
    with pytest.raises(InvalidOperation, match="user spot 'd' is now generation"):
        await kit.destroyer.destroy(spot, generation)
    row = await kit.store.read(_spot_key(spot))
    assert row is not None and row.object_generation == second.ref.object_generation


async def test_a_command_47_from_another_source_is_run_once_and_replayed(kit: Kit) -> None:
    """The target side over the wire shape: a reservation made by another (live) source
    lifecycle, carried by a command 47 that went through the wire codec, is staged and
    committed once; a replay of the same record gets the retained terminal."""
    source, source_generation = NodeRid.new(), NodeGeneration.new()
    await kit.store.register_node(
        source, source_generation, [_descriptor(source, source_generation)],
        capacity=1, lease_ttl=1000.0,
    )  # fmt: skip
    me = await kit.record()
    owner = OwnerFence(
        MESH, me.descriptor.node_rid, me.descriptor.node_generation, me.lease_generation
    )
    operation = OperationKey(source, source_generation, OperationId.new())
    content = await kit.store.put_root(b"from afar")
    reserved = await kit.store.reserve(
        Reservation(
            key=_spot_key(SpotId("remote")),
            kind=ObjectKind.USER_SPOT,
            stable_type=ROOM,
            owner=owner,
            content=content,
            operation=operation,
        )
    )
    assert isinstance(reserved, Applied)
    row = reserved.row
    fence = ReservationFence(
        expected_store_version=row.store_version,
        object_generation=row.object_generation,
        authority_owner_generation=row.owner_generation,
        target_rid=row.owner.node_rid,
        target_generation=row.owner.node_generation,
        target_owner_lease_generation=row.owner.lease_generation,
        pending_capacity_delta=1,
    )
    order = CreateOrder(operation, SpotId("remote"), row.key, ROOM, fence, 5000)
    record = SpotSourceKind().record(order)
    received = decode(encode(attrs.evolve(record, correlation=7)))
    assert isinstance(received, UserSpotCreate)
    assert spot_order(received) == order

    async def deliver() -> CreateTail:
        sink = LocalSink()
        kit.target.handle(spot_order(received), sink)
        terminal = await sink.wait()
        assert terminal.terminal_result is TerminalResult.OK
        assert isinstance(terminal.tail, CreateTail)
        return terminal.tail

    first = await deliver()
    assert first.state is CreateState.CREATED and first.reply == b"welcome"
    assert first.spot_ref() == SpotRef(
        SpotId("remote"), row.object_generation, MESH, me.descriptor.node_rid
    )
    assert kit.factory.published["remote"][1] == {"spot": "remote", "request": b"from afar"}
    assert await deliver() == first  # the replay: its retained terminal
    assert sum(kit.factory.runs.values()) == 1
    current = await kit.store.read(row.key)
    assert current is not None and current.state is AuthorityState.READY


# --- the target never answers while leaving its attempt's reservation in place -------------


async def _reserve_as(
    kit: Kit, spot: str, operation: OperationKey, *, attempt_ttl: float | None = 5.0
) -> AuthorityRow:
    """A reservation of ``spot`` on this node made under ``operation`` (what a source
    does before it sends the create), with its fence."""
    me = await kit.record()
    owner = OwnerFence(
        MESH, me.descriptor.node_rid, me.descriptor.node_generation, me.lease_generation
    )
    reserved = await kit.store.reserve(
        Reservation(
            key=_spot_key(SpotId(spot)),
            kind=ObjectKind.USER_SPOT,
            stable_type=ROOM,
            owner=owner,
            operation=operation,
            attempt_ttl=attempt_ttl,
        )
    )
    assert isinstance(reserved, Applied)
    return reserved.row


def _order(operation: OperationKey, row: AuthorityRow) -> CreateOrder[SpotId]:
    fence = ReservationFence(
        expected_store_version=row.store_version,
        object_generation=row.object_generation,
        authority_owner_generation=row.owner_generation,
        target_rid=row.owner.node_rid,
        target_generation=row.owner.node_generation,
        target_owner_lease_generation=row.owner.lease_generation,
        pending_capacity_delta=1,
    )
    return CreateOrder(operation, SpotId(row.key.object_id), row.key, ROOM, fence, 5000)


async def _deliver(kit: Kit, order: CreateOrder[SpotId]) -> Any:
    sink = LocalSink()
    kit.target.handle(order, sink)
    return await sink.wait()


async def test_an_answer_from_the_retained_terminal_gives_the_named_reservation_back(
    kit: Kit,
) -> None:
    """Regression (issue 10, path b at the target): an operation was Rejected; a
    re-submission of it reserved the id again under the same operation key and sent the
    create. The target answers with the retained terminal — and gives that new
    reservation back (a CAS on exactly its version) before answering: no Creating row, no
    pending unit. Before, it answered and left the row for ever."""
    me = kit.node.identity
    operation = OperationKey(me.node_rid, me.node_generation, OperationId.new())
    first = await kit.get_or_create("again", request=b"refuse", operation_id=operation.operation_id)
    assert first == Rejected(b"no room")
    again = await _reserve_as(kit, "again", operation)
    reply = await _deliver(kit, _order(operation, again))
    assert isinstance(reply.tail, CreateTail) and reply.tail.state is CreateState.REJECTED
    assert reply.tail.object_generation != again.object_generation  # the original one
    assert await kit.store.read(again.key) is None
    assert ((await kit.record()).active, (await kit.record()).pending) == (0, 0)
    assert sum(kit.factory.runs.values()) == 1


async def test_a_store_failure_before_the_fence_check_gives_the_reservation_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Regression (issue 10, path a at the target): the target's first Store read (the
    operation's terminal record) fails once. It answers Failed (Unavailable) and gives
    the fenced reservation back with that terminal before answering: no Creating row, no
    pending unit, and a replay of the operation gets the same terminal."""
    store = FlakyStore(MemoryLocationStore(), failures=0)
    async with open_kit(store) as kit:
        me = kit.node.identity
        operation = OperationKey(me.node_rid, me.node_generation, OperationId.new())
        row = await _reserve_as(kit, "flaky", operation)
        store.terminal_reads_failing = 1
        reply = await _deliver(kit, _order(operation, row))
        assert reply.terminal_result is TerminalResult.FAILED
        assert await kit.store.read(row.key) is None
        record = await kit.record()
        assert (record.active, record.pending) == (0, 0)
        assert await _deliver(kit, _order(operation, row)) == reply  # the recorded terminal
        assert sum(kit.factory.runs.values()) == 0


async def test_a_delivery_joining_another_reservations_attempt_gives_its_own_back(
    kit: Kit,
) -> None:
    """One operation key names two reservations at once (an OperationId re-used for two
    ids): the second delivery joins the attempt in flight and gets its terminal; its own
    reservation is given back before the answer, the first one's is committed."""
    me = kit.node.identity
    operation = OperationKey(me.node_rid, me.node_generation, OperationId.new())
    x = await _reserve_as(kit, "x", operation)
    y = await _reserve_as(kit, "y", operation)
    kit.factory.gate = trio.Event()
    replies: list[Any] = []

    async def deliver(row: AuthorityRow) -> None:
        replies.append(await _deliver(kit, _order(operation, row)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(deliver, x)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(deliver, y)
        await trio.testing.wait_all_tasks_blocked()
        kit.factory.gate.set()
    assert replies[0] == replies[1]
    assert replies[0].tail.object_id == "x"
    current = await kit.store.read(x.key)
    assert current is not None and current.state is AuthorityState.READY
    assert await kit.store.read(y.key) is None
    record = await kit.record()
    assert (record.active, record.pending) == (1, 0)


async def test_an_operation_id_reused_for_another_object_is_refused(kit: Kit) -> None:
    """A retained terminal is returned only for the object it was made for: the same
    OperationId re-submitted for another id within its retention is InvalidOperation,
    and nothing is left reserved."""
    operation = OperationId.new()
    first = await kit.get_or_create("one", operation_id=operation)
    assert isinstance(first, Created)
    with pytest.raises(InvalidOperation, match="operation id already used for user spot 'one'"):
        await kit.get_or_create("two", operation_id=operation)
    assert await kit.store.read(_spot_key(SpotId("two"))) is None
    record = await kit.record()
    assert (record.active, record.pending) == (1, 0)
