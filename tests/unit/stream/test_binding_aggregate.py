"""The SessionBindingAggregate on its own (white-box): the one place of Session-side
validation, with the relocation seal and route state the relocation issue will drive
(spec 02 §8.1-§8.2: commands 42 and 44 are not wired yet)."""

from __future__ import annotations

import pytest

from zlink_trio.errors import SessionNotBound, ShuttingDown, Unavailable
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
    BindingRoute,
    Bound,
    Ended,
    EndReason,
    Releasing,
    Sealed,
    SealOutcome,
    SessionBindingAggregate,
    SessionOwnerIdentity,
    SessionStatus,
)
from zlink_trio.wire import (
    ActorAuthorityFence,
    BindTail,
    BoundSessionReplaced,
    BoundSessionSend,
    RetiredSessionBinding,
    SessionRouteAbort,
    SessionRouteCommit,
)

ME = NodeRid(bytes(range(16)))
OWNER = NodeRid(bytes(range(16, 32)))
TARGET = NodeRid(bytes(range(32, 48)))
MESH = MeshName("m")
IDENTITY = SessionOwnerIdentity(ME, NodeGeneration(1), 7, OwnerLeaseGeneration(2))
ACTOR = ActorId("a")
GEN = ObjectGeneration(5)
REF = ActorRef(ACTOR, GEN, MESH, OWNER)
ROUTE = BindingRoute(
    MESH, OWNER, NodeGeneration(3), AuthorityOwnerGeneration(4), OwnerLeaseGeneration(9)
)
SESSION = b"s" * 16


def _bound(aggregate: SessionBindingAggregate) -> tuple[object, object]:
    entry = aggregate.open(SESSION)
    generation = aggregate.begin_bind(entry)
    tail = BindTail(
        binding_generation=generation,
        authority_owner_generation=AuthorityOwnerGeneration(4),
        owner_lease_generation=OwnerLeaseGeneration(9),
    )
    binding = aggregate.commit_bind(entry, REF, tail, ROUTE)
    assert binding is not None
    return entry, binding


def _push(binding: object, **changes: object) -> BoundSessionSend:
    fields: dict[str, object] = dict(
        actor_id=ACTOR,
        object_generation=GEN,
        source_rid=OWNER,
        source_node_generation=NodeGeneration(3),
        authority_owner_generation=AuthorityOwnerGeneration(4),
        session_owner_rid=ME,
        session_owner_generation=NodeGeneration(1),
        session_rid=SESSION,
        expected_binding_generation=binding.generation,  # type: ignore[attr-defined]
        packet_name="p",
        payload=b"",
    )
    fields.update(changes)
    return BoundSessionSend(**fields)  # type: ignore[arg-type]


def test_a_push_is_accepted_only_with_all_four_values_current() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    _, binding = _bound(aggregate)
    assert aggregate.accept_push(_push(binding)) is binding
    for change in (
        {"object_generation": ObjectGeneration(6)},
        {"source_node_generation": NodeGeneration(99)},
        {"authority_owner_generation": AuthorityOwnerGeneration(5)},
        {"expected_binding_generation": 999},
        {"session_rid": b"x" * 16},
        {"session_owner_generation": NodeGeneration(2)},
    ):
        assert isinstance(aggregate.accept_push(_push(binding, **change)), str), change


def test_replaced_needs_every_identity_value() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    entry, binding = _bound(aggregate)

    def record(**previous: object) -> BoundSessionReplaced:
        values: dict[str, object] = dict(
            node_rid=ME,
            node_generation=NodeGeneration(1),
            owner_id=7,
            owner_lease_generation=OwnerLeaseGeneration(2),
            session_rid=SESSION,
            retired_binding_generation=binding.generation,  # type: ignore[attr-defined]
        )
        values.update(previous)
        return BoundSessionReplaced(
            source=ActorAuthorityFence(
                actor_id=ACTOR,
                object_generation=GEN,
                authority_owner_generation=AuthorityOwnerGeneration(4),
                node_rid=OWNER,
                node_generation=NodeGeneration(3),
            ),
            previous=RetiredSessionBinding(**values),  # type: ignore[arg-type]
        )

    for wrong in (
        {"owner_id": 8},
        {"owner_lease_generation": OwnerLeaseGeneration(3)},
        {"node_generation": NodeGeneration(9)},
        {"retired_binding_generation": 999},
    ):
        assert isinstance(aggregate.replaced(record(**wrong)), str)
    assert entry.status is SessionStatus.OPEN  # type: ignore[attr-defined]
    assert aggregate.replaced(record()) is binding
    assert entry.status is SessionStatus.CLOSING  # type: ignore[attr-defined]
    assert binding.state == Ended(EndReason.REPLACED)  # type: ignore[attr-defined]
    assert isinstance(aggregate.replaced(record()), str)  # a duplicate is ignored


def test_the_seal_holds_relays_and_the_route_commit_switches_route_and_ref_together() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    _entry, binding = _bound(aggregate)
    relocation = OperationId(11)
    outcome, sealed = aggregate.install_seal(
        SESSION,
        binding.generation,
        ACTOR,
        GEN,
        relocation,
        3.0,  # type: ignore[attr-defined]
    )
    assert outcome is SealOutcome.SEALED and sealed is binding
    assert (
        aggregate.install_seal(
            SESSION,
            binding.generation,
            ACTOR,
            GEN,
            relocation,
            3.0,  # type: ignore[attr-defined]
        )[0]
        is SealOutcome.SEALED
    )  # the same relocation again: no-op
    assert (
        aggregate.install_seal(
            SESSION,
            binding.generation,
            ACTOR,
            GEN,
            OperationId(12),
            3.0,  # type: ignore[attr-defined]
        )[0]
        is SealOutcome.REJECTED
    )
    for n in range(3):
        assert aggregate.hold(binding, f"m{n}", aggregate.relay(binding))  # type: ignore[arg-type]
    commit = SessionRouteCommit(
        relocation_id=relocation,
        actor_id=ACTOR,
        object_generation=GEN,
        target_mesh=MESH,
        target_rid=TARGET,
        target_node_generation=NodeGeneration(8),
        authority_owner_generation=AuthorityOwnerGeneration(5),
        owner_lease_generation=OwnerLeaseGeneration(10),
        session_owner_rid=ME,
        session_owner_generation=NodeGeneration(1),
        session_rid=SESSION,
        binding_generation=binding.generation,  # type: ignore[attr-defined]
    )
    applied = aggregate.apply_route(commit)
    assert applied is not None
    done, held = applied
    assert done is binding and [h.item for h in held] == ["m0", "m1", "m2"]
    assert [h.sequence for h in held] == sorted(h.sequence for h in held)
    assert binding.ref == ActorRef(ACTOR, GEN, MESH, TARGET)  # type: ignore[attr-defined]
    assert binding.route.node_rid == TARGET  # type: ignore[attr-defined]
    # releasing: a relay accepted now queues behind the held ones, then Bound
    assert isinstance(binding.state, Releasing)  # type: ignore[attr-defined]
    assert aggregate.hold(binding, "m3", aggregate.relay(binding))  # type: ignore[arg-type]
    assert [h.item for h in aggregate.take_held(binding)] == ["m0", "m1", "m2", "m3"]  # type: ignore[arg-type]
    assert aggregate.take_held(binding) == []  # type: ignore[arg-type]
    assert isinstance(binding.state, Bound)  # type: ignore[attr-defined]
    assert not aggregate.hold(binding, "m4", aggregate.relay(binding))  # type: ignore[arg-type]
    assert aggregate.apply_route(commit) is None  # a duplicate 44: late_session_route_update
    assert aggregate.on_node(TARGET) == [binding] and aggregate.on_node(OWNER) == []


def test_abort_releases_only_the_matching_seal_and_the_timeout_wins_once() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    _, binding = _bound(aggregate)
    relocation = OperationId(21)
    aggregate.install_seal(SESSION, binding.generation, ACTOR, GEN, relocation, 3.0)  # type: ignore[attr-defined]
    aggregate.hold(binding, "held", aggregate.relay(binding))  # type: ignore[arg-type]
    wrong = SessionRouteAbort(
        relocation_id=OperationId(22),
        session_rid=SESSION,
        binding_generation=binding.generation,  # type: ignore[attr-defined]
    )
    assert aggregate.abort_seal(wrong) is None
    right = SessionRouteAbort(
        relocation_id=relocation,
        session_rid=SESSION,
        binding_generation=binding.generation,  # type: ignore[attr-defined]
    )
    aborted = aggregate.abort_seal(right)
    assert aborted is not None and [h.item for h in aborted[1]] == ["held"]
    assert binding.ref == REF  # type: ignore[attr-defined]
    # seal again, then the timeout comes first: the binding ends; a late 44 changes nothing
    aggregate.install_seal(SESSION, binding.generation, ACTOR, GEN, relocation, 3.0)  # type: ignore[attr-defined]
    assert isinstance(binding.state, Sealed)  # type: ignore[attr-defined]
    assert aggregate.seal_expired(binding, relocation)  # type: ignore[arg-type]
    assert not aggregate.seal_expired(binding, relocation)  # type: ignore[arg-type]
    assert aggregate.abort_seal(right) is None
    with pytest.raises(SessionNotBound):
        aggregate.relay(binding)  # type: ignore[arg-type]


def test_shutdown_and_close_refuse_binds_and_relays() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    entry, binding = _bound(aggregate)
    aggregate.stop_admitting()
    with pytest.raises(ShuttingDown):
        aggregate.begin_bind(entry)  # type: ignore[arg-type]
    with pytest.raises(ShuttingDown):
        aggregate.open(b"t" * 16)
    snapshot = aggregate.close(entry)  # type: ignore[arg-type]
    assert snapshot == [binding]
    with pytest.raises((SessionNotBound, Unavailable)):
        aggregate.relay(binding)  # type: ignore[arg-type]
    assert isinstance(aggregate.accept_push(_push(binding)), str)


def test_a_push_for_a_bind_in_flight_is_kept_until_the_bind_ends() -> None:
    """B02-03 (spec 02 §5 point 1): a push that overtook its bind's terminal is kept for
    that bind (never for another generation, another session owner or a closed session)
    and handed back, in arrival order, when the bind ends; nothing is kept afterwards."""
    aggregate = SessionBindingAggregate(IDENTITY)
    entry = aggregate.open(SESSION)
    generation = aggregate.begin_bind(entry)
    pending = type("Pending", (), {"generation": generation})()
    first, second = _push(pending, packet_name="p1"), _push(pending, packet_name="p2")
    assert aggregate.accept_push(first) is None
    assert aggregate.accept_push(second) is None
    other_owner = _push(pending, session_owner_generation=NodeGeneration(2))
    assert isinstance(aggregate.accept_push(other_owner), str)
    other_generation = _push(type("Other", (), {"generation": generation + 1})())
    assert isinstance(aggregate.accept_push(other_generation), str)
    tail = BindTail(
        binding_generation=generation,
        authority_owner_generation=AuthorityOwnerGeneration(4),
        owner_lease_generation=OwnerLeaseGeneration(9),
    )
    binding = aggregate.commit_bind(entry, REF, tail, ROUTE)
    assert binding is not None
    assert aggregate.accept_push(_push(binding)) is binding  # committed: straight through
    assert aggregate.end_bind(entry, generation) == [first, second]
    assert aggregate.end_bind(entry, generation) == []
    later = aggregate.begin_bind(entry)
    aggregate.close(entry)
    assert isinstance(aggregate.accept_push(_push(type("L", (), {"generation": later})())), str)
    assert aggregate.end_bind(entry, later) == []
