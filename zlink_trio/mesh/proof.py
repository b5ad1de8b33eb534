"""Hello proofs: HMAC-SHA256 over the shared cluster secret (docs/decisions.md, "Hello
protocol").

Three proofs, each over a transcript that starts with a domain label, so no proof can be
replayed as another:

* ``hello``  (in 100): the dialer's identity and nonce. Lets the acceptor drop a peer
  without the secret before it reveals anything; replayable on its own.
* ``ack``    (in 101): both identities and BOTH nonces. Proves the acceptor to the dialer
  (fresh: covers the dialer's new nonce).
* ``confirm`` (in 105): the same transcript. Proves the dialer to the acceptor (fresh:
  covers the acceptor's new nonce), so a recorded hello cannot be admitted.

Pure functions; variable-length parts are length-prefixed so transcripts are unambiguous.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Final

import attrs

from ..ids import MeshName, NodeGeneration, NodeRid

__all__ = ["HandshakeIdentity", "ack_proof", "confirm_proof", "hello_proof", "proof_matches"]

_DOMAIN: Final = b"zlink-trio/peer-hello/v1\x00"


@attrs.frozen(slots=True)
class HandshakeIdentity:
    """One side of a handshake: who it claims to be and the nonce it drew."""

    node_rid: NodeRid
    node_generation: NodeGeneration
    nonce: bytes


def _part(raw: bytes) -> bytes:
    return struct.pack(">H", len(raw)) + raw


def _side(side: HandshakeIdentity) -> bytes:
    return (
        _part(side.node_rid.value)
        + struct.pack(">Q", side.node_generation.value)
        + _part(side.nonce)
    )


def _mac(secret: bytes, label: bytes, version: int, mesh: MeshName, *sides: bytes) -> bytes:
    message = _DOMAIN + _part(label) + struct.pack(">H", version) + _part(mesh.value.encode())
    return hmac.new(secret, message + b"".join(sides), hashlib.sha256).digest()


def hello_proof(secret: bytes, version: int, mesh: MeshName, dialer: HandshakeIdentity) -> bytes:
    return _mac(secret, b"hello", version, mesh, _side(dialer))


def ack_proof(
    secret: bytes,
    version: int,
    mesh: MeshName,
    dialer: HandshakeIdentity,
    acceptor: HandshakeIdentity,
) -> bytes:
    return _mac(secret, b"ack", version, mesh, _side(dialer), _side(acceptor))


def confirm_proof(
    secret: bytes,
    version: int,
    mesh: MeshName,
    dialer: HandshakeIdentity,
    acceptor: HandshakeIdentity,
) -> bytes:
    return _mac(secret, b"confirm", version, mesh, _side(dialer), _side(acceptor))


def proof_matches(expected: bytes, received: bytes) -> bool:
    """Constant-time comparison."""
    return hmac.compare_digest(expected, received)
