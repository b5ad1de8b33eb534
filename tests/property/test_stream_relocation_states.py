"""Random interleavings of relays, seals (42), commits and aborts (44), seal timeouts and
release steps on one binding of the SessionBindingAggregate (I/O free, white-box), against
what spec 02 §8 promises the session side:

* relays leave the aggregate (submitted directly, or taken from the held queue) in the
  order they were accepted, each at most once;
* a relay is never submitted while its binding is sealed, and nothing accepted after a
  44 overtakes what was held before it;
* a seal timeout drops exactly what was still held and ends the binding; a late 44 then
  changes nothing;
* the route and the ActorRef location snapshot always name the same node.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from zlink_trio.errors import SessionNotBound
from zlink_trio.ids import (
    ActorId,
    ActorRef,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
)
from zlink_trio.stream.binding import (
    Binding,
    BindingRoute,
    Bound,
    Ended,
    Releasing,
    Sealed,
    SessionBindingAggregate,
    SessionOwnerIdentity,
)
from zlink_trio.wire import BindTail, SessionRouteAbort, SessionRouteCommit

ME = NodeRid(bytes(range(16)))
MESH = MeshName("m")
IDENTITY = SessionOwnerIdentity(ME, NodeGeneration(1), 7, OwnerLeaseGeneration(2))
ACTOR = ActorId("a")
GEN = ObjectGeneration(5)
SESSION = b"s" * 16


def _bound(aggregate: SessionBindingAggregate) -> tuple[object, Binding]:
    entry = aggregate.open(SESSION)
    generation = aggregate.begin_bind(entry)
    tail = BindTail(
        binding_generation=generation,
        authority_owner_generation=AuthorityOwnerGeneration(4),
        owner_lease_generation=OwnerLeaseGeneration(9),
    )
    owner = NodeRid(bytes(range(16, 32)))
    route = BindingRoute(
        MESH, owner, NodeGeneration(3), AuthorityOwnerGeneration(4), OwnerLeaseGeneration(9)
    )
    binding = aggregate.commit_bind(entry, ActorRef(ACTOR, GEN, MESH, owner), tail, route)
    assert binding is not None
    return entry, binding


OPS = st.lists(
    st.sampled_from(["relay", "seal", "commit", "abort", "expire", "release", "dup44"]),
    min_size=1,
    max_size=40,
)
NODES = [NodeRid(bytes([n]) * 16) for n in (1, 2, 3)]


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_relays_leave_in_acceptance_order_through_any_sequence_of_moves(ops: list[str]) -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    _, binding = _bound(aggregate)
    b = binding  # the same object, typed loosely
    accepted: list[int] = []
    submitted: list[int] = []
    dropped: list[int] = []
    relocation = 0
    last: SessionRouteCommit | None = None
    owner_generation = 4
    for op in ops:
        state = b.state  # type: ignore[attr-defined]
        if isinstance(state, Ended):
            try:
                aggregate.relay(b)  # type: ignore[arg-type]
            except SessionNotBound:
                pass
            else:
                raise AssertionError("an ended binding accepted a relay")
            if last is not None:
                assert aggregate.apply_route(last) is None
            break
        if op == "relay":
            sequence = aggregate.relay(b)  # type: ignore[arg-type]
            accepted.append(sequence)
            if not aggregate.hold(b, sequence, sequence):  # type: ignore[arg-type]
                assert isinstance(state, Bound)
                submitted.append(sequence)
        elif op == "seal":
            relocation += 1
            aggregate.install_seal(
                SESSION,
                b.generation,  # type: ignore[attr-defined]
                ACTOR,
                GEN,
                OperationId(relocation),
                3.0,
            )
        elif op in ("commit", "dup44"):
            if op == "dup44" and last is not None:
                assert aggregate.apply_route(last) is None  # a duplicate changes nothing
                continue
            if not isinstance(state, Sealed):
                continue
            owner_generation += 1
            target = NODES[relocation % 3]
            last = SessionRouteCommit(
                relocation_id=state.relocation_id,
                actor_id=ACTOR,
                object_generation=GEN,
                target_mesh=MESH,
                target_rid=target,
                target_node_generation=NodeGeneration(8),
                authority_owner_generation=AuthorityOwnerGeneration(owner_generation),
                owner_lease_generation=OwnerLeaseGeneration(10),
                session_owner_rid=ME,
                session_owner_generation=NodeGeneration(1),
                session_rid=SESSION,
                binding_generation=b.generation,  # type: ignore[attr-defined]
            )
            assert aggregate.apply_route(last) is not None
            assert isinstance(b.state, Releasing)  # type: ignore[attr-defined]
        elif op == "abort":
            if not isinstance(state, Sealed):
                continue
            abort = SessionRouteAbort(
                relocation_id=state.relocation_id,
                session_rid=SESSION,
                binding_generation=b.generation,  # type: ignore[attr-defined]
            )
            assert aggregate.abort_seal(abort) is not None
        elif op == "expire":
            if isinstance(state, Sealed):
                held = [h.item for h in state.held]
                assert aggregate.seal_expired(b, state.relocation_id)  # type: ignore[arg-type]
                dropped.extend(held)  # type: ignore[arg-type]
        elif op == "release":
            submitted.extend(h.item for h in aggregate.take_held(b))  # type: ignore[arg-type, misc]
        route, ref = b.route, b.ref  # type: ignore[attr-defined]
        assert route.node_rid == ref.node_rid and route.mesh_name == ref.mesh_name
        assert ref.object_generation == GEN
    # drain what is left (a releasing binding keeps going)
    while isinstance(b.state, Releasing):  # type: ignore[attr-defined]
        submitted.extend(h.item for h in aggregate.take_held(b))  # type: ignore[arg-type, misc]
    assert submitted == sorted(submitted)
    assert len(set(submitted)) == len(submitted)
    assert not set(submitted) & set(dropped)
    state = b.state  # type: ignore[attr-defined]
    still = [h.item for h in state.held] if isinstance(state, Sealed) else []
    assert sorted(submitted + dropped + still) == accepted  # type: ignore[operator]
