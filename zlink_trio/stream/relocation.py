"""The session owner's part of an Actor relocation (spec 02 §8): commands 42, 43 and 44.

* **42 → 43.** A relocation source asks this owner to seal one binding (its session,
  binding generation, ActorId and ObjectGeneration, and the relocation identity). The
  aggregate installs the seal and the answer is a 43 carrying only the installation
  result (no sequence, no high-water). From then on the binding's relays are held by the
  aggregate in arrival order; nothing is sent to the Actor's route. The seal timer
  (``ServerConfig.session_relocation_seal_timeout``, 3,000 ms by default, from the seal
  installation) runs in the connection's nursery.
* **44 commit** (one-way, no reply): for the same ObjectGeneration and the same seal, the
  route and the ActorRef location snapshot switch together, the timer is cancelled and
  the held messages are submitted to the new route in arrival order — each still under
  its own deadline (a request whose deadline passed while held was answered
  DeadlineExceeded by its timer and is skipped) — before any relay accepted after the
  unseal (those queue behind them until the held queue is drained).
* **44 abort**: the matching seal only is lifted; the held messages go to the source
  route, in order.
* **Seal timeout**: whichever of the timer and the 44 is handled first wins (both are
  synchronous steps of the aggregate). The timer closes the physical session
  (``CloseReason.SEAL_TIMEOUT``) and the binding, its held messages and the seal are
  dropped (no OnDisconnectActor for that binding: the session owner does not know where
  the Actor is, and never asks the Store).
* A late or duplicate 44, or one of another relocation: a ``late_session_route_update``
  Warning, nothing changes.

Other bindings of the same session are never touched, and the session owner never reads
the Store or checks Actor authority (the target's CAS decided that).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, final

import trio

from ..errors import ErrorKind, SessionNotBound, ZLinkError
from ..mesh.api import PeerIdentity
from ..observe import FlowEvent
from ..wire.commands import Command
from ..wire.enums import SealResult
from ..wire.records import (
    BoundSessionSend,
    SessionRelocationRoute,
    SessionRelocationSeal,
    SessionRelocationSealed,
)
from ..wire.stream import CloseReason
from ..wire.tails import SessionRouteAbort, SessionRouteCommit, SessionTail
from .binding import Binding, Held, Releasing, Sealed, SealOutcome, Sender

if TYPE_CHECKING:
    from ..ids import OperationId
    from ..wire.enums import MessageKind
    from ..wire.payloads import TypedPayload
    from .connection import Connection
    from .server import StreamServer
    from .session import PendingRequest

__all__ = ["HeldRelay", "SessionRelocations"]

logger = logging.getLogger("zlink_trio.sessions")

_SEALED: Final = SealResult.SEALED
_REJECTED: Final = SealResult.REJECTED
_NEVER: Final = float("inf")


@final
class HeldRelay:
    """What a held relay needs to be submitted later (the aggregate's held item)."""

    __slots__ = ("kind", "name", "pending", "tail", "value")

    def __init__(
        self,
        kind: MessageKind,
        name: str,
        value: bytes | TypedPayload,
        pending: PendingRequest | None,
        tail: SessionTail,
    ) -> None:
        self.kind = kind
        self.name = name
        self.value = value
        self.pending = pending
        self.tail = tail


@final
class SessionRelocations:
    """Commands 42 and 44 at this session owner (see the module docstring)."""

    __slots__ = ("_server",)

    def __init__(self, server: StreamServer) -> None:
        self._server = server

    def register(self) -> None:
        node = self._server.node
        node.on(Command.SESSION_RELOCATION_SEAL, self._on_seal)
        # A stopping session owner still applies the 44 it receives: a binding its drain
        # closed while sealed waits for it to learn where to send its disconnect (38).
        node.on(Command.SESSION_RELOCATION_ROUTE, self._on_route, draining=True)

    # --- 42 → 43 ----------------------------------------------------------------------------
    def seal(self, record: SessionRelocationSeal, sender: Sender) -> SessionRelocationSealed:
        """Install the seal ``record`` asks for (one synchronous step); the 43. Only the
        binding's Actor owner (``sender``, its route's node lifecycle) may seal it."""
        server = self._server
        conn = server.connection(record.session_rid)
        if conn is None or conn.closed:
            return _rejected(record, ErrorKind.UNAVAILABLE)
        if server.aggregate.bind_pending(record.session_rid, record.binding_generation):
            # The Actor owner registered a bind whose terminal has not been committed
            # here yet: there is a binding to carry, but no seal to install on it now.
            # Refused (the move aborts, the binding stays), never "the session is gone"
            # (the binding would then travel nowhere while the session commits it).
            return _rejected(record, ErrorKind.CAPACITY_EXCEEDED)
        deadline = trio.current_time() + server.config.session_relocation_seal_timeout
        outcome, binding = server.aggregate.install_seal(
            record.session_rid,
            record.binding_generation,
            record.actor_id,
            record.object_generation,
            record.relocation_id,
            deadline,
            sender=sender,
        )
        if outcome is SealOutcome.REJECTED or binding is None:
            kind = ErrorKind.UNAVAILABLE if binding is None else ErrorKind.INVALID_OPERATION
            return _rejected(record, kind)
        state = binding.state
        assert isinstance(state, Sealed)
        if state.timer is None:
            state.resolved = trio.Event()
            scope = trio.CancelScope(deadline=state.deadline)
            state.timer = scope
            conn.nursery.start_soon(
                self._seal_timer, conn, binding, state.relocation_id, scope,
                name="zlink_trio.stream.seal_timer",
            )  # fmt: skip
        return SessionRelocationSealed(
            correlation=record.correlation, relocation_id=record.relocation_id, result=_SEALED
        )

    async def _on_seal(self, peer: PeerIdentity, record: SessionRelocationSeal) -> None:
        server = self._server
        if server.aggregate.bind_pending(record.session_rid, record.binding_generation):
            # Its bind's terminal is still on its way here (a followed bind's comes back
            # through the previous owner): seal once the bind ended, within the seal
            # timeout, in a task (this is the connection's reader).
            nursery = server.nursery
            if nursery is not None:
                nursery.start_soon(
                    self._seal_after_bind, peer, record, name="zlink_trio.stream.seal"
                )
                return
        reply = self.seal(record, (peer.node_rid, peer.node_generation))
        node = self._server.node
        try:
            await node.send(peer.address, reply, wait=False)
        except trio.WouldBlock:
            nursery = self._server.nursery
            if nursery is not None:
                nursery.start_soon(self._send_reply, peer, reply, name="zlink_trio.stream.sealed")
        except ZLinkError as exc:
            logger.info("the 43 of relocation %r was not sent: %r", record.relocation_id, exc)

    async def _seal_after_bind(self, peer: PeerIdentity, record: SessionRelocationSeal) -> None:
        server = self._server
        pending = server.aggregate.bind_pending
        with trio.move_on_after(server.config.session_relocation_seal_timeout):
            while pending(record.session_rid, record.binding_generation):
                await server.bind_ended.wait()
        await self._send_reply(peer, self.seal(record, (peer.node_rid, peer.node_generation)))

    async def _send_reply(self, peer: PeerIdentity, reply: SessionRelocationSealed) -> None:
        try:
            await self._server.node.send(peer.address, reply)
        except ZLinkError as exc:
            logger.info("the 43 of relocation %r was not sent: %r", reply.relocation_id, exc)

    async def _seal_timer(
        self,
        conn: Connection,
        binding: Binding,
        relocation_id: OperationId,
        scope: trio.CancelScope,
    ) -> None:
        with scope:
            await trio.sleep_forever()
        server = self._server
        # A 44 handled first cancelled the scope and lifted the seal: nothing to do.
        if server.aggregate.seal_expired(binding, relocation_id):
            server.flow.emit(
                FlowEvent.SESSION_SEAL_TIMEOUT,
                "relocation %r of actor %r: no command 44 within the seal timeout",
                relocation_id,
                binding.actor_id.value,
            )
            conn.close(
                CloseReason.SEAL_TIMEOUT, "a relocation of a bound Actor did not complete in time"
            )

    # --- 44 -----------------------------------------------------------------------------------
    def route(self, record: SessionRelocationRoute, sender: Sender) -> None:
        """Apply a 44 (one synchronous step): commit (from the move's target) or abort
        (from its source) of a matching seal, else a ``late_session_route_update``.
        Never answered."""
        server = self._server
        action = record.action
        aggregate = server.aggregate
        if isinstance(action, SessionRouteCommit):
            result = aggregate.apply_route(action, sender=sender)
            what = "commit"
        else:
            assert isinstance(action, SessionRouteAbort)
            result = aggregate.abort_seal(action, sender=sender)
            what = "abort"
        if result is None:
            parked = aggregate.resolve_parked(action, sender=sender)
            if parked is not None:
                resolved = parked[1].resolved
                if isinstance(resolved, trio.Event):
                    resolved.set()  # its disconnect notification goes on (server.disconnect)
                return
            server.flow.emit(
                FlowEvent.LATE_SESSION_ROUTE_UPDATE,
                "command 44 %s of relocation %r (binding %d): no matching seal (late, "
                "duplicate or another relocation's): ignored",
                what,
                action.relocation_id,
                action.binding_generation,
            )
            return
        binding, _held = result
        state = binding.state
        assert isinstance(state, Releasing)
        timer = state.timer
        if isinstance(timer, trio.CancelScope):
            timer.cancel(reason="zlink_trio: command 44 came first")
        early, state.early = state.early, []
        for kept in early:
            # A commit: each checked against the new route now, in arrival order (before
            # anything later). An abort: the move's target never became the owner.
            if what == "commit":
                server.redeliver(kept)
            elif isinstance(kept, BoundSessionSend):
                server.rejected_push(kept, "its relocation was aborted")
            else:
                server.flow.emit(
                    FlowEvent.SESSION_STALE_CONTROL,
                    "command %d for %r: its relocation was aborted",
                    int(kept.COMMAND),
                    binding.actor_id.value,
                )
        conn = server.connection(binding.entry.session_rid)
        if conn is None:
            return
        conn.nursery.start_soon(self._release, conn, binding, name="zlink_trio.stream.release")

    async def wait_parked(self, binding: Binding) -> bool:
        """A sealed binding of a closed session: wait until a 44 resolves its seal (True:
        its route is the one to notify) or its deadline passes (False: dropped)."""
        state = binding.state
        if not isinstance(state, Sealed):
            await trio.lowlevel.checkpoint()
            return True
        resolved = state.resolved
        if isinstance(resolved, trio.Event):
            with trio.move_on_at(state.deadline):
                await resolved.wait()
        else:
            await trio.lowlevel.checkpoint()
        if isinstance(binding.state, Sealed):
            self._server.aggregate.drop_parked(binding)
            return False
        return True

    async def _on_route(self, peer: PeerIdentity, record: SessionRelocationRoute) -> None:
        self.route(record, (peer.node_rid, peer.node_generation))
        await trio.lowlevel.checkpoint()

    async def _release(self, conn: Connection, binding: Binding) -> None:
        """Submit the held messages of ``binding`` in arrival order, and those accepted
        while they are submitted, until the queue is empty (then it is Bound)."""
        server = self._server
        aggregate = server.aggregate
        while True:
            batch = aggregate.take_held(binding)
            if not batch:
                return
            for index, held in enumerate(batch):
                if not binding.current:
                    for rest in batch[index:]:
                        _fail(conn, rest, SessionNotBound("the binding ended while held"))
                    return
                await self._submit(conn, binding, held)

    async def _submit(self, conn: Connection, binding: Binding, held: Held) -> None:
        item = held.item
        assert type(item) is HeldRelay
        pending = item.pending
        if pending is not None and pending.done:
            await trio.lowlevel.checkpoint()
            return  # its own deadline passed while it was held (answered already)
        deadline = _NEVER if pending is None else pending.deadline
        try:
            await self._server.submit_relay(
                conn, binding, item.kind, item.name, item.value, pending, item.tail, deadline
            )
        except ZLinkError as exc:
            _fail(conn, held, exc)


def _fail(conn: Connection, held: Held, error: ZLinkError) -> None:
    item = held.item
    assert type(item) is HeldRelay
    pending = item.pending
    if pending is None:
        conn.send_error(0, error)
    else:
        pending.fail_now(error)


def _rejected(record: SessionRelocationSeal, kind: ErrorKind) -> SessionRelocationSealed:
    return SessionRelocationSealed(
        correlation=record.correlation,
        relocation_id=record.relocation_id,
        result=_REJECTED,
        failure_code=kind,
    )
