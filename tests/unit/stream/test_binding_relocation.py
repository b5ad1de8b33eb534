"""The aggregate's relocation states (white-box): releasing, early pushes of the next
owner, a session closing during the seal (parked until its 44), and the carried binding
value's strict decoding."""

from __future__ import annotations

import cbor2
import pytest
from test_binding_aggregate import ACTOR, GEN, IDENTITY, ME, MESH, SESSION, TARGET, _bound, _push

from zlink_trio.errors import ProtocolError
from zlink_trio.ids import (
    AuthorityOwnerGeneration,
    NodeGeneration,
    OperationId,
    OwnerLeaseGeneration,
)
from zlink_trio.stream.binding import (
    MAX_EARLY_PUSHES,
    Bound,
    Ended,
    EndReason,
    Releasing,
    Sealed,
    SessionBindingAggregate,
)
from zlink_trio.wire import SessionRouteAbort, SessionRouteCommit
from zlink_trio.wire.carried import CarriedSessionBinding, decode_carried, encode_carried

RELOCATION = OperationId(31)


def _commit(binding: object, **changes: object) -> SessionRouteCommit:
    fields: dict[str, object] = dict(
        relocation_id=RELOCATION,
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
    fields.update(changes)
    return SessionRouteCommit(**fields)  # type: ignore[arg-type]


def _seal(aggregate: SessionBindingAggregate, binding: object) -> None:
    aggregate.install_seal(SESSION, binding.generation, ACTOR, GEN, RELOCATION, 3.0)  # type: ignore[attr-defined]


def test_pushes_of_the_next_owner_are_kept_until_the_commit() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    _, binding = _bound(aggregate)
    _seal(aggregate, binding)
    newer = _push(
        binding,
        source_rid=TARGET,
        source_node_generation=NodeGeneration(8),
        authority_owner_generation=AuthorityOwnerGeneration(5),
    )
    older = _push(
        binding, source_rid=TARGET, authority_owner_generation=AuthorityOwnerGeneration(3)
    )
    assert aggregate.accept_push(newer) is None  # kept
    assert isinstance(aggregate.accept_push(older), str)  # not a newer owner: rejected
    assert aggregate.accept_push(_push(binding)) is binding  # the source still pushes
    state = binding.state  # type: ignore[attr-defined]
    assert isinstance(state, Sealed) and state.early == [newer]
    for _ in range(MAX_EARLY_PUSHES):
        state.early.append(newer)
    assert isinstance(aggregate.accept_push(newer), str)  # bounded
    del state.early[1:]
    assert aggregate.apply_route(_commit(binding)) is not None
    released = binding.state  # type: ignore[attr-defined]
    assert isinstance(released, Releasing) and released.early == [newer]
    assert aggregate.accept_push(newer) is binding  # the committed route accepts it now
    assert isinstance(aggregate.accept_push(_push(binding)), str)  # the source no longer


def test_a_commit_of_another_generation_or_relocation_changes_nothing() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    _, binding = _bound(aggregate)
    _seal(aggregate, binding)
    from zlink_trio.ids import ObjectGeneration

    assert aggregate.apply_route(_commit(binding, object_generation=ObjectGeneration(6))) is None
    assert aggregate.apply_route(_commit(binding, relocation_id=OperationId(99))) is None
    assert isinstance(binding.state, Sealed)  # type: ignore[attr-defined]
    assert binding.route.node_rid != TARGET  # type: ignore[attr-defined]


def test_a_session_closed_during_the_seal_parks_the_binding_until_its_44() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    entry, binding = _bound(aggregate)
    _seal(aggregate, binding)
    aggregate.hold(binding, "lost with the session", 1)  # type: ignore[arg-type]
    assert aggregate.close(entry) == [binding]  # type: ignore[arg-type]
    assert aggregate.apply_route(_commit(binding)) is None  # no session any more
    parked = aggregate.resolve_parked(_commit(binding))
    assert parked is not None and parked[0] is binding
    assert binding.route.node_rid == TARGET  # type: ignore[attr-defined]
    assert binding.ref.node_rid == TARGET  # type: ignore[attr-defined]
    assert binding.state == Ended(EndReason.DISCONNECTED)  # type: ignore[attr-defined]
    assert aggregate.resolve_parked(_commit(binding)) is None  # once


def test_a_parked_binding_is_dropped_at_its_deadline_or_kept_on_abort() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    entry, binding = _bound(aggregate)
    _seal(aggregate, binding)
    aggregate.close(entry)  # type: ignore[arg-type]
    assert aggregate.drop_parked(binding)  # type: ignore[arg-type]
    assert not aggregate.drop_parked(binding)  # type: ignore[arg-type]
    abort = SessionRouteAbort(
        relocation_id=RELOCATION,
        session_rid=SESSION,
        binding_generation=binding.generation,  # type: ignore[attr-defined]
    )
    assert aggregate.resolve_parked(abort) is None

    aggregate = SessionBindingAggregate(IDENTITY)
    entry, binding = _bound(aggregate)
    route = binding.route  # type: ignore[attr-defined]
    _seal(aggregate, binding)
    aggregate.close(entry)  # type: ignore[arg-type]
    parked = aggregate.resolve_parked(abort)
    assert parked is not None and binding.route == route  # type: ignore[attr-defined]


def test_a_new_seal_while_releasing_keeps_the_rest_first() -> None:
    aggregate = SessionBindingAggregate(IDENTITY)
    _, binding = _bound(aggregate)
    _seal(aggregate, binding)
    aggregate.hold(binding, "h0", 1)  # type: ignore[arg-type]
    aggregate.apply_route(_commit(binding))
    aggregate.install_seal(SESSION, binding.generation, ACTOR, GEN, OperationId(32), 6.0)  # type: ignore[attr-defined]
    aggregate.hold(binding, "h1", 2)  # type: ignore[arg-type]
    state = binding.state  # type: ignore[attr-defined]
    assert isinstance(state, Sealed) and [h.item for h in state.held] == ["h0", "h1"]
    assert aggregate.take_held(binding) == []  # type: ignore[arg-type]  # not releasing
    assert not isinstance(binding.state, Bound)  # type: ignore[attr-defined]


def test_the_carried_binding_round_trips_and_decodes_strictly() -> None:
    value = CarriedSessionBinding(
        session_mesh=MESH,
        owner_rid=ME,
        owner_generation=NodeGeneration(1),
        owner_id=7,
        owner_lease_generation=OwnerLeaseGeneration(2),
        session_rid=SESSION,
        binding_generation=3,
        sealed=True,
    )
    data = encode_carried(value)
    assert decode_carried(data) == value
    items = cbor2.loads(data)
    for bad in (
        data + b"\x00",
        cbor2.dumps([2, *items[1:]]),
        cbor2.dumps(items[:-1]),
        cbor2.dumps({1: 2}),
        b"\xff",
        cbor2.dumps([*items[:-1], 1]),
        b"\x9f\xff",
    ):
        with pytest.raises(ProtocolError):
            decode_carried(bad)
