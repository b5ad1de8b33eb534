"""Why a frame never reached a handler, and why a peer connection ended (statistics keys).

Every frame the transport refuses is counted under exactly one :class:`DropReason`;
every connection that ends (admitted or not) is counted under one :class:`CloseReason`.
"""

from __future__ import annotations

import enum

__all__ = ["CloseReason", "DropReason"]


class DropReason(enum.Enum):
    # --- handshake (the frame is a hello / ack / confirm that was refused)
    BAD_PROOF = "bad_proof"
    """The HMAC proof does not verify: the peer does not hold the cluster secret, or it
    replayed a recorded hello."""
    WRONG_MESH = "wrong_mesh"
    """The hello names a mesh this node is not in."""
    UNKNOWN_PEER = "unknown_peer"
    """(mesh, rid) is not a live descriptor in the Store (after a refresh)."""
    STALE_GENERATION = "stale_generation"
    """(mesh, rid) is live but with another NodeGeneration."""
    UNEXPECTED_PEER = "unexpected_peer"
    """The node that answered at a descriptor's endpoint is not that descriptor's node."""
    VERSION_MISMATCH = "version_mismatch"
    DUPLICATE_CONNECTION = "duplicate_connection"
    """A hello from the higher NodeRid while this node's own dial to it is in flight:
    the connection dialed by the lower NodeRid is the one both sides keep."""
    UNADMITTED = "unadmitted"
    """Any other record before the handshake completed."""
    # --- admitted connections
    PROTOCOL_ERROR = "protocol_error"
    """The decoder refused the frame (malformed, unknown command, reserved 45, ...)."""
    SEQUENCE_GAP = "sequence_gap"
    """A frame number was skipped or repeated: a frame was lost on the connection."""
    SOURCE_MISMATCH = "source_mismatch"
    """The record's stamped source (rid, generation) is not the connection's peer."""
    NOT_ADMITTING = "not_admitting"
    """The node is not admitting (lease lost, shutting down)."""
    NO_HANDLER = "no_handler"
    UNKNOWN_CORRELATION = "unknown_correlation"
    """A reply whose correlation has no waiter (late, discarded, or never sent)."""
    REPLY_WRONG_PEER = "reply_wrong_peer"
    """A reply whose correlation belongs to a request sent to another node."""
    HANDLER_FAILED = "handler_failed"
    """The inbound handler raised (logged)."""
    PONG_QUEUE_FULL = "pong_queue_full"
    """A ping not answered because the writer lane was full (outbound frames flow anyway)."""


class CloseReason(enum.Enum):
    PEER_CLOSED = "peer_closed"
    """End of stream or a socket error."""
    GOODBYE = "goodbye"
    """The peer sent 104 and closed."""
    HANDSHAKE_FAILED = "handshake_failed"
    HANDSHAKE_TIMEOUT = "handshake_timeout"
    PROTOCOL_ERROR = "protocol_error"
    SEQUENCE_GAP = "sequence_gap"
    KEEPALIVE_TIMEOUT = "keepalive_timeout"
    SEND_STALLED = "send_stalled"
    """One write could not complete within ``peer_send_timeout``."""
    FAULT_CUT = "fault_cut"
    INTENT_REMOVED = "intent_removed"
    """The peer's descriptor disappeared or its lease expired."""
    REPLACED = "replaced"
    """A preferred or newer admitted connection with the same peer replaced this one."""
    DUPLICATE = "duplicate"
    """Admitted while a preferred connection with the same peer existed (both dialed)."""
    SHUTDOWN = "shutdown"
    LEASE_LOST = "lease_lost"
