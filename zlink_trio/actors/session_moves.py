"""The Actor owner's side of a relocation's session bindings (spec 02 §8): the
``zlink_trio.sessions`` relocation participant (docs/relocation.md, "Participants").

* ``seal`` (source): when the moving incarnation has a current binding, command 42 to its
  session owner (in-process when that is this node), awaiting the 43. SEALED: the binding
  travels sealed and the target owes a 44 commit. REJECTED ``Unavailable`` (the session
  is gone): nothing travels. REJECTED otherwise (sealed by another relocation, or a bind
  the session owner has not seen complete yet): the move is refused. The session owner unreachable: the binding travels unsealed (the session
  keeps the source route; its relays reach the target by Message Follow; no 44 is owed).
* ``restore`` (target): the binding is registered for the hidden activation, with the
  AuthorityOwnerGeneration the target will hold, so the session's relays are admitted
  and the Actor's pushes reach the session.
* ``departed`` (source, relay-ready accepted): the binding is forgotten here.
* ``committed`` (target): the 44 commit, one-way, sent once (never retransmitted: the
  session owner's seal timeout owns the "never arrived" case).
* ``aborted`` (source, after the durable abort and the source-queue restore): the 44
  abort with only the seal identity and the action.
* ``discarded`` (target): the registered binding is dropped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, final

import trio

from ..errors import ErrorKind, InvalidOperation, Unavailable, ZLinkError
from ..ids import ActorId, MeshName, OperationId
from ..mesh.api import LinkLost, PeerAddress, PeerGone
from ..wire.carried import CarriedSessionBinding, decode_carried, encode_carried
from ..wire.enums import SealResult
from ..wire.records import SessionRelocationRoute, SessionRelocationSeal, SessionRelocationSealed
from ..wire.tails import SessionRouteAbort, SessionRouteCommit
from .bindings import BindingIdentity

if TYPE_CHECKING:
    from ..mesh.node import MeshNode
    from ..objects.relocation import RelocationUnit
    from .bindings import ActorBindings

__all__ = ["PARTICIPANT_NAME", "SessionMoves", "carried_identity"]

logger = logging.getLogger("zlink_trio.actors")

PARTICIPANT_NAME: Final = "zlink_trio.sessions"


@final
class SessionMoves:
    """The sessions participant of one Actor owner (see the module docstring)."""

    __slots__ = ("_adopted", "_bindings", "_node", "_sealed")

    def __init__(self, node: MeshNode, bindings: ActorBindings) -> None:
        self._node = node
        self._bindings = bindings
        self._sealed: dict[OperationId, CarriedSessionBinding] = {}
        """Source: seals installed by a move in flight (for its abort)."""
        self._adopted: dict[OperationId, tuple[ActorId, CarriedSessionBinding]] = {}
        """Target: bindings registered by a restore (for its commit or discard)."""

    @property
    def participant_name(self) -> str:
        return PARTICIPANT_NAME

    # --- source -------------------------------------------------------------------------------
    async def seal(self, unit: RelocationUnit) -> bytes:
        carried = self._bindings.carry(unit.actor_id, unit.object_generation)
        if carried is None:
            await trio.lowlevel.checkpoint()
            return b""
        identity, mesh = carried
        record = SessionRelocationSeal(
            correlation=1,  # the mesh stamps its own
            relocation_id=unit.relocation_id,
            actor_id=unit.actor_id,
            object_generation=unit.object_generation,
            session_rid=identity.session_rid,
            binding_generation=identity.binding_generation,
        )
        sealed = True
        try:
            reply = await self._ask(identity, mesh, record)
        except PeerGone:
            sealed = False  # that session owner's lifecycle ended: no 44 is owed
        except LinkLost as exc:
            # The 42 may have been applied: the target still sends its 44 (a late one is
            # a no-op there), so a seal that was installed is never left to time out.
            logger.info("relocation %r: the 43 was lost (%r)", unit.relocation_id, exc)
        except Unavailable as exc:
            logger.info(
                "relocation %r of %r: the session owner was not reached (%r); the binding "
                "moves unsealed",
                unit.relocation_id,
                unit.actor_id.value,
                exc,
            )
            sealed = False
        else:
            if reply.result is not SealResult.SEALED:
                if reply.failure_code is ErrorKind.UNAVAILABLE:
                    return b""  # that session is gone: no binding to carry
                raise InvalidOperation(
                    f"actor {unit.actor_id.value!r}: its session owner refused the seal "
                    "(sealed by another move, or the bind is not complete there yet)"
                )
        value = CarriedSessionBinding(
            session_mesh=mesh if mesh is not None else unit.mesh_name,
            owner_rid=identity.owner_rid,
            owner_generation=identity.owner_generation,
            owner_id=identity.owner_id,
            owner_lease_generation=identity.owner_lease_generation,
            session_rid=identity.session_rid,
            binding_generation=identity.binding_generation,
            sealed=sealed,
        )
        if sealed:
            self._sealed[unit.relocation_id] = value
        return encode_carried(value)

    async def _ask(
        self, identity: BindingIdentity, mesh: MeshName | None, record: SessionRelocationSeal
    ) -> SessionRelocationSealed:
        node = self._node
        me = node.identity
        if identity.owner_rid == me.node_rid and identity.owner_generation == me.node_generation:
            port = self._bindings.local_sessions
            if port is None:
                await trio.lowlevel.checkpoint()
                raise Unavailable("no session owner on this node")
            await trio.lowlevel.checkpoint()
            return port.seal(record)
        assert mesh is not None
        pending = await node.request(PeerAddress(mesh, identity.owner_rid), record)
        try:
            reply = await pending.wait()
        finally:
            pending.discard()
        if not isinstance(reply, SessionRelocationSealed):
            raise Unavailable(f"the seal was answered by a {type(reply).__name__}")
        return reply

    async def departed(self, unit: RelocationUnit) -> None:
        self._sealed.pop(unit.relocation_id, None)
        carried = self._bindings.carry(unit.actor_id, unit.object_generation)
        if carried is not None:
            self._bindings.release(unit.actor_id, carried[0])
        await trio.lowlevel.checkpoint()

    async def aborted(self, unit: RelocationUnit) -> None:
        value = self._sealed.pop(unit.relocation_id, None)
        if value is None:
            await trio.lowlevel.checkpoint()
            return
        abort = SessionRouteAbort(
            relocation_id=unit.relocation_id,
            session_rid=value.session_rid,
            binding_generation=value.binding_generation,
        )
        await self._tell(value, SessionRelocationRoute(action=abort))

    # --- target -------------------------------------------------------------------------------
    async def restore(self, unit: RelocationUnit, state: bytes) -> None:
        await trio.lowlevel.checkpoint()
        if not state:
            return
        try:
            value = decode_carried(state)
        except ZLinkError as exc:
            raise InvalidOperation(f"the carried session binding is invalid: {exc}") from None
        me = self._node.identity
        local = value.owner_rid == me.node_rid and value.owner_generation == me.node_generation
        identity = carried_identity(value)
        self._bindings.adopt(
            unit.actor_id,
            identity,
            unit.object_generation,
            unit.target_owner_generation,
            None if local else value.session_mesh,
        )
        self._adopted[unit.relocation_id] = (unit.actor_id, value)

    async def committed(self, unit: RelocationUnit) -> None:
        adopted = self._adopted.pop(unit.relocation_id, None)
        if adopted is None or not adopted[1].sealed:
            await trio.lowlevel.checkpoint()
            return
        value = adopted[1]
        me = self._node.identity
        commit = SessionRouteCommit(
            relocation_id=unit.relocation_id,
            actor_id=unit.actor_id,
            object_generation=unit.object_generation,
            target_mesh=unit.mesh_name,
            target_rid=me.node_rid,
            target_node_generation=me.node_generation,
            authority_owner_generation=unit.target_owner_generation,
            owner_lease_generation=self._node.owner_fence(unit.mesh_name).lease_generation,
            session_owner_rid=value.owner_rid,
            session_owner_generation=value.owner_generation,
            session_rid=value.session_rid,
            binding_generation=value.binding_generation,
        )
        await self._tell(value, SessionRelocationRoute(action=commit))

    async def discarded(self, unit: RelocationUnit) -> None:
        adopted = self._adopted.pop(unit.relocation_id, None)
        await trio.lowlevel.checkpoint()
        if adopted is None:
            return
        actor_id, value = adopted
        self._bindings.release(actor_id, carried_identity(value))

    # --- 44 -----------------------------------------------------------------------------------
    async def _tell(self, value: CarriedSessionBinding, record: SessionRelocationRoute) -> None:
        """One 44, one-way, sent once; a failure is logged (the seal timeout owns it)."""
        node = self._node
        me = node.identity
        if value.owner_rid == me.node_rid and value.owner_generation == me.node_generation:
            port = self._bindings.local_sessions
            if port is not None:
                port.route(record)
            await trio.lowlevel.checkpoint()
            return
        try:
            await node.send(PeerAddress(value.session_mesh, value.owner_rid), record)
        except ZLinkError as exc:
            logger.info("command 44 to the session owner %s not sent: %r", value.owner_rid, exc)


def carried_identity(value: CarriedSessionBinding) -> BindingIdentity:
    return BindingIdentity(
        value.owner_rid,
        value.owner_generation,
        value.owner_id,
        value.owner_lease_generation,
        value.session_rid,
        value.binding_generation,
    )
