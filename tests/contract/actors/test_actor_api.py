"""The rest of the Actor public surface (spec 04 §5–§8): registration, the factory and its
Context, submit-once fluent calls and the one deadline, mesh selection and placement,
messaging failures, the route cache and the runtime statistics.

Public surface only: ``App``, ``open_server`` / ``open_cluster``, ``server.actors``,
``server.statistics()`` and the ``zlink_trio.testing`` hooks. Counts are taken by the
application code itself.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from actor_kit import Recorder, client_app, make_app

from zlink_trio import (
    ActorContext,
    AlreadyExists,
    App,
    ApplicationError,
    CapacityExceeded,
    ConfigurationError,
    DeadlineExceeded,
    InvalidOperation,
    MeshConfig,
    MeshName,
    NotConfigured,
    NotFound,
    ObjectRole,
    OperationId,
    ServerConfig,
    SessionNotBound,
    open_server,
)
from zlink_trio.actors.handlers import MessageKind, on_request, on_send
from zlink_trio.actors.policy import (
    DisableRelocation,
    PreserveStateWith,
    RecreateOnRelocation,
)
from zlink_trio.actors.results import Created
from zlink_trio.config import MIB
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision
from zlink_trio.testing import CountingStore, entry_spot_statistics, open_cluster, server_engine
from zlink_trio.testing.cluster import Cluster

SECRET = b"api-tests-secret-0123456789"

ACTOR_STORE_CALLS = (
    "read",
    "read_terminal",
    "reserve",
    "put_root",
    "read_root",
    "commit_ready",
    "abort_creation",
    "record_terminal",
    "begin_closing",
    "release",
)
"""Store methods only Actor operations call (the lease renewer and the descriptor watcher
use others), so their counts are exact even on the real clock."""


def _actor_calls(store: CountingStore) -> int:
    return sum(store.count(m) for m in ACTOR_STORE_CALLS)


async def _capacity(store: CountingStore) -> dict[bytes, tuple[int, int]]:
    """(active, pending) per NodeRid."""
    return {n.descriptor.node_rid.value: (n.active, n.pending) for n in await store.list_nodes()}


def _server_config(store: CountingStore, *meshes: MeshConfig, **options: Any) -> ServerConfig:
    return ServerConfig(
        meshes=meshes or (MeshConfig(name="test"),),
        cluster_secret=SECRET,
        location_store=store,
        **options,
    )


def _index_of(cluster: Cluster, created: object) -> int:
    assert isinstance(created, Created)
    rid = created.actor.node_rid
    return next(i for i, s in enumerate(cluster.servers) if s.identity.node_rid == rid)


class Plain:
    def __init__(self, context: ActorContext) -> None:
        self.context = context

    @on_request("echo")
    async def echo(self, payload: bytes) -> bytes:
        return payload


class _NoAdapter:
    async def capture(self, actor: object) -> bytes:
        return b""

    async def restore(self, actor: object, payload: bytes) -> None:
        return None


# --- registration -------------------------------------------------------------------------


async def test_registration_requires_a_relocation_policy(
    clock: object, store: CountingStore
) -> None:
    """A stable type is registered together with its factory and a relocation policy: no
    overload or default omits the policy, and a missing or invalid one fails startup
    (open_server raises ConfigurationError before any Store call)."""
    parameter = inspect.signature(App.register_actor).parameters["relocation"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert parameter.default is inspect.Parameter.empty
    app = App()
    app.enable_actor_dispatch()
    with pytest.raises(TypeError):
        app.register_actor("player", Plain)  # type: ignore[call-arg]
    for bad in (None, "recreate", RecreateOnRelocation):
        broken = App()
        broken.enable_actor_dispatch()
        broken.register_actor("player", Plain, relocation=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="relocation"):
            async with open_server(_server_config(store), broken):
                pytest.fail("startup must fail")
    assert store.calls == {}
    # every policy kind is accepted (positive control)
    for index, policy in enumerate(
        (DisableRelocation(), RecreateOnRelocation(), PreserveStateWith(_NoAdapter()))
    ):
        app.register_actor(f"kind-{index}", Plain, relocation=policy)
    async with open_server(_server_config(store), app) as server:
        created = await server.actors.create("policy-ok", "kind-2").timeout(10)
        assert isinstance(created, Created)


async def test_a04_16_duplicate_stable_type_fails_startup(
    clock: object, store: CountingStore
) -> None:
    """A04-16: registering the same stable type twice on one server is a startup error
    (ConfigurationError from open_server, nothing written to the Store); the same name
    on two different servers is fine."""
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("player", Plain, relocation=DisableRelocation())
    app.register_actor("player", Plain, relocation=RecreateOnRelocation())
    with pytest.raises(ConfigurationError, match="registered twice"):
        async with open_server(_server_config(store), app):
            pytest.fail("startup must fail")
    assert store.calls == {}

    def single(index: int) -> App:
        one = App()
        one.enable_actor_dispatch()
        one.register_actor("player", Plain, relocation=DisableRelocation())
        return one

    async with open_cluster(2, store=store, app=single) as cluster:
        await cluster.wait_all_admitted()
        assert isinstance(await cluster.servers[0].actors.create("dup-ok", "player"), Created)


async def test_duplicate_handler_key_fails_startup(clock: object, store: CountingStore) -> None:
    """The same (actor type, message kind, packet) handler key registered twice is a
    startup error, whether both are methods, or a method and a function handler; the
    same packet name for a send and a request is two different keys."""

    class TwoMethods:
        def __init__(self, context: ActorContext) -> None:
            self.context = context

        @on_request("get")
        async def first(self, payload: bytes) -> bytes:
            return b"1"

        @on_request("get")
        async def second(self, payload: bytes) -> bytes:
            return b"2"

    async def function_echo(actor: object, payload: bytes) -> bytes | None:
        return payload

    with_methods = App()
    with_methods.enable_actor_dispatch()
    with_methods.register_actor("twice", TwoMethods, relocation=DisableRelocation())
    with_function = App()
    with_function.enable_actor_dispatch()
    with_function.register_actor("plain", Plain, relocation=DisableRelocation())
    with_function.register_actor_handler("plain", MessageKind.REQUEST, "echo", function_echo)
    for app in (with_methods, with_function):
        with pytest.raises(ConfigurationError, match="handler key"):
            async with open_server(_server_config(store), app):
                pytest.fail("startup must fail")
    assert store.calls == {}
    # a send handler and a request handler may share a packet name
    fine = App()
    fine.enable_actor_dispatch()
    fine.register_actor("plain", Plain, relocation=DisableRelocation())

    async def echo_send(actor: object, payload: bytes) -> None:
        return None

    fine.register_actor_handler("plain", MessageKind.SEND, "echo", echo_send)
    async with open_server(_server_config(store), fine) as server:
        assert isinstance(await server.actors.create("both-kinds", "plain"), Created)
        await server.actors.send("both-kinds", "echo", b"one-way")
        assert await server.actors.request("both-kinds", "echo", b"ask") == b"ask"


# --- the factory and its Context ----------------------------------------------------------


async def test_factory_receives_only_the_context(clock: object, store: CountingStore) -> None:
    """The factory receives only the Context (no separate id argument): ActorId,
    ObjectGeneration, the current MeshName, the current SpotId (the hosting node's Entry
    Spot) and the bound-session capability, whose push and close raise SessionNotBound
    (an InvalidOperation) while no session is bound. The Context is read-only."""
    factory_args: list[tuple[tuple[object, ...], dict[str, object]]] = []
    session_errors: list[type[BaseException]] = []

    class Probe:
        def __init__(self, context: ActorContext) -> None:
            self.context = context

        @on_request("session")
        async def session(self, payload: bytes) -> bytes:
            assert self.context.session.bound is False
            for action in (
                lambda: self.context.session.push("hello", b"x"),
                lambda: self.context.session.close(),
            ):
                try:
                    await action()
                except InvalidOperation as exc:
                    session_errors.append(type(exc))
            return b"done"

    def factory(*args: object, **kwargs: object) -> Probe:
        factory_args.append((args, kwargs))
        (context,) = args
        assert isinstance(context, ActorContext)
        return Probe(context)

    host_app = App()
    host_app.enable_actor_dispatch()
    host_app.register_actor("probe", factory, relocation=RecreateOnRelocation())

    async def session(actor: Any, payload: bytes) -> bytes:
        reply: bytes = await actor.session(payload)
        return reply

    host_app.register_actor_handler("probe", MessageKind.REQUEST, "session", session)
    apps = [client_app(), host_app]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("probe-1", "probe").timeout(10)
        assert isinstance(created, Created)
        assert len(factory_args) == 1
        args, kwargs = factory_args[0]
        assert kwargs == {} and len(args) == 1
        context = args[0]
        assert isinstance(context, ActorContext)
        assert context.actor_id.value == "probe-1"
        assert context.object_generation == created.actor.object_generation
        assert context.mesh_name == MeshName("test") == created.actor.mesh_name
        (entry,) = entry_spot_statistics(cluster.servers[1])
        assert context.spot_id is not None and context.spot_id.value == entry.spot_id
        with pytest.raises(AttributeError):
            context.actor_id = context.actor_id  # type: ignore[misc]
        assert await cluster.servers[0].actors.request("probe-1", "session") == b"done"
        assert session_errors == [SessionNotBound, SessionNotBound]


async def test_a04_21_factory_exposing_another_context_never_publishes(
    clock: object, store: CountingStore
) -> None:
    """A04-21: a factory whose Actor exposes a different Context (another Actor's, a
    look-alike) or none at all makes the create end Failed with a typed error; the
    staging Actor is never published Ready (Find is None, no message reaches it,
    OnCreateActor never sees it) and the reserved capacity is given back."""
    kept: list[ActorContext] = []

    class Shape:
        def __init__(self, context: object) -> None:
            self.context = context

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            return payload

    def factory(context: ActorContext) -> object:
        mode = context.actor_id.value.split("-")[0]
        if mode == "good":
            kept.append(context)
            return Shape(context)
        if mode == "other":
            return Shape(kept[0])  # a cached Actor's Context
        if mode == "copy":
            return Shape(
                ActorContext(
                    context.actor_id,
                    context.object_generation,
                    context.mesh_name,
                    context.spot_id,
                    context.actors,
                )
            )
        if mode == "none":
            return object()
        if mode == "nothing":
            return None
        raise RuntimeError("factory failed on purpose")

    approvals: list[str] = []

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        approvals.append(event.actor_id.value)
        return Approve()

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("shape", factory, relocation=RecreateOnRelocation())

    async def echo(actor: Any, payload: bytes) -> bytes:
        reply: bytes = await actor.echo(payload)
        return reply

    app.register_actor_handler("shape", MessageKind.REQUEST, "echo", echo)
    app.on_create_actor(on_create)
    apps = [client_app(), app]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        assert isinstance(await cluster.servers[0].actors.create("good-1", "shape"), Created)
        before = await _capacity(store)
        expected: dict[str, type[Exception]] = {
            "other-1": InvalidOperation,
            "copy-1": InvalidOperation,
            "none-1": InvalidOperation,
            "nothing-1": InvalidOperation,
            "raise-1": ApplicationError,
        }
        for index, (actor_id, error) in enumerate(expected.items()):
            caller = cluster.servers[index % 2].actors
            with pytest.raises(error):
                await caller.create(actor_id, "shape").timeout(10)
            assert await caller.find(actor_id) is None
            with pytest.raises(NotFound):
                await caller.request(actor_id, "echo", b"x")
        assert approvals == ["good-1"]
        assert await _capacity(store) == before
        stats = cluster.servers[1].statistics().actors
        assert stats is not None and stats.hosted == 1 and stats.failed_creates == 5


# --- fluent calls and the one deadline ----------------------------------------------------


async def test_fluent_calls_take_each_option_once_and_submit_once(
    clock: object, store: CountingStore
) -> None:
    """Create and GetOrCreate are submit-once fluent calls: an option set twice raises
    InvalidOperation, so does a second submit (or an option after submit); the same holds
    for send and request calls, and a second submit runs nothing again."""
    rec = Recorder()
    async with open_cluster(1, store=store, app=make_app(rec)) as cluster:
        actors = cluster.servers[0].actors
        op = OperationId.new()
        options: list[Callable[[Any], Any]] = [
            lambda c: c.in_mesh("test"),
            lambda c: c.request(b"r"),
            lambda c: c.timeout(5),
            lambda c: c.operation_id(op),
        ]
        for make in (actors.create, actors.get_or_create):
            for option in options:
                call = option(make("fluent", "player"))
                with pytest.raises(InvalidOperation):
                    option(call)
        for make_message in (actors.send, actors.request):
            with pytest.raises(InvalidOperation):
                make_message("fluent", "echo", b"").timeout(1).timeout(2)
        assert _actor_calls(store) == 0
        # submit twice
        call = actors.create("fluent", "player").timeout(10)
        assert isinstance(await call, Created)
        calls_after_first = _actor_calls(store)
        with pytest.raises(InvalidOperation):
            await call
        with pytest.raises(InvalidOperation):
            await call.submit()
        with pytest.raises(InvalidOperation):
            call.in_mesh("test")
        assert _actor_calls(store) == calls_after_first
        assert rec.runs("fluent") == 1
        request = actors.request("fluent", "echo", b"once")
        assert await request == b"once"
        with pytest.raises(InvalidOperation):
            await request.submit()
        send = actors.send("fluent", "note", b"once")
        await send
        with pytest.raises(InvalidOperation):
            await send
        await rec.wait_handled(2)
        await server_engine(cluster.servers[0]).wait_idle()
        assert [h[3] for h in rec.handled] == [b"once", b"once"]


async def test_a_rejected_option_value_leaves_the_option_unset(
    clock: object, store: CountingStore
) -> None:
    """An option whose value is refused (a bad timeout, mesh name, request or
    OperationId) was never set: setting it again with a valid value is allowed, and only a
    second *accepted* value is InvalidOperation."""
    rec = Recorder()
    async with open_cluster(1, store=store, app=make_app(rec)) as cluster:
        actors = cluster.servers[0].actors
        op = OperationId.new()
        pairs: list[tuple[Callable[[Any], Any], Callable[[Any], Any]]] = [
            (lambda c: c.timeout(-1), lambda c: c.timeout(5)),
            (lambda c: c.in_mesh(""), lambda c: c.in_mesh("test")),
            (lambda c: c.request("text"), lambda c: c.request(b"r")),
            (lambda c: c.operation_id(7), lambda c: c.operation_id(op)),
        ]
        for make in (actors.create, actors.get_or_create):
            for bad, good in pairs:
                call = make("fluent", "player")
                with pytest.raises((ConfigurationError, InvalidOperation)):
                    bad(call)
                good(call)  # the refused value set nothing
                with pytest.raises(InvalidOperation):
                    good(call)
        for make_message in (actors.send, actors.request):
            message = make_message("fluent", "echo", b"")
            with pytest.raises(ConfigurationError):
                message.timeout(0)
            message.timeout(1)
            with pytest.raises(InvalidOperation):
                message.timeout(2)
        assert _actor_calls(store) == 0


async def test_request_size_limit_checked_before_any_store_call(
    clock: object, store: CountingStore
) -> None:
    """A creation request or a message payload larger than max_request_bytes (1 MiB) is
    rejected with InvalidOperation before any Store call; exactly 1 MiB is accepted and
    reaches OnCreateActor / the handler intact."""
    requests: list[bytes | None] = []

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        requests.append(event.request)
        return Approve()

    rec = Recorder()
    apps = [client_app(), make_app(rec, on_create=on_create)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        exact = bytes(range(256)) * (MIB // 256)
        assert len(exact) == MIB
        store.reset()
        for make in (caller.create, caller.get_or_create):
            with pytest.raises(InvalidOperation):
                await make("big", "player").request(exact + b"!").timeout(10)
        assert _actor_calls(store) == 0
        assert store.writes == store.count("renew_lease")  # no write but the lease renewer's
        created = await caller.create("big", "player").request(exact).timeout(30)
        assert isinstance(created, Created)
        assert requests == [exact]
        for message in (caller.send, caller.request):
            with pytest.raises(InvalidOperation):
                message("big", "echo", exact + b"!")
        assert await caller.request("big", "echo", exact).timeout(30) == exact
        local = cluster.servers[1].actors
        assert await local.request("big", "echo", exact).timeout(30) == exact
        with pytest.raises(InvalidOperation):
            local.send("big", "note", exact + b"!")


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_create_deadline_is_fixed_at_submit_and_covers_approval(
    clock: object, store: CountingStore
) -> None:
    """One end-to-end deadline is fixed when the create is submitted (not when the call
    is built) and covers the approval: an OnCreateActor slower than the timeout ends the
    create with DeadlineExceeded exactly at that deadline, for a remote and a local
    caller; nothing is published, the reservation is cleaned (capacity back, the id free)
    and the Entry Spot is free at once for the next creation of the same id."""
    stalled: list[str] = []

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        actor_id = event.actor_id.value
        if actor_id not in stalled:  # the first attempt of each id never answers
            stalled.append(actor_id)
            await trio.sleep_forever()
        return Approve()

    rec = Recorder()
    apps = [client_app(), make_app(rec, on_create=on_create)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        for caller_index, actor_id in ((0, "slow-remote"), (1, "slow-local")):
            actors = cluster.servers[caller_index].actors
            before = await _capacity(store)
            call = actors.create(actor_id, "player").timeout(4)
            await trio.sleep(10)  # the deadline does not start before submit
            start = trio.current_time()
            with pytest.raises(DeadlineExceeded):
                await call
            assert trio.current_time() == start + 4.0
            assert await actors.find(actor_id) is None
            assert await _capacity(store) == before
            retry = await actors.create(actor_id, "player").timeout(4)
            assert isinstance(retry, Created)
            assert trio.current_time() < start + 4.0 + 0.1
            assert await actors.find(actor_id) == retry.actor
        assert stalled == ["slow-remote", "slow-local"]
        assert rec.runs("slow-remote") == rec.runs("slow-local") == 2


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_request_deadline_is_fixed_at_submit(clock: object, store: CountingStore) -> None:
    """A request's one deadline is fixed at submit: a handler slower than the timeout
    ends the request DeadlineExceeded exactly at submit time + timeout, for a local and a
    remote caller, with a cold and with a cached route; the handler runs once and is not
    interrupted, and the Actor goes on serving afterwards."""
    rec = Recorder()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        assert isinstance(await cluster.servers[1].actors.create("slowpoke", "player"), Created)
        for round_, caller_index in enumerate((1, 0, 1, 0)):  # cold route, then cached
            actors = cluster.servers[caller_index].actors
            rec.gate = trio.Event()
            call = actors.request("slowpoke", "block", str(round_).encode()).timeout(2.5)
            await trio.sleep(7)  # not counted: the deadline starts at submit
            start = trio.current_time()
            with pytest.raises(DeadlineExceeded):
                await call
            assert trio.current_time() == start + 2.5
            rec.gate.set()  # the handler finishes now; its reply has nobody to go to
            await server_engine(cluster.servers[1]).wait_idle()
            assert await actors.request("slowpoke", "echo", b"hi") == b"hi"
        blocked = [h[3] for h in rec.handled if h[2] == "block"]
        assert blocked == [b"0", b"1", b"2", b"3"]


# --- mesh selection and placement ----------------------------------------------------------


async def test_mesh_selection(clock: object, store: CountingStore) -> None:
    """Mesh selection (spec 04 §6.3): InMesh omitted with exactly one Object mesh → that
    mesh; with two or more → InvalidOperation; InMesh naming a mesh this node is not in,
    or one where it has no Object role → NotFound; a server without Actor dispatch (no
    Object candidate at all) → NotConfigured. No error touches the Store."""
    rec = Recorder()
    configs = [
        _server_config(
            store, MeshConfig(name="world"), MeshConfig(name="plain", object_role=ObjectRole.NONE)
        ),
        _server_config(store, MeshConfig(name="world"), MeshConfig(name="side")),
    ]
    async with open_cluster(
        2, store=store, app=make_app(rec), config=lambda i: configs[i]
    ) as cluster:
        await cluster.wait_all_admitted()
        single, double = cluster.servers[0].actors, cluster.servers[1].actors
        created = await single.create("auto", "player").timeout(10)
        assert isinstance(created, Created) and created.actor.mesh_name == MeshName("world")
        store.reset()
        for make in (double.create, double.get_or_create):
            with pytest.raises(InvalidOperation):
                await make("ambiguous", "player").timeout(10)
        for mesh in ("nowhere", "plain"):
            with pytest.raises(NotFound):
                await single.create("lost", "player").in_mesh(mesh).timeout(10)
        assert _actor_calls(store) == 0
        chosen = await double.get_or_create("ambiguous", "player").in_mesh("side").timeout(10)
        assert isinstance(chosen, Created) and chosen.actor.mesh_name == MeshName("side")
    async with open_server(
        _server_config(store, MeshConfig(name="world", object_role=ObjectRole.NONE))
    ) as server:
        with pytest.raises(NotConfigured):
            server.actors.create("nothing", "player")


async def test_placement_checks_role_then_type(clock: object, store: CountingStore) -> None:
    """Placement checks the Object role, then the stable type, before any weight: a node
    with only a CLIENT role in the mesh and a node that does not register the type never
    get the Actor, however heavy their placement weight."""
    rec = Recorder()
    heavy = {"placement_weight": 1000.0}
    configs = [
        _server_config(
            store,
            MeshConfig(name="test", object_role=ObjectRole.CLIENT),
            MeshConfig(name="home"),
            **heavy,
        ),
        _server_config(store, **heavy),
        _server_config(store, placement_weight=0.0001),
    ]
    apps = [make_app(rec), make_app(rec, types=("npc",)), make_app(rec, types=("player", "npc"))]
    async with open_cluster(
        3, store=store, app=lambda i: apps[i], config=lambda i: configs[i]
    ) as cluster:
        await cluster.wait_all_admitted()
        hosts: Counter[int] = Counter()
        for i in range(12):
            if i % 3 == 0:
                call = cluster.servers[0].actors.create(f"p{i}", "player").in_mesh("test")
            else:
                call = cluster.servers[i % 3].actors.create(f"p{i}", "player")
            hosts[_index_of(cluster, await call.timeout(10))] += 1
        assert hosts == Counter({2: 12})
        # the type filter: "npc" is on nodes 1 and 2, the heavy one gets (nearly) all
        npc_hosts: Counter[int] = Counter()
        for i in range(12):
            created = await cluster.servers[2].actors.create(f"n{i}", "npc").timeout(10)
            npc_hosts[_index_of(cluster, created)] += 1
        assert 0 not in npc_hosts and npc_hosts[1] >= 10


async def test_placement_skips_full_nodes_and_fails_when_all_are_full(
    clock: object, store: CountingStore
) -> None:
    """Capacity comes before weight: a node whose active+pending count reached its
    node_capacity is skipped even when it is by far the heaviest; when every candidate is
    full the create ends CapacityExceeded (for GetOrCreate too) and changes nothing."""
    rec = Recorder()
    configs = [
        _server_config(store, node_capacity=3, placement_weight=1.0),
        _server_config(store, node_capacity=5, placement_weight=0.0001),
    ]
    async with open_cluster(
        2, store=store, app=make_app(rec), config=lambda i: configs[i]
    ) as cluster:
        await cluster.wait_all_admitted()
        hosts: list[int] = []
        for i in range(8):
            created = await cluster.servers[i % 2].actors.create(f"c{i}", "player").timeout(10)
            hosts.append(_index_of(cluster, created))
        # node 0 (10,000 times heavier) stops at its capacity; node 1 takes the rest
        assert hosts.count(0) == 3 and hosts.count(1) == 5
        before = await _capacity(store)
        for make in (cluster.servers[0].actors.create, cluster.servers[1].actors.get_or_create):
            with pytest.raises(CapacityExceeded):
                await make("overflow", "player").timeout(10)
        assert await _capacity(store) == before
        assert await cluster.servers[0].actors.find("overflow") is None
        # destroying one frees a unit
        ref = await cluster.servers[0].actors.find("c7")
        assert ref is not None and await cluster.servers[0].actors.destroy(ref)
        assert isinstance(await cluster.servers[0].actors.create("overflow", "player"), Created)


async def test_placement_weights_bias_the_choice(clock: object, store: CountingStore) -> None:
    """Among eligible nodes with capacity left, the node-wide placement weight biases the
    choice: with weights 1 and 0.0001 the heavy node gets the clear majority of 60
    creates (the light one's expected share is 0.006 Actors)."""
    rec = Recorder()
    configs = [
        _server_config(store, placement_weight=0.0001),
        _server_config(store, placement_weight=1.0),
    ]
    async with open_cluster(
        2, store=store, app=make_app(rec), config=lambda i: configs[i]
    ) as cluster:
        await cluster.wait_all_admitted()
        hosts: Counter[int] = Counter()
        for i in range(60):
            created = await cluster.servers[i % 2].actors.create(f"w{i}", "player").timeout(10)
            hosts[_index_of(cluster, created)] += 1
        assert hosts[1] >= 58, hosts


async def test_no_node_registers_the_type(clock: object, store: CountingStore) -> None:
    """Create or GetOrCreate of a stable type no live node in the mesh registers ends
    NotFound ("no Actor factory"), without writing to the Store; a type registered only
    by a node of another mesh is NotFound in this one as well."""
    rec = Recorder()
    configs = [
        _server_config(store, MeshConfig(name="test"), MeshConfig(name="far")),
        _server_config(store, MeshConfig(name="far")),
    ]
    apps = [make_app(rec), make_app(rec, types=("hermit",))]
    async with open_cluster(
        2, store=store, app=lambda i: apps[i], config=lambda i: configs[i]
    ) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        store.reset()
        writes = store.writes - store.count("renew_lease")
        for make in (actors.create, actors.get_or_create):
            with pytest.raises(NotFound):
                await make("orphan", "unregistered").in_mesh("test").timeout(10)
            with pytest.raises(NotFound):
                await make("orphan", "hermit").in_mesh("test").timeout(10)
        assert store.writes - store.count("renew_lease") == writes
        assert rec.runs("orphan") == 0
        far = await actors.create("orphan", "hermit").in_mesh("far").timeout(10)
        assert _index_of(cluster, far) == 1


# --- messaging failures --------------------------------------------------------------------


class Failing:
    """Handlers that fail in the ways spec 04 §8.1 lists."""

    log: list[bytes]

    def __init__(self, context: ActorContext) -> None:
        self.context = context

    @on_request("ok")
    async def ok(self, payload: bytes) -> bytes:
        Failing.log.append(payload)
        return b"ok:" + payload

    @on_request("crash")
    async def crash(self, payload: bytes) -> bytes:
        Failing.log.append(payload)
        raise KeyError("application bug")

    @on_request("typed")
    async def typed(self, payload: bytes) -> bytes:
        Failing.log.append(payload)
        raise AlreadyExists("the application says: exists")

    @on_send("crash-send")
    async def crash_send(self, payload: bytes) -> None:
        Failing.log.append(payload)
        raise ValueError("one-way failure")


async def test_messaging_failures_are_typed(clock: object, store: CountingStore) -> None:
    """A request to a missing handler ends NotFound; a handler raising ends
    ApplicationError, and one raising a ZLinkError subclass ends with that kind and
    message, locally and remotely alike; a one-way send's handler error (or missing
    handler) never reaches the sender, and the Actor goes on serving."""
    Failing.log = []
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("failing", Failing, relocation=DisableRelocation())
    apps = [client_app(), app]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        assert isinstance(await cluster.servers[1].actors.create("f", "failing"), Created)
        for caller in (cluster.servers[0].actors, cluster.servers[1].actors):
            with pytest.raises(NotFound, match="no request handler"):
                await caller.request("f", "missing", b"1")
            with pytest.raises(ApplicationError, match="KeyError"):
                await caller.request("f", "crash", b"2")
            with pytest.raises(AlreadyExists, match="the application says: exists"):
                await caller.request("f", "typed", b"3")
            assert await caller.send("f", "crash-send", b"4") is None
            assert await caller.send("f", "missing", b"5") is None
            assert await caller.request("f", "ok", b"6") == b"ok:6"
        assert Failing.log == [b"2", b"3", b"4", b"6"] * 2
        stats = cluster.servers[1].statistics().actors
        assert stats is not None
        (failing,) = stats.types
        assert (failing.dispatch_ok, failing.dispatch_failed, failing.dispatch_no_handler) == (
            2,
            6,
            4,
        )


# --- the route cache -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a04_17_route_cache_honours_route_cache_max_age(
    clock: object, store: CountingStore
) -> None:
    """A04-17: the positive route cache is used only within RouteCacheMaxAge: on a mock
    clock a second request within the max age reads nothing from the Store, one after it
    reads the authority again (local and remote callers alike); RouteCacheMaxAge = 0
    disables the cache (one read per request)."""
    for round_, max_age in enumerate((5.0, 0.0)):
        actor_id = f"cached-{round_}"
        rec = Recorder()
        apps = [client_app(), make_app(rec)]
        config = ServerConfig(route_cache_max_age=max_age)
        async with open_cluster(2, store=store, app=apps.__getitem__, config=config) as cluster:
            await cluster.wait_all_admitted()
            assert isinstance(await cluster.servers[1].actors.create(actor_id, "player"), Created)
            for caller in (cluster.servers[0].actors, cluster.servers[1].actors):
                reads: list[int] = []
                for pause in (0.0, 4.9, 0.2, 1.0):
                    await trio.sleep(pause)
                    before = store.count("read")
                    assert await caller.request(actor_id, "echo", b"x") == b"x"
                    reads.append(store.count("read") - before)
                if max_age:
                    # read at t, cached until t + 5: t+4.9 hits, t+5.1 misses, t+6.1 hits
                    assert reads == [1, 0, 1, 0]
                else:
                    assert reads == [1, 1, 1, 1]
            stats = cluster.servers[0].statistics().actors
            assert stats is not None
            assert stats.route_cache_hits == (2 if max_age else 0)


# --- observability -----------------------------------------------------------------------------

SECRET_IDS = ("zz-secret-id-alpha", "zz-secret-id-beta", "zz-secret-id-gamma", "zz-secret-npc")


async def test_statistics_per_type_without_actor_ids(clock: object, store: CountingStore) -> None:
    """Observability (spec 04 §8.2): server.statistics().actors reports per stable type
    the current mesh, Ready counts, the application backlog and dispatch results; no
    ActorId appears anywhere in the statistics record."""
    rec = Recorder()
    rec.gate = trio.Event()
    apps = [client_app(), make_app(rec, types=("player", "npc"))]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[1]
        for actor_id in SECRET_IDS:
            st = "npc" if actor_id.endswith("npc") else "player"
            assert isinstance(await host.actors.create(actor_id, st), Created)
        caller = cluster.servers[0].actors
        assert await caller.request(SECRET_IDS[0], "echo", b"a") == b"a"
        assert await host.actors.request(SECRET_IDS[3], "echo", b"b") == b"b"
        with pytest.raises(ApplicationError):
            await caller.request(SECRET_IDS[1], "fail", b"")
        with pytest.raises(NotFound):
            await caller.request(SECRET_IDS[1], "nope", b"")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: host.actors.request(SECRET_IDS[2], "block").submit())
            await rec.entered.wait()
            for i in range(3):  # route cached: admitted locally, no Store I/O
                await host.actors.send(SECRET_IDS[2], "note", str(i).encode())
            stats = host.statistics().actors
            assert stats is not None
            by_type = {t.stable_type: t for t in stats.types}
            assert set(by_type) == {"npc", "player"}
            player, npc = by_type["player"], by_type["npc"]
            assert (player.ready, npc.ready) == (3, 1)
            assert player.mesh_names == npc.mesh_names == ("test",)
            assert (player.application_backlog, npc.application_backlog) == (3, 0)
            assert player.control_backlog == npc.control_backlog == 0
            assert (player.dispatch_ok, player.dispatch_failed, player.dispatch_no_handler) == (
                1,
                1,
                1,
            )
            assert npc.dispatch_ok == 1
            rec.gate.set()
        await server_engine(host).wait_idle()
        stats = host.statistics().actors
        assert stats is not None and stats.hosted == 4
        player = next(t for t in stats.types if t.stable_type == "player")
        assert player.application_backlog == 0 and player.dispatch_ok == 5
        for server in cluster.servers:
            text = repr(server.statistics())
            for actor_id in SECRET_IDS:
                assert actor_id not in text


@pytest.mark.parametrize("backend", ["memory"])  # "every task blocked" must mean "queued"
async def test_statistics_show_the_control_backlog(clock: object, store: CountingStore) -> None:
    """Observability (spec 04 §8.2): a destroy behind a running turn shows up as control
    backlog (and the Actor as destroying, no longer Ready), apart from the application
    backlog; payloads it drops are counted as dropped dispatch results."""
    rec = Recorder()
    rec.gate = trio.Event()
    async with open_cluster(1, store=store, app=make_app(rec)) as cluster:
        server = cluster.servers[0]
        created = await server.actors.create(SECRET_IDS[0], "player")
        assert isinstance(created, Created)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: server.actors.request(SECRET_IDS[0], "block").submit())
            await rec.entered.wait()
            await server.actors.send(SECRET_IDS[0], "note", b"queued")
            nursery.start_soon(server.actors.destroy, created.actor)
            await trio.testing.wait_all_tasks_blocked()
            stats = server.statistics().actors
            assert stats is not None
            (player,) = stats.types
            assert (player.ready, player.destroying) == (0, 1)
            assert (player.application_backlog, player.control_backlog) == (1, 1)
            rec.gate.set()
        stats = server.statistics().actors
        assert stats is not None and stats.hosted == 0
        (player,) = stats.types
        assert player.control_backlog == player.application_backlog == 0
        assert player.dispatch_dropped == 1
        assert SECRET_IDS[0] not in repr(server.statistics())
