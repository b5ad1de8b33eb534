"""Counters of one MeshNode and the frozen statistics record built from them."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar, final

import attrs

from ..store.api import Endpoint
from .api import NodeIdentity
from .lease import LeaseState
from .reasons import CloseReason, DropReason

__all__ = ["Counters", "MeshNodeStatistics", "NodePhase", "frozen_counts"]

K = TypeVar("K")


class NodePhase(enum.Enum):
    """Where one MeshNode lifecycle is (a node never goes back)."""

    CREATED = "created"
    """Handlers may be registered; nothing listens yet."""
    RUNNING = "running"
    """Registered, listening, admitting while the lease holds."""
    EXPIRED = "expired"
    """The owner lease was lost: fail-stopped (no connections, no admission, no Store
    update) until the process is restarted as a new lifecycle."""
    CLOSING = "closing"
    """Graceful exit: descriptor removed, goodbyes sent."""
    CLOSED = "closed"


@final
class Counters:
    __slots__ = (
        "bytes_in",
        "bytes_out",
        "closes",
        "connections_opened",
        "dropped",
        "frames_in",
        "frames_out",
        "writes_out",
    )

    def __init__(self) -> None:
        self.frames_in = 0
        self.frames_out = 0
        self.writes_out = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.connections_opened = 0
        self.dropped: Counter[DropReason] = Counter()
        self.closes: Counter[CloseReason] = Counter()

    def drop(self, reason: DropReason) -> None:
        self.dropped[reason] += 1

    def closed(self, reason: CloseReason) -> None:
        self.closes[reason] += 1


@attrs.frozen
class MeshNodeStatistics:
    """A snapshot of one MeshNode."""

    identity: NodeIdentity
    phase: NodePhase
    lease: LeaseState
    admitting: bool
    endpoint: Endpoint | None
    """Advertised host and the actually bound port (None without meshes)."""
    peers_admitted: int
    peers_connecting: int
    frames_in: int
    """Records decoded on admitted connections (replies, pings and refused ones included)."""
    frames_out: int
    """Frames written on admitted connections (a fault-plan duplicate counts twice)."""
    writes_out: int
    """Writes those frames went out in (a frame written directly, a writer's batch, a
    self-drained group: connection.py): ``frames_out / writes_out`` is the coalescing."""
    bytes_in: int
    bytes_out: int
    frames_dropped: Mapping[DropReason, int]
    """Frames that never reached a handler or waiter, by reason (refused hellos too)."""
    connections_opened: int
    """Connections admitted (both directions)."""
    connections_closed: Mapping[CloseReason, int]
    """Connections that ended, admitted or not, by reason."""
    requests_pending: int
    lease_renewals: int
    lease_renew_failures: int
    descriptor_polls: int
    descriptor_poll_failures: int

    def dropped(self, reason: DropReason) -> int:
        return self.frames_dropped.get(reason, 0)

    def closed(self, reason: CloseReason) -> int:
        return self.connections_closed.get(reason, 0)


def frozen_counts(counter: Counter[K]) -> Mapping[K, int]:
    """A read-only copy."""
    return MappingProxyType(dict(counter))
