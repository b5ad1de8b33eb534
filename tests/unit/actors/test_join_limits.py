"""A04-12: the per-handler Join limits, on the registration scope itself (a Spot handler's
scope registers Joins of several member Actors; an Actor handler's only its own, so the
64 / 8 MiB limits are driven here through ``JoinRegistrar.register_in``)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from zlink_trio import ConfigurationError, InvalidOperation, OperationId, Unavailable
from zlink_trio.actors.join import (
    MAX_JOIN_REQUESTS_PER_SCOPE,
    MAX_JOINS_PER_SCOPE,
    JoinCall,
    JoinRegistrar,
    JoinScope,
)
from zlink_trio.ids import ActorId, ObjectGeneration, SpotId

MIB = 1024 * 1024


@attrs.define
class _Context:
    actor_id: ActorId
    object_generation: ObjectGeneration = attrs.field(factory=lambda: ObjectGeneration(7))
    spot_id: SpotId | None = attrs.field(factory=lambda: SpotId("lobby"))
    retired: bool = False


@attrs.define
class _Hosted:
    context: _Context
    join: Any = None
    admitting: bool = True

    @property
    def actor_id(self) -> ActorId:
        return self.context.actor_id


def _registrar() -> JoinRegistrar:
    return JoinRegistrar(None, default_timeout=5.0)  # type: ignore[arg-type]


def _call(request: bytes = b"") -> JoinCall:
    return JoinCall(None, None, SpotId("room"), entry=False, request=request)  # type: ignore[arg-type]


def _member(i: int) -> Any:
    return _Hosted(_Context(ActorId(f"member-{i}")))


async def test_a04_12_the_64th_join_of_a_handler_succeeds_and_the_65th_fails() -> None:
    """A04-12: 64 registrations in one scope are accepted; the 65th is a synchronous
    ConfigurationError that records nothing (no pending transition on its Actor)."""
    registrar = _registrar()
    scope = JoinScope(trio.lowlevel.current_task())
    members = [_member(i) for i in range(MAX_JOINS_PER_SCOPE + 1)]
    ops = [registrar.register_in(scope, m, _call()) for m in members[:MAX_JOINS_PER_SCOPE]]
    assert len(ops) == 64 and all(isinstance(op, OperationId) for op in ops)
    assert len(set(ops)) == 64
    with pytest.raises(ConfigurationError):
        registrar.register_in(scope, members[64], _call())
    assert members[64].join is None
    assert len(scope.pending) == 64 and registrar.open == 64


async def test_a04_12_eight_mib_per_handler_then_the_next_byte_fails() -> None:
    """A04-12: 8 × 1 MiB requests (8 MiB together) are accepted; one byte more is a
    ConfigurationError that leaves the earlier registrations intact and adds nothing;
    an empty request still fits."""
    registrar = _registrar()
    scope = JoinScope(trio.lowlevel.current_task())
    members = [_member(i) for i in range(10)]
    for m in members[:8]:
        registrar.register_in(scope, m, _call(b"r" * MIB))
    assert scope.request_bytes == MAX_JOIN_REQUESTS_PER_SCOPE
    with pytest.raises(ConfigurationError):
        registrar.register_in(scope, members[8], _call(b"x"))
    assert members[8].join is None and len(scope.pending) == 8
    assert scope.request_bytes == MAX_JOIN_REQUESTS_PER_SCOPE
    assert isinstance(registrar.register_in(scope, members[9], _call(b"")), OperationId)


async def test_a04_12_registration_fixes_the_deadline_on_the_monotonic_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A04-12: the deadline is the Defer time + 5 s by default (+ the explicit timeout,
    rounded up to whole ms, otherwise), on the Trio (monotonic) clock; a second
    transition of the same Actor is Unavailable; the intent records generation,
    membership and the request snapshot."""
    await trio.sleep(12.5)
    registrar = _registrar()
    scope = JoinScope(trio.lowlevel.current_task())
    member = _member(1)
    registrar.register_in(scope, member, _call(bytearray(b"snap")))  # type: ignore[arg-type]
    intent = member.join.intent
    assert intent.deadline == trio.current_time() + 5
    assert intent.request == b"snap" and type(intent.request) is bytes
    assert intent.object_generation == ObjectGeneration(7)
    assert intent.membership == SpotId("lobby")
    with pytest.raises(Unavailable):
        registrar.register_in(scope, member, _call())
    other = _member(2)
    registrar.register_in(scope, other, _call().timeout(0.0004))
    assert other.join.intent.deadline == trio.current_time() + 0.001
    registrar.close(scope, ok=False)  # discarded: no transition left pending
    assert member.join is None and other.join is None and registrar.open == 0


async def test_a_spot_handler_scope_registers_joins_of_its_members_only() -> None:
    """04 §3.1: a Spot handler's scope (``open_scope`` / ``member_call``) registers Joins
    of local members of that Spot; a non-member is InvalidOperation; closing the scope
    normally activates them in registration order."""
    members = {f"m{i}": _member(i) for i in range(3)}
    for i, hosted in enumerate(members.values()):
        hosted.context.actor_id = ActorId(f"m{i}")
    members["m2"].context.spot_id = SpotId("elsewhere")

    parked: list[Any] = []

    class _Host:
        def get(self, actor_id: ActorId) -> Any:
            return members.get(actor_id.value)

        def park(self, hosted: Any) -> None:  # the member's barrier holds from defer() on
            parked.append(hosted)

    registrar = JoinRegistrar(_Host(), default_timeout=5.0)  # type: ignore[arg-type]
    activated: list[Any] = []
    registrar.bind(activated.append)
    scope = registrar.open_scope()
    lobby = SpotId("lobby")
    for name in ("m0", "m1"):
        call = registrar.member_call(scope, lobby, ActorId(name), SpotId("room"), entry=False)
        assert isinstance(call.defer(), OperationId)
    with pytest.raises(InvalidOperation):
        registrar.member_call(scope, lobby, ActorId("m2"), SpotId("room"), entry=False).defer()
    with pytest.raises(InvalidOperation):
        registrar.member_call(scope, lobby, ActorId("gone"), None, entry=True).defer()
    assert parked == [members["m0"], members["m1"]]
    registrar.close(scope, ok=True)
    assert [p.hosted for p in activated] == [members["m0"], members["m1"]]
    with pytest.raises(InvalidOperation):  # the scope is closed
        registrar.member_call(scope, lobby, ActorId("m0"), None, entry=True).defer()
