"""Lane policy types (spec 02 §11): which states each kind of lane can be in.

The three kinds of lane differ in the states they can be in, and meaningless combinations
(a relocation seal on a session lane, "awaiting return" on an Actor delivery lane, ...)
cannot be written: each policy is a frozen attrs class whose ``state`` field is typed as
the union of exactly the states of the spec's table, and each transition is a function that
accepts only the policy kind it applies to.

=====================  ======================================  ===================================
lane                   states it has                           states it cannot have
=====================  ======================================  ===================================
:class:`SpotLane`      ``Open | AwaitingReturn | RelocationSealed``  connection closed
:class:`SessionLane`   ``Open | ConnectionClosed``             awaiting return, relocation sealed
:class:`ActorDeliveryLane`  none (no ``state`` field at all)   all three
=====================  ======================================  ===================================

A type checker rejects the impossible combinations (``tests/unit/engine/
test_lane_policy_static.py`` proves it with ``mypy --strict``); validators reject them at
run time too, for callers that bypass the type checker. Transitions raise
:class:`~zlink_trio.errors.InvalidOperation` when the lane is in a state the transition does
not start from.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final, TypeAlias

import attrs

from ..errors import InvalidOperation

__all__ = [
    "OPEN",
    "ActorDeliveryLane",
    "AwaitingReturn",
    "ConnectionClosed",
    "LanePolicy",
    "Open",
    "RelocationSealed",
    "SessionLane",
    "SessionLaneState",
    "SpotLane",
    "SpotLaneState",
    "close_connection",
    "lend_turn",
    "return_turn",
    "seal",
    "unseal",
]


@attrs.frozen
class Open:
    """The lane admits work and runs turns normally."""


@attrs.frozen
class AwaitingReturn:
    """A Spot lane lent its turn out: it keeps admitting work but starts no new turn until
    the turn is returned (the Spot's "반납 대기")."""


@attrs.frozen
class RelocationSealed:
    """A Spot lane sealed for relocation ``relocation_id``: application ingress is held,
    not run; lifecycle work (the relocation's own control records) still runs."""

    relocation_id: Hashable


@attrs.frozen
class ConnectionClosed:
    """A session lane whose connection closed: application ingress is rejected and the
    pending application work was dropped (and reported); lifecycle cleanup still runs."""


OPEN: Final = Open()
"""The shared ``Open()`` value (states carry no data, so one instance serves all lanes)."""

SpotLaneState: TypeAlias = Open | AwaitingReturn | RelocationSealed
SessionLaneState: TypeAlias = Open | ConnectionClosed


@attrs.frozen
class SpotLane:
    """Policy of a Spot lane: open, awaiting the return of a lent turn, or relocation-sealed."""

    state: SpotLaneState = attrs.field(
        default=OPEN,
        validator=attrs.validators.instance_of((Open, AwaitingReturn, RelocationSealed)),
    )


@attrs.frozen
class SessionLane:
    """Policy of a session lane: open or connection-closed."""

    state: SessionLaneState = attrs.field(
        default=OPEN, validator=attrs.validators.instance_of((Open, ConnectionClosed))
    )


@attrs.frozen
class ActorDeliveryLane:
    """Policy of an Actor delivery lane. It has no state: it is always open."""


LanePolicy: TypeAlias = SpotLane | SessionLane | ActorDeliveryLane


def _require(policy: object, kind: type[SpotLane] | type[SessionLane]) -> None:
    # The static types already say this; the check guards dynamically typed callers.
    if not isinstance(policy, kind):
        raise InvalidOperation(f"{kind.__name__} transition applied to {policy!r}")


def seal(policy: SpotLane, relocation_id: Hashable) -> SpotLane:
    """Seal an open Spot lane for one relocation. Sealing again for the same relocation is
    a no-op; sealing for another relocation, or while awaiting return, is invalid."""
    _require(policy, SpotLane)
    match policy.state:
        case Open():
            return SpotLane(RelocationSealed(relocation_id))
        case RelocationSealed(relocation_id=current) if current == relocation_id:
            return policy
        case _:
            raise InvalidOperation(f"cannot seal for {relocation_id!r}: lane is {policy.state!r}")


def unseal(policy: SpotLane, relocation_id: Hashable) -> SpotLane:
    """Lift the seal of ``relocation_id`` (relocation aborted). Only the matching seal is
    lifted; anything else is invalid (the caller logs it as a late update and ignores it)."""
    _require(policy, SpotLane)
    match policy.state:
        case RelocationSealed(relocation_id=current) if current == relocation_id:
            return SpotLane(OPEN)
        case _:
            raise InvalidOperation(f"cannot unseal {relocation_id!r}: lane is {policy.state!r}")


def lend_turn(policy: SpotLane) -> SpotLane:
    """An open Spot lane lends its turn out: it starts no new turn until :func:`return_turn`."""
    _require(policy, SpotLane)
    if not isinstance(policy.state, Open):
        raise InvalidOperation(f"cannot lend the turn: lane is {policy.state!r}")
    return SpotLane(AwaitingReturn())


def return_turn(policy: SpotLane) -> SpotLane:
    """The lent turn came back: the Spot lane is open again."""
    _require(policy, SpotLane)
    if not isinstance(policy.state, AwaitingReturn):
        raise InvalidOperation(f"cannot return the turn: lane is {policy.state!r}")
    return SpotLane(OPEN)


def close_connection(policy: SessionLane) -> SessionLane:
    """The session's connection closed. Closing a closed connection is a no-op."""
    _require(policy, SessionLane)
    return SessionLane(ConnectionClosed())
