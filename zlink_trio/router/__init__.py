"""zlink_trio.router: the sticky-less SessionRouter (spec 10), usable on its own.

Serializes each session's turns across the web nodes behind a load balancer with no
stickiness. This package imports only ``zlink_trio.ids`` and ``zlink_trio.errors`` of the
runtime. Only re-exports live here (docs/router.md describes the parts).
"""

from .config import SessionRouterConfig as SessionRouterConfig
from .errors import (
    ConflictingAgentError as ConflictingAgentError,
    FencingRejected as FencingRejected,
    IdempotencyConflictError as IdempotencyConflictError,
    SessionClaimFailed as SessionClaimFailed,
)
from .ids import (
    AgentRef as AgentRef,
    IdempotencyKey as IdempotencyKey,
    InboundMessageId as InboundMessageId,
    NodeId as NodeId,
    ReserverId as ReserverId,
    SessionId as SessionId,
    TurnId as TurnId,
)
