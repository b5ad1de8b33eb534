"""What the application supplies to the router (spec 10 §2, §6.1, §11.2, §12).

* An :class:`AgentRuntime` per agent, registered at bootstrap in an
  :class:`AgentRuntimeLookup`. It is agent-scoped and outlives sessions: an opener looks one
  up, never creates one per open, and neither the router nor a :class:`LiveSession` closes
  it (bootstrap does).
* A :class:`LiveSessionOpener` (gets the caller's :class:`OpenAttributes`) or a stateless
  :class:`LiveSessionFactory` (does not): exactly one of the two.
* Optionally :class:`SessionMetrics`, whose hooks all default to no-ops.

Interrupts are Trio cancellation: the router runs ``LiveSession.run_turn`` inside a cancel
scope it owns and cancels that scope to interrupt the turn (then reports
``InterruptedAt(reason)``), so a session has no ``interrupt`` method to forget to honour.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from .approvals import SessionApprovals
from .disposition import DispositionKind
from .events import AgentExecutionEvent, AgentExecutionResult
from .ids import AgentRef, IdempotencyKey, SessionId, TurnId
from .session_store import SessionHistory
from .values import (
    LiveSessionOptions,
    OpenAttributes,
    Principal,
    Priority,
    SubmitOptions,
    UserInput,
)

__all__ = [
    "AgentRuntime",
    "AgentRuntimeLookup",
    "EventListener",
    "LiveSession",
    "LiveSessionFactory",
    "LiveSessionOpener",
    "OpenRequest",
    "QueuedInput",
    "SessionMetrics",
    "TurnInput",
]


class AgentRuntime(Protocol):
    """An agent's runtime (MCP clients, knowledge store...): expensive, shared by sessions."""

    @property
    def agent_ref(self) -> AgentRef: ...


class AgentRuntimeLookup(Protocol):
    """The bootstrap's registry of runtimes. ``lookup`` finds a registered runtime (raising
    :class:`~zlink_trio.errors.NotFound` when none is) and never constructs one."""

    def lookup(self, agent_ref: AgentRef, context_discriminator: str | None) -> AgentRuntime: ...


@attrs.frozen(kw_only=True)
class TurnInput:
    """What one turn gets: the user input (its wire form is
    :func:`~zlink_trio.router.values.user_input_to_wire`), the session's fenced history, the
    session's node-local approvals and per-turn metadata."""

    turn_id: TurnId
    user_input: UserInput
    history: SessionHistory
    approvals: SessionApprovals
    submit_options: SubmitOptions = attrs.field(factory=SubmitOptions)
    initiator: Principal | None = None
    idempotency_key: IdempotencyKey | None = None


@attrs.frozen(kw_only=True)
class QueuedInput:
    """A NOW message injected into the running turn (§9.3)."""

    user_input: UserInput
    priority: Priority
    initiator: Principal | None = None


class EventListener(Protocol):
    """Receives a turn's frames. Called on the turn's task: it must return at once."""

    def __call__(self, event: AgentExecutionEvent, /) -> None: ...


class LiveSession(Protocol):
    """A node-local handle on one session. Its transcript copy is a cache; the record store
    is the authority, re-read at the start of every turn (§3.1, §10.4)."""

    @property
    def session_id(self) -> SessionId: ...

    async def run_turn(self, turn: TurnInput, listener: EventListener) -> AgentExecutionResult:
        """Run one turn, emitting frames to ``listener``. Cancellation interrupts it."""
        ...

    def inject(self, queued: QueuedInput) -> None:
        """Queue input into the running turn (mid-turn injection); must not block."""
        ...

    async def aclose(self) -> None:
        """Close the handle. Never closes the AgentRuntime."""
        ...


@attrs.frozen(kw_only=True)
class OpenRequest:
    """What an opener gets on a cache miss."""

    session_id: SessionId
    agent_ref: AgentRef
    context_discriminator: str | None
    options: LiveSessionOptions
    open_attributes: OpenAttributes


class LiveSessionOpener(Protocol):
    """Opens a handle, passing the caller's domain attributes (a tenant id...) through."""

    async def open(self, request: OpenRequest) -> LiveSession: ...


class LiveSessionFactory(Protocol):
    """The stateless path: never sees OpenAttributes."""

    async def __call__(
        self, session_id: SessionId, agent_ref: AgentRef, options: LiveSessionOptions
    ) -> LiveSession: ...


class SessionMetrics:
    """Framework-neutral hooks (§12); every method is a no-op, override only what you need.

    Hooks must return at once and must not raise; the router guards every call anyway, so a
    hook that raises never reaches the router.
    """

    def on_lock_acquired(self, session_id: SessionId, latency: float) -> None:
        """An election won; ``latency`` seconds from attempt to answer."""

    def on_lock_rejected(self, session_id: SessionId, latency: float) -> None:
        """An election lost."""

    def on_cache_hit(self, session_id: SessionId) -> None:
        """A submit found an open handle."""

    def on_cache_miss(self, session_id: SessionId) -> None:
        """A submit had to open a handle."""

    def on_evicted(self, session_id: SessionId, cause: str) -> None:
        """A handle left the cache (``"idle"`` or ``"lru"``)."""

    def on_lease_extend_failed(self, session_id: SessionId) -> None:
        """A renewal found the lease gone (once per lost lease)."""

    def on_submit(self, session_id: SessionId, kind: DispositionKind) -> None:
        """One call per submit with its disposition."""

    def on_holder_lost(self, key: IdempotencyKey) -> None:
        """This node won a stale reservation's compareAndReset."""

    def on_takeover_rejected(self, key: IdempotencyKey) -> None:
        """The store said a collected message's reservation is someone else's."""

    def on_forward_doorbell_rerung(self, session_id: SessionId) -> None:
        """A waiting forward rang its session's doorbell again."""
