"""The state of one session's drain pass on one node (spec 10 §3.2, §7.1 F4, §7.2, §9.3):
the work it runs, the turn running now, and the node-local turn gate a pass holds.

Internal to the router; nothing here does I/O.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Literal, TypeAlias, final

import attrs
import trio

from .application import LiveSession
from .disposition import TurnFuture
from .events import InterruptReason
from .ids import TurnId
from .inbox import InboundMessage
from .lease import HeldLease, Reservation
from .relay import TurnRelay
from .values import Priority, SubmitRequest

__all__ = ["Collected", "Injected", "Own", "Pass", "PassEnd", "RunningTurn", "Work"]


@attrs.frozen(eq=False)
class Own:
    """The submit that opened the pass; its caller holds ``future``."""

    request: SubmitRequest
    turn_id: TurnId
    future: TurnFuture
    reservation: Reservation | None
    delivered_at: float
    kind: ClassVar[Literal["own"]] = "own"

    @property
    def priority(self) -> Priority:
        return self.request.priority


@attrs.frozen(eq=False)
class Collected:
    """A message taken from the inbox; its caller waits on the TURN_RESULT rail."""

    message: InboundMessage
    kind: ClassVar[Literal["collected"]] = "collected"

    @property
    def priority(self) -> Priority:
        return self.message.priority

    @property
    def delivered_at(self) -> float:
        return self.message.delivered_at


Work: TypeAlias = Own | Collected


@attrs.frozen(eq=False)
class Injected:
    """A NOW message injected into a running turn (§9.3): it shares that turn's result, and
    ``taken`` is the reservation it took over (None: keyless, or the store said it is
    someone else's), finished with that result before its TURN_RESULT."""

    message: InboundMessage
    taken: Reservation | None


@final
class RunningTurn:
    def __init__(self, turn_id: TurnId, handle: LiveSession, relay: TurnRelay) -> None:
        self.turn_id = turn_id
        self.handle = handle
        self.relay = relay
        self.scope = trio.CancelScope()
        self.reason: InterruptReason | None = None
        self.injected: list[Injected] = []

    def interrupt(self, reason: InterruptReason) -> None:
        if self.reason is None:
            self.reason = reason
        self.scope.cancel()


class PassEnd(enum.Enum):
    """Who finishes a stopped pass's session: the pass itself (a hand-off, a lost lease, an
    LRU eviction) or the ``release_session``/``delete_session`` call that stopped it."""

    HAND_OFF = "hand_off"
    CALLER = "caller"


@final
class Pass:
    """The node-local turn gate's holder for one session: a drain pass, or a release,
    delete or clean-up that must not run beside a turn."""

    def __init__(self) -> None:
        self.running: RunningTurn | None = None
        self.stop: InterruptReason | None = None
        self.end_by: PassEnd = PassEnd.HAND_OFF
        self.injected: list[Injected] = []
        self.evicted: LiveSession | None = None
        """The session's handle the LRU bound pushed out of the cache while this gate was
        held: closed when the gate is given up, not before (the pin delays the close)."""
        self.upcoming: TurnId | None = None
        """The own turn this pass was started for, until it starts (submit returned its id)."""
        self.upcoming_interrupt: InterruptReason | None = None
        """A targeted interrupt naming ``upcoming`` heard before that turn started."""
        self.rung = False
        """A MESSAGE_ENQUEUED was heard while this gate was held (since the pass's last
        collect began): the pass looks again before it ends, so a message delivered after
        that collect read the inbox is not left waiting for a re-ring."""
        self.joinable = False
        """True only while the pass reads the inbox between turns (no turn running): a
        submit on this node then joins the pass (:attr:`joined`) instead of crossing the
        inbox and the bus to reach the very pass it would be collected by."""
        self.joined: list[Own] = []
        """Own submits that joined during the current collect; merged after it."""
        self.queue: list[Work] = []
        """A drain pass's work not yet run (what its collects returned, its own submit)."""
        self.draining = False
        """A drain pass (not a release's, delete's or clean-up's gate, nor a claim before
        its pass): it reads the inbox under the lease, so a close does not give the lease
        back while it is in the router's own steps (§6.3 C, docs/decisions.md)."""
        self.done = trio.Event()
        self.inject_lock = trio.Lock()
        """Held while NOW messages are injected into the running turn (one injector at a
        time, in collection order); the turn's end takes it once before reading what was
        injected."""

    def stopped(self, held: HeldLease) -> bool:
        """No further turn in this pass: stopped, lease gone, or handle evicted."""
        return self.stop is not None or held.ended is not None or self.evicted is not None
