"""Adversarial review probes of User Spots (spec 06 §2, §3, §3.1-§3.3, §3.4, §7, §7.1;
checklist S06-01 … S06-08, S06-19 without relocation, S06-20, S06-21), through the public
surface only (``server.spots``, ``App`` registration, ``zlink_trio.testing``), on two
and three nodes over real TCP, through both stores.

Tests marked ``xfail(strict=True, reason="BUG: ...")`` pin a behaviour that contradicts
the spec or docs/api.md (the reason names it); the others are regression guards."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio import (
    AlreadyExists,
    App,
    ApplicationError,
    Approve,
    ConfigurationError,
    DeadlineExceeded,
    DisableRelocation,
    InvalidArgument,
    InvalidId,
    InvalidOperation,
    MeshConfig,
    NotFound,
    ObjectRole,
    OperationId,
    PerActor,
    PreserveStateWith,
    RecreateOnRelocation,
    Reject,
    ServerConfig,
    SpotCallback,
    SpotContext,
    SpotCreated,
    SpotExisting,
    SpotId,
    SpotKind,
    SpotRef,
    SpotRejected,
    SpotWide,
    on_lifecycle,
    on_request,
    open_server,
)
from zlink_trio.ids import NodeRid
from zlink_trio.store.api import AuthorityState, ObjectKey
from zlink_trio.testing import (
    CountingStore,
    hosted_spots,
    open_cluster,
    published_descriptors,
    set_spot_id_source,
    spot_statistics,
)

LONG = 30.0
MIB = 1024 * 1024
MUTATIONS = ("reserve", "commit_ready", "abort_creation", "put_root", "begin_closing", "release")


@attrs.define
class Probe:
    """What the probe Spots saw, across every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    callbacks: dict[str, int] = attrs.field(factory=dict)
    requests: dict[str, list[bytes | None]] = attrs.field(factory=dict)
    closes: list[str] = attrs.field(factory=list)
    gate: trio.Event = attrs.field(factory=trio.Event)
    entered: trio.Event = attrs.field(factory=trio.Event)
    waiting: int = 0

    def runs(self, spot_id: str) -> int:
        return self.factory_runs.get(spot_id, 0)

    @property
    def total_runs(self) -> int:
        return sum(self.factory_runs.values())


def probe_class(probe: Probe) -> type:
    """A Spot whose CREATE callback does what its creation request says:
    ``reject`` → Reject(b"no:<n>") (n: the callback's count for the id), ``boom`` →
    RuntimeError, ``notfound`` → NotFound, ``gate`` / ``gate-reject`` → wait for
    ``probe.gate`` first, ``sleep:<s>`` → sleep, ``badret`` → return 42, ``strreply`` →
    Approve(reply="text"), ``bigreply`` → an Approve reply of 1 MiB + 1; anything else →
    Approve(b"ok:" + request[:16])."""

    class Room:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            key = context.spot_id.value
            probe.factory_runs[key] = probe.factory_runs.get(key, 0) + 1

        @on_lifecycle(SpotCallback.CREATE)
        async def created(self, request: bytes | None) -> Any:
            key = self.context.spot_id.value
            n = probe.callbacks[key] = probe.callbacks.get(key, 0) + 1
            probe.requests.setdefault(key, []).append(request)
            if request is not None and request.startswith(b"gate"):
                probe.waiting += 1
                probe.entered.set()
                await probe.gate.wait()
                probe.waiting -= 1
                request = request[len(b"gate-") :] or b""
            if request == b"reject":
                return Reject(reply=b"no:%d" % n)
            if request == b"boom":
                raise RuntimeError("the create callback failed on purpose")
            if request == b"notfound":
                raise NotFound("the application says not found")
            if request is not None and request.startswith(b"sleep:"):
                await trio.sleep(float(request[6:]))
            if request == b"badret":
                return 42
            if request == b"strreply":
                return Approve(reply="text")  # type: ignore[arg-type]
            if request == b"bigreply":
                return Approve(reply=b"r" * (MIB + 1))
            return Approve(reply=b"ok:" + (request or b"")[:16])

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            probe.closes.append(self.context.spot_id.value)

        @on_request("ping")
        async def ping(self, payload: bytes) -> bytes:
            return payload

    return Room


def probe_app(probe: Probe, *, types: tuple[str, ...] = ("room",)) -> App:
    app = App()
    cls = probe_class(probe)
    for st in types:
        app.register_spot(st, cls, execution=SpotWide(), relocation=DisableRelocation())
    return app


def host0(probe: Probe, **kwargs: Any) -> Any:
    """``app(index)``: node 0 hosts the probe types, the others only call."""
    return lambda i: probe_app(probe, **kwargs) if i == 0 else App()


def everyone(probe: Probe, **kwargs: Any) -> Any:
    """``app(index)``: every node hosts the probe types."""
    return lambda i: probe_app(probe, **kwargs)


def _mutations(store: CountingStore) -> int:
    return sum(store.count(m) for m in MUTATIONS)


async def _spot_rows(store: CountingStore) -> list[Any]:
    from zlink_trio.store.api import Namespace

    return [
        r
        for r in await store.list_rows(Namespace.SPOT, after=None, limit=1000)
        if r.kind.name != "ENTRY_SPOT"
    ]


# --- §2: ids ---------------------------------------------------------------------------


async def test_s06_01_id_edges_at_the_byte_bounds(clock: object, store: CountingStore) -> None:
    """S06-01 (§2 "UTF-8 encoded 크기 1..255 bytes", case-sensitive, no normalization):
    255 bytes made of 4-byte characters and a 1-byte tail, a U+0000 character and
    composed vs decomposed "é" are ids (each its own Spot, found again by its exact text
    and by its UTF-8 bytes); 256 bytes of 4-byte characters, an invalid UTF-8 byte string
    (overlong, truncated) and a non-text value are InvalidId with no Store call."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        emoji = "\U0001f600" * 63 + "abc"
        assert len(emoji.encode()) == 255
        ids = [emoji, "nul\x00inside", "caf\u00e9", "cafe\u0301", "CAFE\u0301"]
        refs = {}
        for spot_id in ids:
            created = await spots.get_or_create(spot_id, "room").timeout(LONG)
            assert isinstance(created, SpotCreated), spot_id
            assert created.spot.spot_id.value == spot_id
            refs[spot_id] = created.spot
        for spot_id in ids:
            assert await spots.find(spot_id) == refs[spot_id]
            assert await spots.find(spot_id.encode()) == refs[spot_id]  # type: ignore[arg-type]
            again = await spots.get_or_create(spot_id.encode(), "room").timeout(LONG)  # type: ignore[arg-type]
            assert again == SpotExisting(refs[spot_id])
        assert probe.total_runs == len(ids)
        store.reset()
        for bad in ("\U0001f600" * 64, b"\xc0\xaf", b"ab\xe2\x82", 42, None):
            with pytest.raises(InvalidId):
                spots.get_or_create(bad, "room")  # type: ignore[arg-type]
            with pytest.raises(InvalidId):
                await spots.find(bad)  # type: ignore[arg-type]
        for bad_type in ("", "t" * 256, b"\xff"):
            with pytest.raises(InvalidId):
                spots.get_or_create("fine", bad_type)  # type: ignore[arg-type]
            with pytest.raises(InvalidId):
                spots.create(bad_type)  # type: ignore[arg-type]
        with pytest.raises(InvalidId):
            spots.get_or_create("fine", "room").in_mesh("")
        assert _mutations(store) == 0 and store.count("read") == 0


async def test_s06_02_reserved_shape_near_misses(clock: object, store: CountingStore) -> None:
    """S06-02 (§2.1): only an exact ``<prefix>-entry-<lowercase uuid4>`` is refused
    (InvalidOperation, no Store call, no factory) -- a multi-line prefix and a prefix that
    itself contains "-entry-" included; near misses are ordinary ids: the UUID's version
    or variant nibble wrong, "ENTRY", a trailing newline or character, braces, a missing
    hyphen."""
    probe = Probe()
    u = str(uuid.uuid4())
    reserved = [f"a\nb-entry-{u}", f"x-entry-y-entry-{u}", f"é-entry-{u}"]
    variant_c = u[:19] + "c" + u[20:]
    version_5 = u[:14] + "5" + u[15:]
    near = [
        f"x-entry-{variant_c}",
        f"x-entry-{version_5}",
        f"x-ENTRY-{u}",
        f"x-entry-{u}\n",
        f"x-entry-{u}x",
        f"x-entry-{{{u}}}",
        f"x-entry-{u.replace('-', '', 1)}",
        f"x_entry-{u}",
    ]
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        store.reset()
        for spot_id in reserved:
            with pytest.raises(InvalidOperation, match="reserved Entry Spot shape"):
                await spots.get_or_create(spot_id, "room").timeout(LONG)
        assert _mutations(store) == 0 and store.count("read") == 0
        assert probe.total_runs == 0
        for spot_id in near:
            created = await spots.get_or_create(spot_id, "room").timeout(LONG)
            assert isinstance(created, SpotCreated), spot_id
        assert probe.total_runs == len(near)


async def test_s06_02_a_live_entry_spot_id_is_not_a_user_spot(
    clock: object, store: CountingStore
) -> None:
    """S06-02 / §7: a live node's Entry Spot id is not a User Spot: find is None (no
    User/Instance authority), query never lists it, and a close of a SpotRef naming it
    (even with its real generation) is InvalidOperation and leaves the Entry claim."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        (descriptor, *_) = [
            d for d in await published_descriptors(cluster.servers[0]) if d.entry_spot_id
        ]
        entry = descriptor.entry_spot_id
        spots = cluster.servers[1].spots
        assert await spots.find(entry) is None
        page = await spots.query(limit=1000)
        assert page.spots == () and page.next_after is None
        row = await store.read(ObjectKey.spot(entry.value))
        assert row is not None
        ref = SpotRef(entry, row.object_generation, descriptor.mesh_name, descriptor.node_rid)
        with pytest.raises(InvalidOperation):
            await spots.close(ref)
        after = await store.read(ObjectKey.spot(entry.value))
        assert after == row


# --- §3: create / get_or_create --------------------------------------------------------


async def test_s06_07_create_type_replayed_with_its_operation_id_gets_its_terminal(
    clock: object, store: CountingStore
) -> None:
    """S06-07 (§3.2 "동일한 operation ID가 재전달된 경우에만 retained terminal result를
    재전송한다"; docs/api.md: ".operation_id(OperationId) re-submits an earlier create
    ... the result is that terminal"): ``create(type).operation_id(op)`` re-submitted with
    the same op (a retry after a lost answer) gets the ORIGINAL Created (same SpotRef and
    reply) and runs no factory again."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        op = OperationId.new()
        first = await spots.create("room").request(b"one").operation_id(op).timeout(LONG)
        assert isinstance(first, SpotCreated)
        again = await spots.create("room").request(b"one").operation_id(op).timeout(LONG)
        assert again == first
        assert probe.total_runs == 1


async def test_s06_07_create_type_replay_overlapping_the_original(
    clock: object, store: CountingStore
) -> None:
    """S06-07 (§3.2; docs/api.md "this holds for a re-submission that overlaps the
    original too (it gets the original Created, never AlreadyExists/Existing)"): the
    original ``create(type).operation_id(op)`` waits in its create callback while the
    same op is re-submitted from the same node: both end with the one Created, one
    reservation, one factory run, and no Creating row is left behind."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        op = OperationId.new()
        results: list[object] = []

        async def submit() -> None:
            call = spots.create("room").request(b"gate").operation_id(op)
            try:
                results.append(await call.timeout(LONG))
            except InvalidOperation as exc:
                results.append(exc)

        store.reset()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit)
            await probe.entered.wait()
            nursery.start_soon(submit)
            await trio.testing.wait_all_tasks_blocked()
            probe.gate.set()
        rows = await _spot_rows(store)
        assert [r.state for r in rows] == [AuthorityState.READY]
        assert probe.total_runs == 1
        assert store.count("reserve") == 1
        assert len(results) == 2 and results[0] == results[1]
        assert isinstance(results[0], SpotCreated)


async def test_s06_07_get_or_create_replays(clock: object, store: CountingStore) -> None:
    """S06-07: a get_or_create re-submitted with its operation_id gets its retained
    terminal and nothing runs again: its Created (with the reply, not Existing), a failed
    attempt's error of the same kind (the application's exception: ApplicationError);
    the same op on another id is InvalidOperation; a different op after the failure is
    a fresh attempt."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        op = OperationId.new()
        first = await spots.get_or_create("g", "room").request(b"x").operation_id(op)
        assert first == SpotCreated(first.spot, b"ok:x")  # type: ignore[union-attr]
        again = await spots.get_or_create("g", "room").request(b"x").operation_id(op)
        assert again == first
        with pytest.raises(InvalidOperation, match="operation id already used"):
            await spots.get_or_create("other", "room").operation_id(op).timeout(LONG)
        assert probe.runs("other") == 0
        failed = OperationId.new()
        with pytest.raises(ApplicationError, match="RuntimeError"):
            await spots.get_or_create("f", "room").request(b"boom").operation_id(failed)
        with pytest.raises(ApplicationError, match="RuntimeError"):
            await spots.get_or_create("f", "room").request(b"ok").operation_id(failed)
        assert probe.runs("f") == 1 and probe.runs("g") == 1
        assert await spots.find("f") is None
        fresh = await spots.get_or_create("f", "room").request(b"ok").timeout(LONG)
        assert isinstance(fresh, SpotCreated) and probe.runs("f") == 2


async def test_s06_07_an_overlapping_get_or_create_replay_gets_the_original_created(
    clock: object, store: CountingStore
) -> None:
    """S06-07 (docs/api.md operation_id): a get_or_create re-submitted with the same op
    while the original waits in its create callback gets the original Created (never
    Existing), with one factory run and one reservation."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        op = OperationId.new()
        results: list[object] = []

        async def submit() -> None:
            call = spots.get_or_create("o", "room").request(b"gate").operation_id(op)
            results.append(await call.timeout(LONG))

        store.reset()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit)
            await probe.entered.wait()
            nursery.start_soon(submit)
            await trio.testing.wait_all_tasks_blocked()
            probe.gate.set()
        assert len(results) == 2 and results[0] == results[1]
        assert isinstance(results[0], SpotCreated)
        assert probe.runs("o") == 1 and store.count("reserve") == 1


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_07_every_node_hosts_and_calls_one_factory_run(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-07: every node hosts the type and 4 calls per node race for one id (each
    node may place the reservation on a different target): exactly one Created, the
    rest Existing of the same SpotRef, one factory run and one create callback across
    the cluster, one reservation applied."""
    probe = Probe()
    async with open_cluster(nodes, store=store, app=everyone(probe)) as cluster:
        await cluster.wait_all_admitted()
        store.reset()
        results: list[object] = []

        async def one(index: int) -> None:
            server = cluster.servers[index % nodes]
            call = server.spots.get_or_create("race", "room").request(b"gate-%d" % index)
            results.append(await call.timeout(LONG))

        async with trio.open_nursery() as nursery:
            for index in range(4 * nodes):
                nursery.start_soon(one, index)
            await probe.entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            probe.gate.set()
        created = [r for r in results if isinstance(r, SpotCreated)]
        assert len(created) == 1
        assert all(r == SpotExisting(created[0].spot) for r in results if r is not created[0])
        assert probe.runs("race") == 1 and probe.callbacks["race"] == 1
        assert sum(spot_statistics(s).creates for s in cluster.servers) == 1


async def test_s06_07_rejecting_waiters_each_get_their_own_rejected(
    clock: object, store: CountingStore
) -> None:
    """S06-07 (§3.2 "서로 다른 operation은 앞선 attempt의 Rejected state와 application
    reply를 공유하지 않는다"): three callers on three nodes each ask for a rejected id;
    each competes for its own reservation after the previous rejection, so each gets a
    SpotRejected of its OWN attempt (a distinct generation, the reply its own callback
    made), the factory runs three times, and nothing is left in the Store."""
    probe = Probe()
    async with open_cluster(3, store=store, app=everyone(probe)) as cluster:
        await cluster.wait_all_admitted()
        results: list[object] = []

        async def one(index: int) -> None:
            call = cluster.servers[index].spots.get_or_create("no", "room")
            results.append(await call.request(b"gate-reject").timeout(LONG))

        async with trio.open_nursery() as nursery:
            for index in range(3):
                nursery.start_soon(one, index)
            while probe.runs("no") < 3:
                await probe.entered.wait()
                probe.entered = trio.Event()
                await trio.testing.wait_all_tasks_blocked()
                probe.gate.set()
                probe.gate = trio.Event()
            probe.gate.set()
        assert len(results) == 3 and all(isinstance(r, SpotRejected) for r in results)
        generations = {r.spot.object_generation for r in results}  # type: ignore[attr-defined]
        assert len(generations) == 3
        assert sorted(r.reply for r in results) == [b"no:1", b"no:2", b"no:3"]  # type: ignore[attr-defined]
        assert probe.runs("no") == 3
        assert await _spot_rows(store) == []


async def test_s06_07_a_waiter_after_a_failed_attempt_competes_afresh(
    clock: object, store: CountingStore
) -> None:
    """S06-07 (§3.2 "Rejected·failure cleanup으로 Missing이 되면 ... 새 reservation을
    경쟁"): the first attempt's create callback raises; a get_or_create that waited on it
    does not share that failure: it runs the factory with its own request (Created)."""
    probe = Probe()
    async with open_cluster(3, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        outcome: dict[str, object] = {}

        async def first() -> None:
            try:
                await (
                    cluster.servers[1]
                    .spots.get_or_create("fx", "room")
                    .request(b"gate-boom")
                    .timeout(LONG)
                )
            except ApplicationError as exc:
                outcome["first"] = exc

        async def second() -> None:
            call = cluster.servers[2].spots.get_or_create("fx", "room").request(b"mine")
            outcome["second"] = await call.timeout(LONG)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            await probe.entered.wait()
            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            probe.gate.set()
        assert isinstance(outcome["first"], ApplicationError)
        second_result = outcome["second"]
        assert isinstance(second_result, SpotCreated) and second_result.reply == b"ok:mine"
        assert probe.requests["fx"] == [b"gate-boom", b"mine"]


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_s06_05_deadline_covers_the_create_callback(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """S06-05 / S06-07 (§3 "Terminal submit을 시작할 때 ... Ready barrier 전체에 적용할
    end-to-end deadline 하나를 고정한다"): a create callback slower than the call's
    timeout ends the call with DeadlineExceeded at exactly submit + timeout, publishes
    nothing, leaves no row (the next call creates afresh); a caller's own shorter
    ``fail_after`` ends it with TooSlowError at its own deadline instead, and its
    reservation is given back too."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        start = trio.current_time()
        with pytest.raises(DeadlineExceeded):
            await spots.get_or_create("slow", "room").request(b"sleep:100").timeout(2)
        assert trio.current_time() == start + 2
        await trio.sleep(200)  # the first attempt's callback would have ended by now
        assert hosted_spots(cluster.servers[0]) == ()
        assert await spots.find("slow") is None
        assert await _spot_rows(store) == []
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError), trio.fail_after(3):
            await spots.get_or_create("slow", "room").request(b"sleep:100").timeout(LONG)
        assert trio.current_time() == start + 3
        await trio.sleep(200)
        assert await _spot_rows(store) == []
        created = await spots.get_or_create("slow", "room").request(b"fast").timeout(LONG)
        assert isinstance(created, SpotCreated)
        assert probe.runs("slow") == 3
        assert hosted_spots(cluster.servers[0]) == (created.spot,)


async def test_s06_05_mesh_selection_from_a_client_only_node(
    clock: object, store: CountingStore
) -> None:
    """S06-05 (§3.1): a node whose only mesh has the Object CLIENT role hosts nothing
    yet creates (placed on a server of that mesh); an explicit in_mesh of a mesh this
    node does not have is NotFound; a Spot type no node hosts is NotFound -- nothing
    reserved for either."""
    probe = Probe()

    def config(index: int) -> ServerConfig:
        role = ObjectRole.SERVER if index == 0 else ObjectRole.CLIENT
        return ServerConfig(
            meshes=[MeshConfig(name="m", object_role=role)], cluster_secret=b"k" * 32
        )

    async with open_cluster(2, store=store, app=host0(probe), config=config) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        created = await spots.create("room").timeout(LONG)
        assert isinstance(created, SpotCreated)
        assert created.spot.node_rid == cluster.servers[0].identity.node_rid
        store.reset()
        with pytest.raises(NotFound):
            await spots.create("room").in_mesh("elsewhere").timeout(LONG)
        with pytest.raises(NotFound):
            await spots.get_or_create("x", "nobody-hosts-this").timeout(LONG)
        assert store.count("reserve") == 0 and store.count("put_root") == 0


async def test_s06_05_creation_request_bytes(clock: object, store: CountingStore) -> None:
    """S06-05 (§3.1 "Encoded creation request는 최대 1 MiB"): an empty request reaches the
    create callback as ``b""`` (not None: no request is None); a bytearray and a
    memoryview of exactly 1 MiB are accepted as their bytes (remote owner: read back from
    the Store); 1 MiB + 1 as a bytearray is InvalidOperation with nothing reserved; a
    ``str`` request is InvalidOperation at the option."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        empty = await spots.get_or_create("empty", "room").request(b"").timeout(LONG)
        assert isinstance(empty, SpotCreated) and empty.reply == b"ok:"
        none = await spots.get_or_create("none", "room").timeout(LONG)
        assert isinstance(none, SpotCreated)
        assert probe.requests["empty"] == [b""] and probe.requests["none"] == [None]
        big = await spots.get_or_create("ba", "room").request(bytearray(b"a" * MIB))
        assert isinstance(big, SpotCreated) and probe.requests["ba"] == [b"a" * MIB]
        view = await spots.get_or_create("mv", "room").request(memoryview(b"m" * MIB))
        assert isinstance(view, SpotCreated) and probe.requests["mv"] == [b"m" * MIB]
        store.reset()
        with pytest.raises(InvalidOperation, match="exceeds"):
            await spots.get_or_create("over", "room").request(bytearray(MIB + 1)).timeout(LONG)
        assert store.count("reserve") == 0 and store.count("put_root") == 0
        with pytest.raises(InvalidOperation):
            spots.get_or_create("s", "room").request("text")  # type: ignore[arg-type]


async def test_s06_05_a_misbehaving_create_callback_fails_its_create_only(
    clock: object, store: CountingStore
) -> None:
    """§3.2 / docs/api.md (create errors: "ApplicationError (factory or OnCreateActor
    raised)"): a create callback that raises ends the create with ApplicationError; one
    that raises a ZLinkError ends it with that kind; the node lives on and the id is
    free afterwards (no row left)."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        with pytest.raises(ApplicationError, match="RuntimeError"):
            await spots.get_or_create("cb", "room").request(b"boom").timeout(LONG)
        with pytest.raises(NotFound, match="application says"):
            await spots.get_or_create("cb", "room").request(b"notfound").timeout(LONG)
        assert await _spot_rows(store) == []
        created = await spots.get_or_create("cb", "room").timeout(LONG)
        assert isinstance(created, SpotCreated)


async def test_s06_05_a_create_callback_returning_junk_is_an_application_error(
    clock: object, store: CountingStore
) -> None:
    """§3.2 / docs/api.md: the create callback's result is Approve(reply) / Reject(reply)
    / None; anything else (here 42) is the application's fault: ApplicationError for that
    create, nothing published, the id free afterwards."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        with pytest.raises(ApplicationError, match="TypeError"):
            await spots.get_or_create("bad", "room").request(b"badret").timeout(LONG)
        assert await _spot_rows(store) == []
        assert hosted_spots(cluster.servers[0]) == ()


@pytest.mark.parametrize("request_bytes", [b"strreply", b"bigreply"])
async def test_s06_05_a_bad_create_reply_is_the_applications_error(
    clock: object, store: CountingStore, request_bytes: bytes
) -> None:
    """§3.1 ("최대 1 MiB" for what a create carries) / docs/api.md (a handler reply that
    is not bytes or exceeds max_reply_bytes is ApplicationError): an Approve reply that
    is a ``str``, or 1 MiB + 1 bytes, fails that create with ApplicationError (the
    application's mistake), nothing published, the id free."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        for caller in cluster.servers:  # local and remote owner alike
            with pytest.raises(ApplicationError):
                await caller.spots.get_or_create("br", "room").request(request_bytes).timeout(LONG)
        assert await _spot_rows(store) == []
        assert hosted_spots(cluster.servers[0]) == ()


# --- §7 / §7.1: close --------------------------------------------------------------------


async def test_s06_19_concurrent_closes_of_one_incarnation(
    clock: object, store: CountingStore
) -> None:
    """S06-19 / S06-21: the owner and two other nodes close the same SpotRef at once:
    exactly one close is True, the others False (already gone), the CLOSE callback runs
    once, the row and the hosted Spot are gone, one close is counted."""
    probe = Probe()
    async with open_cluster(3, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[2].spots.get_or_create("cc", "room").timeout(LONG)
        assert isinstance(created, SpotCreated)
        results: list[bool] = []

        async def close(index: int) -> None:
            results.append(await cluster.servers[index].spots.close(created.spot))

        with trio.fail_after(LONG):
            async with trio.open_nursery() as nursery:
                for index in (0, 1, 2, 1, 2):
                    nursery.start_soon(close, index)
        assert sorted(results) == [False, False, False, False, True]
        assert probe.closes == ["cc"]
        assert await _spot_rows(store) == []
        assert hosted_spots(cluster.servers[0]) == ()
        assert spot_statistics(cluster.servers[0]).closes == 1


async def test_s06_19_a_close_goes_by_the_store_not_the_refs_location(
    clock: object, store: CountingStore
) -> None:
    """S06-19 (§2.2 "SpotRef는 messaging target이나 owner capability가 아니다"): a SpotRef
    whose MeshName and NodeRid are not the owner's (stale location snapshot) still closes
    its incarnation -- the owner comes from the Store -- while a ref of another
    ObjectGeneration (older, or never issued) is InvalidOperation and closes nothing."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        created = await spots.get_or_create("loc", "room").timeout(LONG)
        assert isinstance(created, SpotCreated)
        ref = created.spot
        newer = attrs.evolve(
            ref,
            object_generation=attrs.evolve(
                ref.object_generation, value=ref.object_generation.value + 1000
            ),
        )
        with pytest.raises(InvalidOperation, match="generation"):
            await spots.close(newer)
        assert await spots.find("loc") == ref
        elsewhere = attrs.evolve(
            ref, node_rid=NodeRid.new(), mesh_name=attrs.evolve(ref.mesh_name, value="nowhere")
        )
        assert await spots.close(elsewhere) is True
        assert probe.closes == ["loc"] and await spots.find("loc") is None


async def test_s06_19_close_of_a_rejected_attempts_ref(clock: object, store: CountingStore) -> None:
    """S06-19 (§3.2 "SpotRef는 거부된 attempt를 식별하며 current Ready location을 보장하지
    않는다"): close of the SpotRef a SpotRejected carries is False (that incarnation never
    became Ready: gone); once another incarnation of the id is Ready it is
    InvalidOperation and never closes the new one. Close of anything but a SpotRef is
    InvalidOperation."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        rejected = await spots.get_or_create("rj", "room").request(b"reject").timeout(LONG)
        assert isinstance(rejected, SpotRejected)
        assert await spots.close(rejected.spot) is False
        created = await spots.get_or_create("rj", "room").timeout(LONG)
        assert isinstance(created, SpotCreated)
        with pytest.raises(InvalidOperation):
            await spots.close(rejected.spot)
        for not_a_ref in ("rj", created, None):
            with pytest.raises(InvalidOperation):
                await spots.close(not_a_ref)  # type: ignore[arg-type]
        assert await spots.find("rj") == created.spot and probe.closes == []


async def test_s06_19_a_get_or_create_during_a_close_makes_a_new_incarnation(
    clock: object, store: CountingStore
) -> None:
    """S06-19 (§7 "seal 뒤 operation은 closing 또는 stale 결과로 끝난다"): while a close
    waits in its CLOSE callback (the authority is Closing), find is None and a
    get_or_create from a third node never answers Existing with the closing
    incarnation: it waits for the release and then creates a NEW incarnation; a
    second close of the closing ref waits for the first and is False."""
    probe = Probe()
    gate = trio.Event()
    entered = trio.Event()

    def app(index: int) -> App:
        if index != 0:
            return App()
        a = probe_app(probe)

        return a

    class Slow:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            entered.set()
            await gate.wait()

    def slow_app(index: int) -> App:
        a = App()
        if index == 0:
            a.register_spot("slow", Slow, execution=SpotWide(), relocation=DisableRelocation())
        return a

    async with open_cluster(3, store=store, app=slow_app) as cluster:
        await cluster.wait_all_admitted()
        first = await cluster.servers[1].spots.get_or_create("cl", "slow").timeout(LONG)
        assert isinstance(first, SpotCreated)
        outcome: dict[str, object] = {}

        async def close(key: str, index: int) -> None:
            outcome[key] = await cluster.servers[index].spots.close(first.spot)

        async def recreate() -> None:
            outcome["again"] = (
                await cluster.servers[2].spots.get_or_create("cl", "slow").timeout(LONG)
            )

        with trio.fail_after(LONG):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(close, "first", 1)
                await entered.wait()
                assert await cluster.servers[2].spots.find("cl") is None
                nursery.start_soon(close, "second", 2)
                nursery.start_soon(recreate)
                await trio.testing.wait_all_tasks_blocked()
                assert "again" not in outcome
                gate.set()
        assert outcome["first"] is True and outcome["second"] is False
        again = outcome["again"]
        assert isinstance(again, SpotCreated)
        assert again.spot.object_generation != first.spot.object_generation


# --- §3.4: query -------------------------------------------------------------------------


async def test_s06_query_limit_bounds(clock: object, store: CountingStore) -> None:
    """§3.4 ("page size 1..1000"): limit 0, 1001, -1, a bool, a float and a str are
    InvalidArgument with no Store call; 1 and 1000 are pages; an ``after`` that is not a
    SpotId is InvalidId."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        store.reset()
        for bad in (0, 1001, -1, True, 1.0, "10"):
            with pytest.raises(InvalidArgument):
                await spots.query(limit=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidId):
            await spots.query(after="")
        with pytest.raises(InvalidId):
            await spots.query(after="x" * 256)
        assert sum(store.count(m) for m in ("list_rows", "read")) == 0
        # No User Spot yet: paging (limit 1: the Entry Spots' rows count as rows read,
        # docs/api.md) ends with no Spot listed; limit 1000 is one empty last page.
        after: str | None = None
        for _ in range(10):
            page = await spots.query(after=after, limit=1)
            assert page.spots == ()
            if page.next_after is None:
                break
            after = page.next_after
        assert page.next_after is None
        whole = await spots.query(limit=1000)
        assert whole.spots == () and whole.next_after is None


async def test_s06_query_pages_in_code_point_order(clock: object, store: CountingStore) -> None:
    """§3.4: query lists the Ready User Spots (never Entry Spots, never a Creating or
    Closing one) in SpotId code-point order on both stores; limit 1 pages through them
    one by one, ``after`` is strictly after (an id that is not there is a cursor too),
    and the last page says ``next_after=None``."""
    probe = Probe()
    ids = ["B", "a", "ab", "é", "中", "\U0001f600", "a\x00"]
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        refs = {}
        for spot_id in ids:
            created = await spots.get_or_create(spot_id, "room").timeout(LONG)
            assert isinstance(created, SpotCreated)
            refs[spot_id] = created.spot
        expected = sorted(ids)
        assert expected == sorted(ids, key=lambda s: s.encode())
        seen: list[str] = []
        after: str | None = None
        for _ in range(3 * len(ids) + 10):
            page = await spots.query(after=after, limit=1)
            assert len(page.spots) <= 1
            for info in page.spots:
                assert info.kind is SpotKind.USER and info.stable_type.value == "room"
                assert info.spot == refs[info.spot.spot_id.value]
                seen.append(info.spot.spot_id.value)
            if page.next_after is None:
                break
            after = page.next_after
        assert seen == expected
        whole = await spots.query(limit=1000)
        assert [i.spot.spot_id.value for i in whole.spots] == expected
        assert whole.next_after is None
        tail = await spots.query(after="aa", limit=1000)
        assert [i.spot.spot_id.value for i in tail.spots] == [s for s in expected if s > "aa"]
        # a Creating one is not listed
        async with trio.open_nursery() as nursery:

            async def creating() -> None:
                await spots.get_or_create("creating", "room").request(b"gate").timeout(LONG)

            nursery.start_soon(creating)
            await probe.entered.wait()
            listed = await spots.query(limit=1000)
            assert "creating" not in [i.spot.spot_id.value for i in listed.spots]
            probe.gate.set()
        listed = await spots.query(limit=1000)
        assert "creating" in [i.spot.spot_id.value for i in listed.spots]


@pytest.mark.parametrize("backend", ["memory"])  # 1,001 creates: memory store only
async def test_s06_query_a_full_page_and_the_next(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """§3.4: with 1,001 Ready Spots, ``limit=1000`` pages never repeat or skip one and
    end with ``next_after=None``; a page never holds more than 1,000."""
    probe = Probe()
    async with open_cluster(2, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[0].spots
        ids = [f"s{i:04d}" for i in range(1001)]

        async def make(chunk: list[str]) -> None:
            for spot_id in chunk:
                created = await spots.get_or_create(spot_id, "room").timeout(LONG)
                assert isinstance(created, SpotCreated)

        async with trio.open_nursery() as nursery:
            for k in range(8):
                nursery.start_soon(make, ids[k::8])
        seen: list[str] = []
        after: str | None = None
        pages = 0
        while True:
            page = await spots.query(after=after, limit=1000)
            pages += 1
            assert len(page.spots) <= 1000
            seen.extend(i.spot.spot_id.value for i in page.spots)
            if page.next_after is None:
                break
            after = page.next_after
            assert pages < 5
        assert seen == ids and 2 <= pages <= 3


# --- registration (startup) -----------------------------------------------------------


class _Plain:
    def __init__(self, context: SpotContext) -> None:
        self.context = context


class _Adapter:
    async def capture(self, spot: object) -> bytes:
        return b""

    async def restore(self, spot: object, payload: bytes) -> None:
        return None


async def _async_fn(spot: object, argument: object) -> None:
    return None


def _sync_fn(spot: object, argument: object) -> None:
    return None


def _bad_registrations() -> list[Any]:
    def plain_def_callback() -> type:
        class C(_Plain):
            @on_lifecycle(SpotCallback.CLOSE)
            def closing(self, event: object) -> None: ...  # type: ignore[override]

        return C

    def plain_def_handler() -> type:
        class C(_Plain):
            @on_request("x")  # type: ignore[type-var]
            def x(self, payload: bytes) -> bytes:
                return payload

        return C

    user = {"execution": SpotWide(), "relocation": DisableRelocation()}
    return [
        pytest.param(
            lambda a: a.register_spot("t", _Plain, execution=SpotWide(), relocation=None),
            "relocation must be",
            id="relocation-none",
        ),
        pytest.param(
            lambda a: a.register_spot(
                "t", _Plain, execution=SpotWide(), relocation=RecreateOnRelocation
            ),
            "relocation must be",
            id="relocation-class",
        ),
        pytest.param(
            lambda a: a.register_spot(
                "t", _Plain, execution=PerActor(), relocation=PreserveStateWith(_Adapter())
            ),
            "PerActor",
            id="peractor-preserve",
        ),
        pytest.param(
            lambda a: a.register_spot(
                "t", _Plain, execution=PerActor(), relocation=DisableRelocation()
            ),
            "PerActor",
            id="peractor-disable",
        ),
        pytest.param(
            lambda a: a.register_spot(
                "t",
                _Plain,
                kind=SpotKind.INSTANCE,
                execution=SpotWide(),
                relocation=DisableRelocation(),
            ),
            "no execution mode",
            id="instance-execution",
        ),
        pytest.param(
            lambda a: a.register_spot("t", _Plain, relocation=DisableRelocation()),
            "execution must be",
            id="user-no-execution",
        ),
        pytest.param(
            lambda a: a.register_spot(
                "t", _Plain, execution=SpotWide, relocation=DisableRelocation()
            ),
            "execution must be",
            id="execution-class",
        ),
        pytest.param(
            lambda a: a.register_spot("t", _Plain, kind="user", **user),
            "kind must be",
            id="kind-str",
        ),
        pytest.param(
            lambda a: a.register_spot("t", 42, **user), "not callable", id="factory-not-callable"
        ),
        pytest.param(lambda a: a.register_spot("", _Plain, **user), "empty", id="type-empty"),
        pytest.param(
            lambda a: a.register_spot("t" * 256, _Plain, **user), "256 bytes", id="type-256"
        ),
        pytest.param(lambda a: a.register_spot(42, _Plain, **user), "expected str", id="type-int"),
        pytest.param(
            lambda a: a.register_spot("t", plain_def_callback(), **user),
            "must be an async def",
            id="plain-def-callback",
        ),
        pytest.param(
            lambda a: a.register_spot("t", plain_def_handler(), **user),
            "must be an async def",
            id="plain-def-handler",
        ),
        pytest.param(
            lambda a: (
                a.register_spot("t", _Plain, **user),
                a.register_spot_callback("t", SpotCallback.CLOSE, lambda s, e: None),
            ),
            "must be an async def",
            id="lambda-callback",
        ),
        pytest.param(
            lambda a: (
                a.register_spot("t", _Plain, **user),
                a.register_spot_callback("t", SpotCallback.CLOSE, _sync_fn),
            ),
            "must be an async def",
            id="sync-callback",
        ),
        pytest.param(
            lambda a: (
                a.register_spot("t", _Plain, **user),
                a.register_spot_callback("t", "close", _async_fn),
            ),
            "not a SpotCallback",
            id="callback-str",
        ),
        pytest.param(
            lambda a: (
                a.register_spot(
                    "t", _Plain, kind=SpotKind.INSTANCE, relocation=DisableRelocation()
                ),
                a.register_spot_callback("t", SpotCallback.LEAVE, _async_fn),
            ),
            "no Actor membership",
            id="instance-leave",
        ),
        pytest.param(
            lambda a: a.register_spot_callback("nobody", SpotCallback.CLOSE, _async_fn),
            "unregistered spot type",
            id="callback-unregistered",
        ),
        pytest.param(
            lambda a: a.register_spot_handler("nobody", "request", "x", _async_fn),
            "unregistered spot type",
            id="handler-unregistered",
        ),  # type: ignore[arg-type]
        pytest.param(
            lambda a: (
                a.register_spot("t", _Plain, **user),
                a.register_spot_callback("t", SpotCallback.CLOSE, _async_fn),
                a.register_spot_callback("t", SpotCallback.CLOSE, _async_fn),
            ),
            "registered twice",
            id="callback-twice",
        ),
    ]


@pytest.mark.parametrize(("register", "problem"), _bad_registrations())
async def test_s06_01_bad_registrations_fail_at_startup(register: Any, problem: str) -> None:
    """S06-01 / docs/api.md Registration ("all checked at startup (one
    ConfigurationError)"): each bad Spot registration stops ``open_server`` with a
    ConfigurationError naming the problem; nothing serves."""
    app = App()
    register(app)
    config = ServerConfig(meshes=[MeshConfig(name="m")], cluster_secret=b"k" * 32)
    with pytest.raises(ConfigurationError, match=problem):
        async with open_server(config, app):
            raise AssertionError("the server must not start")  # pragma: no cover


async def test_s06_01_spot_types_need_a_server_mesh_and_a_store() -> None:
    """docs/api.md ("A node that registers a Spot type needs an Object Server mesh and a
    Location Store"): only a CLIENT-role mesh, or no Location Store, is a startup
    ConfigurationError."""
    app = App()
    app.register_spot("t", _Plain, execution=SpotWide(), relocation=DisableRelocation())
    client_only = ServerConfig(
        meshes=[MeshConfig(name="m", object_role=ObjectRole.CLIENT)], cluster_secret=b"k" * 32
    )
    with pytest.raises(ConfigurationError, match="Object Server role"):
        async with open_server(client_only, app):
            raise AssertionError("the server must not start")  # pragma: no cover
    no_store = ServerConfig(
        meshes=[MeshConfig(name="m")], cluster_secret=b"k" * 32, location_store=None
    )
    with pytest.raises(ConfigurationError, match="Location Store"):
        async with open_server(no_store, app):
            raise AssertionError("the server must not start")  # pragma: no cover


@pytest.mark.parametrize("adapter", [None, 42], ids=["none", "int"])
async def test_s06_preserve_state_needs_an_adapter(adapter: object) -> None:
    """§8 ("PreserveStateWith는 Spot type에 맞는 SpotRelocationAdapter를 요구한다"): a
    SpotWide type registered with ``PreserveStateWith(<not an adapter>)`` is a startup
    ConfigurationError (the adapter needs ``capture``/``restore``)."""
    app = App()
    app.register_spot(
        "t",
        _Plain,
        execution=SpotWide(),
        relocation=PreserveStateWith(adapter),  # type: ignore[arg-type]
    )
    config = ServerConfig(meshes=[MeshConfig(name="m")], cluster_secret=b"k" * 32)
    with pytest.raises(ConfigurationError):
        async with open_server(config, app):
            raise AssertionError("the server must not start")  # pragma: no cover


async def test_s06_a_partial_of_a_plain_def_callback_is_refused_at_startup() -> None:
    """docs/api.md ("Handlers are async def: a marked plain def method is a startup
    ConfigurationError"; docs/spots-internals.md: "a non-async def → error"): a CREATE callback
    ``functools.partial(plain_def)`` is refused at startup, not at every create."""
    import functools

    app = App()
    app.register_spot("t", _Plain, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot_callback("t", SpotCallback.CREATE, functools.partial(_sync_fn))
    config = ServerConfig(meshes=[MeshConfig(name="m")], cluster_secret=b"k" * 32)
    with pytest.raises(ConfigurationError):
        async with open_server(config, app):
            raise AssertionError("the server must not start")  # pragma: no cover


async def test_s06_a_bad_factory_fails_its_create_not_the_node(
    clock: object, store: CountingStore
) -> None:
    """docs/api.md (create errors): a factory that raises (here a class whose __init__
    takes no Context) is ApplicationError; one whose Spot does not expose the Context it
    was given is InvalidOperation; an ``async def`` factory works; the same stable type
    may also be an Actor type. The node keeps serving after each failure."""

    class NoContext:
        def __init__(self) -> None: ...

    class Hides:
        def __init__(self, context: SpotContext) -> None:
            self.context = None

    async def async_factory(context: SpotContext) -> _Plain:
        await trio.lowlevel.checkpoint()
        return _Plain(context)

    def app(index: int) -> App:
        a = App()
        if index == 0:
            a.register_spot("noctx", NoContext, **_user())  # type: ignore[arg-type]
            a.register_spot("hides", Hides, **_user())
            a.register_spot("async", async_factory, **_user())
            a.enable_actor_dispatch()
            a.register_actor("async", _Plain, relocation=RecreateOnRelocation())
        return a

    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        with pytest.raises(ApplicationError, match="TypeError"):
            await spots.get_or_create("x", "noctx").timeout(LONG)
        with pytest.raises(InvalidOperation, match="Context"):
            await spots.get_or_create("x", "hides").timeout(LONG)
        assert await _spot_rows(store) == []
        created = await spots.get_or_create("x", "async").timeout(LONG)
        assert isinstance(created, SpotCreated)


def _user() -> dict[str, Any]:
    return {"execution": SpotWide(), "relocation": DisableRelocation()}


async def test_s06_05_capacity_is_given_back_by_every_ending(
    clock: object, store: CountingStore
) -> None:
    """§3.1 ("role, stable type capability, active·pending capacity를 먼저 검사"): the host
    takes two objects. Rejected, failed and timed-out creates give their pending unit
    back (three of each in a row leave room for two Spots); with two Ready Spots a third
    create is CapacityExceeded with nothing reserved; a close frees a unit again."""
    probe = Probe()

    def config(index: int) -> ServerConfig:
        return ServerConfig(node_capacity=2) if index == 0 else ServerConfig()

    async with open_cluster(2, store=store, app=host0(probe), config=config) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        for _ in range(3):
            assert isinstance(
                await spots.create("room").request(b"reject").timeout(LONG), SpotRejected
            )
            with pytest.raises(ApplicationError):
                await spots.create("room").request(b"boom").timeout(LONG)
            with pytest.raises(DeadlineExceeded):
                await spots.create("room").request(b"sleep:5").timeout(0.5)
        # every ending gave its pending unit back before the call returned
        assert [n.pending for n in await store.list_nodes()] == [0, 0]
        first = await spots.create("room").timeout(LONG)
        second = await spots.create("room").timeout(LONG)
        assert isinstance(first, SpotCreated) and isinstance(second, SpotCreated)
        store.reset()
        from zlink_trio import CapacityExceeded

        with pytest.raises(CapacityExceeded):
            await spots.create("room").timeout(LONG)
        assert store.count("reserve") == 0
        assert await spots.close(first.spot) is True
        third = await spots.create("room").timeout(LONG)
        assert isinstance(third, SpotCreated)
        (host,) = [
            n
            for n in await store.list_nodes()
            if n.descriptor.node_rid == cluster.servers[0].identity.node_rid
        ]
        assert (host.active, host.pending) == (2, 0)


async def test_s06_05_a_type_hosted_in_another_mesh_only_is_not_found(
    clock: object, store: CountingStore
) -> None:
    """S06-05 (§3.1): node 0 is an Object Server of mesh "a" (hosting "room") and only a
    client of mesh "b"; node 1 serves mesh "b" without the type. A create in_mesh("b")
    is NotFound (no server of that mesh hosts it), nothing reserved; in_mesh("a") places
    it on node 0."""
    probe = Probe()

    def config(index: int) -> ServerConfig:
        roles = (
            (ObjectRole.SERVER, ObjectRole.CLIENT)
            if index == 0
            else (ObjectRole.CLIENT, ObjectRole.SERVER)
        )
        return ServerConfig(
            meshes=[
                MeshConfig(name="a", object_role=roles[0]),
                MeshConfig(name="b", object_role=roles[1]),
            ],
            cluster_secret=b"k" * 32,
        )

    async with open_cluster(2, store=store, app=host0(probe), config=config) as cluster:
        await cluster.wait_all_admitted()
        store.reset()
        for caller in cluster.servers:
            with pytest.raises(NotFound):
                await caller.spots.create("room").in_mesh("b").timeout(LONG)
        assert store.count("reserve") == 0
        created = await cluster.servers[1].spots.create("room").in_mesh("a").timeout(LONG)
        assert isinstance(created, SpotCreated) and created.spot.mesh_name.value == "a"


async def test_s06_03_two_creates_drawing_one_uuid_at_once(
    clock: object, store: CountingStore
) -> None:
    """S06-03 (§3.2 "Active authority와 충돌하면 새 UUID나 reservation을 만들지 않고
    AlreadyExists"): two create(type) calls on two nodes draw the same UUID at once: one
    is Created, the other AlreadyExists; one factory run. When the winner is rejected,
    the other competes afresh and is Created (a rejection is not an active authority)."""
    probe = Probe()
    async with open_cluster(3, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        for winner_request, expect in ((b"gate", AlreadyExists), (b"gate-reject", SpotCreated)):
            taken = str(uuid.uuid4())
            for server in cluster.servers[1:]:
                set_spot_id_source(server, lambda taken=taken: SpotId(taken))
            results: list[object] = []

            async def one(index: int, request: bytes, results: list[object]) -> None:
                try:
                    call = cluster.servers[index].spots.create("room").request(request)
                    results.append(await call.timeout(LONG))
                except AlreadyExists as exc:
                    results.append(exc)

            probe.gate = trio.Event()
            probe.entered = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, 1, winner_request, results)
                await probe.entered.wait()
                nursery.start_soon(one, 2, b"second", results)
                await trio.testing.wait_all_tasks_blocked()
                probe.gate.set()
            kinds = sorted(type(r).__name__ for r in results)
            if expect is AlreadyExists:
                assert kinds == ["AlreadyExists", "SpotCreated"]
                assert probe.runs(taken) == 1
            else:
                assert kinds == ["SpotCreated", "SpotRejected"]
                assert probe.requests[taken] == [b"gate-reject", b"second"]


# --- §3.3 / §7.1 under transport faults ----------------------------------------------------


async def test_s06_08_a_lost_or_duplicated_create_terminal(
    clock: object, store: CountingStore
) -> None:
    """S06-08 (§3.3 "Target은 같은 reservation을 commit한 결과를 command 20 reply로 한 번만
    반환한다"): the owner's 20 for a 47 is lost once (the link breaks): the source replays
    the 47 under the same OperationId and gets the original Created -- one factory run,
    one reservation. A 47 written twice on the wire also runs the factory once."""
    from zlink_trio.testing import FaultPlan, TapDirection, WireTap
    from zlink_trio.wire.commands import Command

    probe = Probe()
    plan = FaultPlan(seed=47)
    tap = WireTap()
    async with open_cluster(2, store=store, app=host0(probe), fault_plan=plan, tap=tap) as cluster:
        await cluster.wait_all_admitted()
        host, caller = cluster.servers
        lost = plan.drop(command=Command.TERMINAL_REPLY, sender=host.identity.node_rid, count=1)
        store.reset()
        created = await caller.spots.get_or_create("lost", "room").request(b"x").timeout(LONG)
        assert isinstance(created, SpotCreated) and created.reply == b"ok:x"
        assert lost.fired == 1
        sent = tap.select(
            node=caller.identity.node_rid,
            direction=TapDirection.SENT,
            command=Command.USER_SPOT_CREATE,
        )
        assert len(sent) == 2 and len({e.record.operation_id for e in sent}) == 1
        assert probe.runs("lost") == 1 and store.count("reserve") == 1
        plan.clear()
        await cluster.wait_all_admitted()
        plan.duplicate(command=Command.USER_SPOT_CREATE, sender=caller.identity.node_rid, count=1)
        twice = await caller.spots.get_or_create("twice", "room").timeout(LONG)
        assert isinstance(twice, SpotCreated)
        assert probe.runs("twice") == 1
        assert await caller.spots.find("twice") == twice.spot


async def test_s06_21_a_lost_close_terminal(clock: object, store: CountingStore) -> None:
    """S06-21 (§7.1; docs/api.md close: "owner unreachable → Unavailable"): the owner's
    20 for a 48 is lost (the link breaks): the close ends Unavailable (its outcome
    unknown, never re-sent: no second 48), the close did run once on the owner, and a
    retried close of that ref is False (already gone)."""
    from zlink_trio import Unavailable
    from zlink_trio.testing import FaultPlan, TapDirection, WireTap
    from zlink_trio.wire.commands import Command

    probe = Probe()
    plan = FaultPlan(seed=48)
    tap = WireTap()
    async with open_cluster(2, store=store, app=host0(probe), fault_plan=plan, tap=tap) as cluster:
        await cluster.wait_all_admitted()
        host, caller = cluster.servers
        created = await caller.spots.get_or_create("lc", "room").timeout(LONG)
        assert isinstance(created, SpotCreated)
        tap.clear()
        plan.drop(command=Command.TERMINAL_REPLY, sender=host.identity.node_rid, count=1)
        with trio.fail_after(LONG), pytest.raises(Unavailable):
            await caller.spots.close(created.spot)
        sent = tap.select(
            node=caller.identity.node_rid,
            direction=TapDirection.SENT,
            command=Command.USER_SPOT_CLOSE,
        )
        assert len(sent) == 1
        plan.clear()
        await cluster.wait_all_admitted()
        assert await caller.spots.close(created.spot) is False
        assert probe.closes == ["lc"] and await caller.spots.find("lc") is None


async def test_s06_01_stable_type_edges(clock: object, store: CountingStore) -> None:
    """S06-01 (§2 "User·Instance Spot type은 UTF-8 1..255 bytes의 case-sensitive stable
    name"): a 255-byte type and a type holding U+0000 are registered, published, created
    and listed as themselves on both stores; the type differing only in case is another
    (unhosted: NotFound)."""
    long_type = "é" * 127 + "x"
    nul_type = "ro\x00om"

    def app(index: int) -> App:
        a = App()
        if index == 0:
            for st in (long_type, nul_type):
                a.register_spot(st, _Plain, **_user())
        return a

    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        for spot_id, st in (("long", long_type), ("nul", nul_type)):
            created = await spots.get_or_create(spot_id, st).timeout(LONG)
            assert isinstance(created, SpotCreated)
        page = await spots.query(limit=1000)
        assert {(i.spot.spot_id.value, i.stable_type.value) for i in page.spots} == {
            ("long", long_type),
            ("nul", nul_type),
        }
        with pytest.raises(NotFound):
            await spots.get_or_create("upper", "RO\x00OM").timeout(LONG)


async def test_s06_19_a_failing_close_callback_still_closes(
    clock: object, store: CountingStore
) -> None:
    """S06-19 (§7 step 3 "Handler scope, timer와 local activation resource를 한 번
    정리한다"; step 4 release): a CLOSE callback that raises does not stop the close: it
    is True, the authority is released, the callback ran once, and the id can be created
    again on the same node."""
    calls: list[str] = []

    class Fails:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            calls.append(self.context.spot_id.value)
            raise RuntimeError("the close callback fails on purpose")

    def app(index: int) -> App:
        a = App()
        if index == 0:
            a.register_spot("fails", Fails, **_user())
        return a

    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        created = await spots.get_or_create("cf", "fails").timeout(LONG)
        assert isinstance(created, SpotCreated)
        assert await spots.close(created.spot) is True
        assert calls == ["cf"] and await _spot_rows(store) == []
        again = await spots.get_or_create("cf", "fails").timeout(LONG)
        assert isinstance(again, SpotCreated)


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_s06_19_a_hung_close_callback_is_bounded_by_the_nodes_stop(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """§7 / docs/api.md ("close ... Takes no timeout of its own"; a clean stop "lets
    creates and closes in progress finish, then releases every Spot row it owns"): a
    CLOSE callback that never returns leaves the caller to its own scope (TooSlowError
    under ``fail_after``); a get_or_create of the id meanwhile ends DeadlineExceeded
    (never Existing of the closing incarnation); the owner's clean stop still ends
    within ``drain_timeout`` and releases the row, so the id can be created again."""

    class Hangs:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            await trio.sleep_forever()

    def app(index: int) -> App:
        a = App()
        a.register_spot("hangs", Hangs, **_user())
        return a

    def config(index: int) -> ServerConfig:
        return ServerConfig(drain_timeout=4.0)

    async with open_cluster(2, store=store, app=app, config=config) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].spots.get_or_create("hc", "hangs").timeout(LONG)
        assert isinstance(created, SpotCreated)
        (owner_index,) = [
            i for i, s in enumerate(cluster.servers) if s.identity.node_rid == created.spot.node_rid
        ]
        caller = cluster.servers[1 - owner_index]
        with pytest.raises(trio.TooSlowError), trio.fail_after(2):
            await caller.spots.close(created.spot)
        with pytest.raises(DeadlineExceeded):
            await caller.spots.get_or_create("hc", "hangs").timeout(3)
        began = trio.current_time()
        with trio.fail_after(LONG):
            await cluster.stop(owner_index)
        assert trio.current_time() - began <= 4.0 + 1.0
        assert await _spot_rows(store) == []
        again = await caller.spots.get_or_create("hc", "hangs").timeout(LONG)
        assert isinstance(again, SpotCreated)
        assert again.spot.node_rid == caller.identity.node_rid


@pytest.mark.parametrize("first", ["actor", "spot"])
async def test_s06_07_an_operation_id_of_another_kinds_create_is_not_this_ones_terminal(
    clock: object, store: CountingStore, first: str
) -> None:
    """S06-07 (§3.2 "동일한 operation ID가 재전달된 경우에만 retained terminal result를
    재전송한다"; docs/api.md: "An OperationId is one operation ... on one id: re-using it
    for another id while its terminal is retained raises InvalidOperation"): an
    OperationId that created Actor "same" re-used for a get_or_create of User Spot
    "same" (Actors and Spots are separate namespaces) is not a redelivery of that
    operation: InvalidOperation -- never a Created of an object that does not exist."""

    def app(index: int) -> App:
        a = App()
        a.enable_actor_dispatch()
        if index == 0:
            a.register_spot("room", _Plain, **_user())
            a.register_actor("player", _Plain, relocation=RecreateOnRelocation())
        return a

    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1]
        op = OperationId.new()

        def actor_call() -> Any:
            return caller.actors.get_or_create("same", "player").operation_id(op).timeout(LONG)

        def spot_call() -> Any:
            return caller.spots.get_or_create("same", "room").operation_id(op).timeout(LONG)

        calls = [actor_call, spot_call] if first == "actor" else [spot_call, actor_call]
        original = await calls[0]()
        assert type(original).__name__ in ("Created", "SpotCreated")
        outcome: object
        try:
            outcome = await calls[1]()
        except InvalidOperation as exc:
            outcome = exc
        found = (
            await caller.spots.find("same")
            if first == "actor"
            else await caller.actors.find("same")
        )
        # Either refused, or the other object really exists now -- never a phantom.
        assert isinstance(outcome, InvalidOperation) or found is not None, outcome


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_s06_08_a_47_that_arrives_after_the_deadline_runs_no_factory(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """S06-08 (§3 "end-to-end deadline 하나"; docs/api.md "An owner never starts work whose
    deadline has passed"): the command 47 is held in transit longer than the call's
    timeout: the call ends DeadlineExceeded at exactly submit + timeout; when the 47
    finally arrives, the owner runs no factory and publishes nothing (the reservation
    the caller gave back fences it), and the id is free for the next create."""
    from zlink_trio.testing import FaultPlan
    from zlink_trio.wire.commands import Command

    probe = Probe()
    plan = FaultPlan(seed=8)
    async with open_cluster(2, store=store, app=host0(probe), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1]
        plan.delay(5.0, command=Command.USER_SPOT_CREATE, sender=caller.identity.node_rid, count=1)
        start = trio.current_time()
        with pytest.raises(DeadlineExceeded):
            await caller.spots.get_or_create("late", "room").timeout(2)
        assert trio.current_time() == start + 2
        await trio.sleep(10)  # the 47 arrived at start + 5
        assert probe.runs("late") == 0 and hosted_spots(cluster.servers[0]) == ()
        assert await _spot_rows(store) == []
        created = await caller.spots.get_or_create("late", "room").timeout(LONG)
        assert isinstance(created, SpotCreated) and probe.runs("late") == 1


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_s06_07_waiters_on_a_creating_attempt_reserve_nothing(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """S06-07 (§3.2 "진행 중인 Creating attempt를 관찰한 서로 다른 operation은 새
    reservation이나 factory를 시작하지 않고 authority 변경을 기다린다"): once the first
    attempt is Creating, six get_or_create calls from three nodes (each with its own 1 MiB
    request) make no reserve and write no creation content; a waiter whose timeout is
    shorter ends DeadlineExceeded at exactly its submit + timeout; the others end
    Existing of the one incarnation."""
    probe = Probe()
    async with open_cluster(3, store=store, app=host0(probe)) as cluster:
        await cluster.wait_all_admitted()
        results: list[object] = []

        async def creator() -> None:
            call = cluster.servers[1].spots.get_or_create("w", "room").request(b"gate")
            results.append(await call.timeout(LONG))

        async def waiter(index: int) -> None:
            call = cluster.servers[index % 3].spots.get_or_create("w", "room")
            results.append(await call.request(b"w" * MIB).timeout(LONG))

        async def impatient() -> None:
            start = trio.current_time()
            with pytest.raises(DeadlineExceeded):
                await cluster.servers[2].spots.get_or_create("w", "room").timeout(1.5)
            results.append(trio.current_time() - start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(creator)
            await probe.entered.wait()
            store.reset()
            for index in range(6):
                nursery.start_soon(waiter, index)
            nursery.start_soon(impatient)
            await trio.sleep(3)
            probe.gate.set()
        assert store.count("reserve") == 0 and store.count("put_root") == 0
        created = [r for r in results if isinstance(r, SpotCreated)]
        assert len(created) == 1
        assert [r for r in results if isinstance(r, SpotExisting)] == [
            SpotExisting(created[0].spot)
        ] * 6
        assert 1.5 in results
        assert probe.runs("w") == 1


async def test_s06_a_plain_def_function_handler_is_refused_at_startup() -> None:
    """docs/spots-internals.md §1 ("handler/callback for an unregistered type, twice the same key, a
    non-``async def`` → error", checked at startup) / docs/api.md ("Handlers are async
    def"): ``register_spot_handler(type, REQUEST, "x", plain_def)`` is a startup
    ConfigurationError."""
    from zlink_trio import MessageKind

    def plain(spot: object, payload: bytes) -> bytes:
        return payload

    app = App()
    app.register_spot("t", _Plain, **_user())
    app.register_spot_handler("t", MessageKind.REQUEST, "x", plain)  # type: ignore[arg-type]
    config = ServerConfig(meshes=[MeshConfig(name="m")], cluster_secret=b"k" * 32)
    with pytest.raises(ConfigurationError, match="async def"):
        async with open_server(config, app):
            raise AssertionError("the server must not start")  # pragma: no cover
