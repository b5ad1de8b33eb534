"""The peer hello: mutual proof of (MeshName, NodeRid, NodeGeneration) over the cluster
secret with fresh nonces from both sides (records 100, 101, 105; proofs in
:mod:`.proof`).

::

    dialer                                   acceptor
      100 PeerHello(mesh, rid, gen, Nd, P_hello) ->
                                             version, P_hello, mesh, live descriptor?
      <- 101 PeerHelloAck(mesh, rid', gen', Na, P_ack(Nd, Na))
    P_ack, mesh, identity == the descriptor dialed?
      105 PeerHelloConfirm(P_confirm(Nd, Na)) ->
                                             P_confirm -> admitted

A refused hello closes the connection; after a verified ``P_hello`` the acceptor first
says why with a 104 (the dialer proved the secret, so it may learn the reason). Callers
bound the whole exchange with ``hello_timeout``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable

from ..ids import MeshName
from ..wire import (
    NONCE_BYTES,
    PROTOCOL_VERSION,
    GoodbyeReason,
    PeerGoodbye,
    PeerHello,
    PeerHelloAck,
    PeerHelloConfirm,
    Record,
    WireRecord,
)
from .api import NodeIdentity, PeerIdentity
from .frameio import PeerClosed, PeerIO
from .proof import HandshakeIdentity, ack_proof, confirm_proof, hello_proof, proof_matches
from .reasons import DropReason

__all__ = ["HandshakeRejected", "Observer", "accept_hello", "dial_hello"]

Observer = Callable[[bool, PeerIdentity | None, object], None]
"""``observe(sent, peer, record)``: the wire tap's view of handshake records."""

_GOODBYE_FOR = {
    DropReason.VERSION_MISMATCH: GoodbyeReason.VERSION_MISMATCH,
    DropReason.WRONG_MESH: GoodbyeReason.AUTHENTICATION_FAILED,
    DropReason.UNKNOWN_PEER: GoodbyeReason.STALE_GENERATION,
    DropReason.STALE_GENERATION: GoodbyeReason.STALE_GENERATION,
    DropReason.NOT_ADMITTING: GoodbyeReason.SHUTDOWN,
    DropReason.DUPLICATE_CONNECTION: GoodbyeReason.DUPLICATE_CONNECTION,
}


class HandshakeRejected(Exception):
    """The handshake failed. ``reason`` is the DropReason of the frame this side refused,
    or None when the other side refused (closed or said goodbye); ``goodbye`` is the
    reason the other side gave in its 104, if it sent one."""

    def __init__(
        self, reason: DropReason | None, detail: str, *, goodbye: GoodbyeReason | None = None
    ) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.goodbye = goodbye


def _ignore(sent: bool, peer: PeerIdentity | None, record: object) -> None:
    pass


async def _read(io: PeerIO, peer: PeerIdentity | None, observe: Observer) -> Record:
    try:
        record = await io.read_record()
    except PeerClosed as exc:
        raise HandshakeRejected(None, f"connection closed during the hello: {exc}") from None
    observe(False, peer, record)
    return record


async def _write(
    io: PeerIO, record: WireRecord, peer: PeerIdentity | None, observe: Observer
) -> None:
    try:
        await io.write_record(record)
    except PeerClosed as exc:
        raise HandshakeRejected(None, f"connection closed during the hello: {exc}") from None
    observe(True, peer, record)


async def dial_hello(
    io: PeerIO,
    *,
    secret: bytes,
    local: NodeIdentity,
    expected: PeerIdentity,
    observe: Observer = _ignore,
) -> PeerIdentity:
    """Run the dialer side; return the proven peer (always ``expected``).

    Raises:
        HandshakeRejected: the acceptor refused or proved something else.
        ProtocolError: a malformed frame.
    """
    mesh = expected.mesh_name
    me = HandshakeIdentity(local.node_rid, local.node_generation, secrets.token_bytes(NONCE_BYTES))
    hello = PeerHello(
        protocol_version=PROTOCOL_VERSION,
        mesh_name=mesh,
        node_rid=me.node_rid,
        node_generation=me.node_generation,
        nonce=me.nonce,
        proof=hello_proof(secret, PROTOCOL_VERSION, mesh, me),
    )
    await _write(io, hello, expected, observe)
    ack = await _read(io, expected, observe)
    if isinstance(ack, PeerGoodbye):
        raise HandshakeRejected(
            None, f"the acceptor refused the hello: {ack.reason.name}", goodbye=ack.reason
        )
    if not isinstance(ack, PeerHelloAck):
        raise HandshakeRejected(DropReason.UNADMITTED, f"expected 101, got {int(ack.COMMAND)}")
    if ack.protocol_version != PROTOCOL_VERSION:
        raise HandshakeRejected(DropReason.VERSION_MISMATCH, "acceptor protocol version")
    them = HandshakeIdentity(ack.node_rid, ack.node_generation, ack.nonce)
    if not proof_matches(ack_proof(secret, PROTOCOL_VERSION, mesh, me, them), ack.proof):
        raise HandshakeRejected(DropReason.BAD_PROOF, "the acceptor's proof does not verify")
    proven = PeerIdentity(ack.mesh_name, ack.node_rid, ack.node_generation)
    if proven != expected:
        raise HandshakeRejected(DropReason.UNEXPECTED_PEER, f"dialed {expected}, reached {proven}")
    confirm = PeerHelloConfirm(proof=confirm_proof(secret, PROTOCOL_VERSION, mesh, me, them))
    await _write(io, confirm, proven, observe)
    return proven


async def accept_hello(
    io: PeerIO,
    *,
    secret: bytes,
    local: NodeIdentity,
    meshes: frozenset[MeshName],
    check: Callable[[PeerIdentity], Awaitable[DropReason | None]],
    observe: Observer = _ignore,
) -> PeerIdentity:
    """Run the acceptor side; return the proven peer.

    ``check(peer)`` runs after the hello proof and mesh verified: it returns a reason to
    refuse (not admitting, not a live descriptor, stale generation) or None.

    Raises:
        HandshakeRejected: with the DropReason of the refused frame.
        ProtocolError: a malformed frame.
    """
    hello = await _read(io, None, observe)
    if not isinstance(hello, PeerHello):
        raise HandshakeRejected(DropReason.UNADMITTED, f"expected 100, got {int(hello.COMMAND)}")
    claimed = PeerIdentity(hello.mesh_name, hello.node_rid, hello.node_generation)
    if hello.protocol_version != PROTOCOL_VERSION:
        await _refuse(io, DropReason.VERSION_MISMATCH, claimed, observe)
    them = HandshakeIdentity(hello.node_rid, hello.node_generation, hello.nonce)
    expected_proof = hello_proof(secret, PROTOCOL_VERSION, hello.mesh_name, them)
    if not proof_matches(expected_proof, hello.proof):
        raise HandshakeRejected(DropReason.BAD_PROOF, f"hello from {claimed}: bad proof")
    if hello.mesh_name not in meshes:
        await _refuse(io, DropReason.WRONG_MESH, claimed, observe)
    reason = await check(claimed)
    if reason is not None:
        await _refuse(io, reason, claimed, observe)
    me = HandshakeIdentity(local.node_rid, local.node_generation, secrets.token_bytes(NONCE_BYTES))
    ack = PeerHelloAck(
        protocol_version=PROTOCOL_VERSION,
        mesh_name=hello.mesh_name,
        node_rid=me.node_rid,
        node_generation=me.node_generation,
        nonce=me.nonce,
        proof=ack_proof(secret, PROTOCOL_VERSION, hello.mesh_name, them, me),
    )
    await _write(io, ack, claimed, observe)
    confirm = await _read(io, claimed, observe)
    if not isinstance(confirm, PeerHelloConfirm):
        raise HandshakeRejected(DropReason.UNADMITTED, f"expected 105, got {int(confirm.COMMAND)}")
    expected_confirm = confirm_proof(secret, PROTOCOL_VERSION, hello.mesh_name, them, me)
    if not proof_matches(expected_confirm, confirm.proof):
        raise HandshakeRejected(DropReason.BAD_PROOF, f"confirm from {claimed}: bad proof")
    return claimed


async def _refuse(io: PeerIO, reason: DropReason, claimed: PeerIdentity, observe: Observer) -> None:
    goodbye = _GOODBYE_FOR.get(reason)
    if goodbye is not None:
        with contextlib.suppress(HandshakeRejected):
            await _write(io, PeerGoodbye(reason=goodbye), claimed, observe)
    raise HandshakeRejected(reason, f"hello from {claimed}: {reason.value}")
