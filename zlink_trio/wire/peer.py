"""Peer admission and liveness records (100-105). The spec leaves them unnumbered
(DESIGN.md §6: peers are admitted by a hello carrying MeshName, NodeRid, NodeGeneration and
an HMAC proof over the cluster secret). The transport computes and checks the proofs; these
records only carry them.

Handshake: the dialer sends 100 (its identity and nonce), the acceptor answers 101 (its
identity, its nonce, and a proof covering both nonces); the dialer completes the mutual
proof with 105 (a proof covering both nonces too). Until then no other record is accepted.
"""

from __future__ import annotations

from typing import ClassVar, Final

import attrs

from ..ids import MeshName, NodeGeneration, NodeRid
from .base import WireRecord
from .commands import Command
from .enums import GoodbyeReason
from .fields import MESH_NAME, NODE_GENERATION, RID, U16, U64, FixedBytes, IntEnumField, wire

__all__ = [
    "HELLO_MAX_FRAME_BYTES",
    "NONCE_BYTES",
    "PROOF_BYTES",
    "PROTOCOL_VERSION",
    "PeerGoodbye",
    "PeerHello",
    "PeerHelloAck",
    "PeerHelloConfirm",
    "PeerPing",
    "PeerPong",
]

PROTOCOL_VERSION: Final = 1
NONCE_BYTES: Final = 16
PROOF_BYTES: Final = 32
HELLO_MAX_FRAME_BYTES: Final = 512
"""Frame limit a transport can use until the peer is admitted: every 100, 101, 104 and 105
body fits (the largest, a hello with a 255-byte mesh name, is about 350 bytes)."""
NONCE: Final = FixedBytes(NONCE_BYTES, "nonce")
PROOF: Final = FixedBytes(PROOF_BYTES, "hmac-sha256")


@attrs.frozen(slots=True, kw_only=True)
class PeerHello(WireRecord):
    """100: dialer → acceptor, first frame of a connection."""

    COMMAND: ClassVar[Command] = Command.PEER_HELLO
    protocol_version: int = attrs.field(metadata=wire(U16))
    mesh_name: MeshName = attrs.field(metadata=wire(MESH_NAME))
    node_rid: NodeRid = attrs.field(metadata=wire(RID))
    node_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    nonce: bytes = attrs.field(metadata=wire(NONCE))
    proof: bytes = attrs.field(metadata=wire(PROOF))
    """HMAC-SHA256 chosen by the transport (e.g. over this hello's fields)."""


@attrs.frozen(slots=True, kw_only=True)
class PeerHelloAck(WireRecord):
    """101: acceptor → dialer, the acceptor's identity, nonce and proof."""

    COMMAND: ClassVar[Command] = Command.PEER_HELLO_ACK
    protocol_version: int = attrs.field(metadata=wire(U16))
    mesh_name: MeshName = attrs.field(metadata=wire(MESH_NAME))
    node_rid: NodeRid = attrs.field(metadata=wire(RID))
    node_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    nonce: bytes = attrs.field(metadata=wire(NONCE))
    proof: bytes = attrs.field(metadata=wire(PROOF))


@attrs.frozen(slots=True, kw_only=True)
class PeerHelloConfirm(WireRecord):
    """105 (added): dialer → acceptor, the dialer's proof over both nonces, so a replayed
    100 cannot be admitted. Optional for the transport; if it uses only 100/101 it never
    sends this."""

    COMMAND: ClassVar[Command] = Command.PEER_HELLO_CONFIRM
    proof: bytes = attrs.field(metadata=wire(PROOF))


@attrs.frozen(slots=True, kw_only=True)
class PeerPing(WireRecord):
    """102: liveness probe; answered by a 103 with the same token."""

    COMMAND: ClassVar[Command] = Command.PEER_PING
    token: int = attrs.field(metadata=wire(U64))


@attrs.frozen(slots=True, kw_only=True)
class PeerPong(WireRecord):
    """103: answer to a 102."""

    COMMAND: ClassVar[Command] = Command.PEER_PONG
    token: int = attrs.field(metadata=wire(U64))


@attrs.frozen(slots=True, kw_only=True)
class PeerGoodbye(WireRecord):
    """104: the sender closes the connection after this frame."""

    COMMAND: ClassVar[Command] = Command.PEER_GOODBYE
    reason: GoodbyeReason = attrs.field(metadata=wire(IntEnumField(GoodbyeReason)))
