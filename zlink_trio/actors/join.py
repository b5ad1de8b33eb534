"""Deferred Join registration (spec 04 §3.1): ``join_spot(...).defer()`` and the handler
registration scope.

``Defer()`` only records: an immutable :class:`JoinIntent` (generation, current membership,
request snapshot, absolute monotonic deadline, a new OperationId) and an inactive barrier
(:class:`PendingJoin` on the Actor). It looks nothing up, touches no Store and sends
nothing. The barrier is activated by the framework when the handler that registered it
ends normally (its scope, :class:`JoinScope`, is then closed); an exception or a
cancellation discards it. What happens next is the Join transaction
(:mod:`.joining`).

The scope of an Actor handler is its turn: Defer is accepted only while the handler runs,
from the turn's own Trio task or a task descended from it through nurseries the handler
opened (so awaited by it). A detached task, a thread, a factory, a lifecycle callback or
code after the handler returned is refused (docs/decisions.md, "Membership").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Self, final

import attrs
import trio

from ..config import MIB
from ..errors import ConfigurationError, InvalidArgument, InvalidOperation, Unavailable
from ..ids import ActorId, ObjectGeneration, OperationId, SpotId
from ..wire.payloads import EMPTY_REGISTRY, PayloadRegistry

if TYPE_CHECKING:
    from .context import ActorContext
    from .host import ActorHost
    from .hosted import HostedActor

__all__ = [
    "INT_MAX_MS",
    "MAX_JOINS_PER_SCOPE",
    "MAX_JOIN_REQUESTS_PER_SCOPE",
    "MAX_JOIN_REQUEST_BYTES",
    "HeldJoin",
    "JoinCall",
    "JoinIntent",
    "JoinRegistrar",
    "JoinScope",
    "PendingJoin",
    "check_join_timeout",
    "task_within",
]

MAX_JOINS_PER_SCOPE: Final = 64
MAX_JOIN_REQUEST_BYTES: Final = MIB
MAX_JOIN_REQUESTS_PER_SCOPE: Final = 8 * MIB
INT_MAX_MS: Final = 2**31 - 1


def check_join_timeout(seconds: object) -> int:
    """An explicit Join timeout in whole milliseconds (rounded UP): finite, 1..INT_MAX ms.

    Raises InvalidArgument (a ConfigurationError) for anything else."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"join timeout must be a number of seconds, got {seconds!r}")
    if math.isnan(seconds) or math.isinf(seconds):
        raise InvalidArgument(f"join timeout must be finite, got {seconds!r}")
    if seconds <= 0:
        raise InvalidArgument(f"join timeout must be > 0 seconds, got {seconds!r}")
    ms = math.ceil(seconds * 1000 - 1e-9)
    ms = max(ms, 1)
    if ms > INT_MAX_MS:
        raise InvalidArgument(f"join timeout must be at most {INT_MAX_MS} ms, got {seconds!r} s")
    return ms


def task_within(root: trio.lowlevel.Task) -> bool:
    """Whether the calling code runs in the Trio task ``root`` or in a task descended from
    it through nurseries (a thread, or code outside Trio, is not)."""
    try:
        task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    except RuntimeError:
        return False
    while task is not None:
        if task is root:
            return True
        nursery = task.parent_nursery
        task = None if nursery is None else nursery.parent_task
    return False


@attrs.frozen
class JoinIntent:
    """What one ``defer()`` fixed (immutable)."""

    operation_id: OperationId
    actor_id: ActorId
    object_generation: ObjectGeneration
    membership: SpotId | None
    """The Actor's Spot when the Join was registered."""
    target: SpotId | None
    """The Spot asked for; None: the Entry Spot of the Actor's current node."""
    entry: bool
    """``join_entry_spot`` (the target is an Entry Spot)."""
    request: bytes
    deadline: float
    """Trio (monotonic) time: registration time + timeout."""
    timeout_ms: int


@final
class JoinScope:
    """The handler registration scope of one handler turn: the Joins it registered."""

    __slots__ = ("_task", "closed", "pending", "request_bytes")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self._task = task
        self.closed = False
        self.pending: list[PendingJoin] = []
        self.request_bytes = 0

    def holds_current_task(self) -> bool:
        """Open, and the caller runs in the scope's task (or a task it awaits)."""
        return not self.closed and task_within(self._task)


@final
class PendingJoin:
    """An Actor's pending membership transition: registered (inactive barrier) until its
    scope closes, then running until its completion. ``done`` is set when it is over
    (discarded or completed)."""

    __slots__ = ("done", "hosted", "intent", "parked", "scope")

    def __init__(self, intent: JoinIntent, scope: JoinScope, hosted: HostedActor) -> None:
        self.intent = intent
        self.scope = scope
        self.hosted = hosted
        self.done = trio.Event()
        self.parked = False
        """A Spot handler's registration: the Actor was parked at ``defer()``."""


@final
class HeldJoin:
    """A cross-node Join's new activation on its target, Joining until the source's
    journal is complete (``end``) or the hold's bound passed. ``items``: the journal
    payloads by index (one copy each); ``released``: they went into the lane (a late
    repeat of a known index is then dropped)."""

    __slots__ = ("done", "end", "items", "operation_id", "released", "scope", "source")

    def __init__(self, operation_id: OperationId, source: tuple[object, object]) -> None:
        self.operation_id = operation_id
        self.source = source
        """(NodeRid, NodeGeneration) of the Actor's previous owner."""
        self.end = trio.Event()
        self.done = trio.Event()
        self.items: dict[int, Any] = {}
        self.released = False
        self.scope: JoinScope | None = None

    def first_missing(self, count: int) -> int | None:
        """The first index below ``count`` not received yet (None: all there)."""
        for index in range(count):
            if index not in self.items:
                return index
        return None


Activate = Callable[[PendingJoin], None]


@final
class JoinRegistrar:
    """Registration, activation and discard of deferred Joins on this node."""

    __slots__ = ("_activate", "_default_ms", "_host", "_payloads", "_restore", "open")

    def __init__(
        self,
        host: ActorHost,
        *,
        default_timeout: float,
        payloads: PayloadRegistry = EMPTY_REGISTRY,
    ) -> None:
        self._host = host
        self._default_ms = check_join_timeout(default_timeout)
        self._payloads = payloads
        self._activate: Activate | None = None
        self._restore: Activate | None = None
        self.open = 0
        """Registrations whose scope is still open (the request guard's fast exit)."""

    def bind(self, activate: Activate, restore: Activate | None = None) -> None:
        """The transaction runner that starts an activated Join (and un-parks the member
        of a discarded Spot-handler registration once its turn in progress ended)."""
        self._activate = activate
        self._restore = restore

    # --- registration -------------------------------------------------------------------
    def snapshot(self, request: object) -> bytes:
        """The request's immutable encoded snapshot (an omitted request is ``b""``)."""
        if type(request) is bytes:
            return request
        if isinstance(request, bytearray | memoryview):
            return bytes(request)
        codec = self._payloads.of(request)
        if codec is None:
            raise InvalidOperation(
                "a join request must be bytes or an instance of a registered payload class, "
                f"got {type(request).__name__}"
            )
        return codec.encode(request)

    def register(self, context: ActorContext, call: JoinCall) -> OperationId:
        """Record ``call`` for the Actor of ``context`` in the current handler's scope
        (the checks and their order: docs/decisions.md, "Membership")."""
        if context.retired:
            raise Unavailable(
                f"actor {context.actor_id.value!r} moved to another node: its old Context "
                "cannot join (use the current activation)"
            )
        hosted = self._host.get(context.actor_id)
        scope = None if hosted is None or hosted.context is not context else hosted.open_scope()
        if scope is None or hosted is None:
            raise InvalidOperation(
                "defer() is allowed only inside an Actor or Spot handler, from its own task "
                "(not from a factory, a lifecycle callback, a detached task, a thread, or "
                "after the handler returned)"
            )
        return self.register_in(scope, hosted, call)

    def open_scope(self, task: trio.lowlevel.Task | None = None) -> JoinScope:
        """A registration scope for the handler running in ``task`` (default: the calling
        task). A Spot host opens one around a User Spot request, packet or timer handler
        (its lane's runner task), passes it to :meth:`member_call`, and closes it with
        :meth:`close` when the handler ended."""
        return JoinScope(trio.lowlevel.current_task() if task is None else task)

    def member_call(
        self,
        scope: JoinScope | None,
        spot_id: SpotId,
        actor_id: ActorId,
        target: SpotId | None,
        *,
        entry: bool,
        request: object = b"",
    ) -> JoinCall:
        """A Join of the member ``actor_id`` of the Spot ``spot_id``, registered (at
        ``defer()``) in a Spot handler's ``scope`` (None: the call was made outside a
        handler; its ``defer()`` is InvalidOperation)."""
        call = JoinCall(self, None, target, entry=entry, request=request)
        call.member = (scope, spot_id, actor_id)
        return call

    def register_member(
        self, scope: JoinScope | None, spot_id: SpotId, actor_id: ActorId, call: JoinCall
    ) -> OperationId:
        """A Spot handler's registration for its member ``actor_id``. The member's
        barrier is active from here on (its lane is parked: a member on its own gate, a
        PerActor one, could otherwise run its next message while the Spot's handler still
        runs); a discarded registration un-parks it in order."""
        if scope is None:
            raise InvalidOperation(
                "defer() is allowed only inside a User Spot request, packet or timer "
                "handler, from its own task"
            )
        hosted = self._host.get(actor_id)
        if hosted is None or hosted.context.spot_id != spot_id:
            raise InvalidOperation(
                f"actor {actor_id.value!r} is not a local member of spot {spot_id.value!r}"
            )
        operation_id = self.register_in(scope, hosted, call)
        pending = hosted.join
        assert isinstance(pending, PendingJoin)
        pending.parked = True
        self._host.park(hosted)
        return operation_id

    def register_in(self, scope: JoinScope, hosted: HostedActor, call: JoinCall) -> OperationId:
        """Record ``call`` for ``hosted`` (a local Actor) in ``scope`` — for a Spot
        handler's scope too (its host checks that ``hosted`` is a member)."""
        if not scope.holds_current_task():
            raise InvalidOperation("the handler registration scope is closed")
        request = self.snapshot(call.request)
        if len(scope.pending) >= MAX_JOINS_PER_SCOPE:
            raise ConfigurationError(f"a handler may register at most {MAX_JOINS_PER_SCOPE} joins")
        if len(request) > MAX_JOIN_REQUEST_BYTES:
            raise ConfigurationError(
                f"a join request is at most {MAX_JOIN_REQUEST_BYTES} bytes, got {len(request)}"
            )
        if scope.request_bytes + len(request) > MAX_JOIN_REQUESTS_PER_SCOPE:
            raise ConfigurationError(
                f"the join requests of one handler are at most {MAX_JOIN_REQUESTS_PER_SCOPE} "
                f"bytes together ({scope.request_bytes} registered, {len(request)} more)"
            )
        if hosted.join is not None:
            raise Unavailable(
                f"actor {hosted.actor_id.value!r} already has a pending membership transition"
            )
        if not hosted.admitting:
            raise Unavailable(f"actor {hosted.actor_id.value!r} is not Ready (being destroyed)")
        timeout_ms = self._default_ms if call.timeout_ms is None else call.timeout_ms
        context = hosted.context
        intent = JoinIntent(
            operation_id=OperationId.new(),
            actor_id=context.actor_id,
            object_generation=context.object_generation,
            membership=context.spot_id,
            target=call.target,
            entry=call.entry,
            request=request,
            deadline=trio.current_time() + timeout_ms / 1000,
            timeout_ms=timeout_ms,
        )
        pending = PendingJoin(intent, scope, hosted)
        scope.pending.append(pending)
        scope.request_bytes += len(request)
        hosted.join = pending
        self.open += 1
        return intent.operation_id

    # --- the end of the scope -------------------------------------------------------------
    def close(self, scope: JoinScope, *, ok: bool) -> None:
        """The handler of ``scope`` ended: ``ok`` (normally, its reply shaped) activates
        every barrier it registered, in registration order; otherwise they are discarded
        (no Join happens, nothing is reported)."""
        scope.closed = True
        pending, scope.pending = scope.pending, []
        self.open -= len(pending)
        for p in pending:
            if ok and self._activate is not None:
                self._activate(p)
            elif p.parked and self._restore is not None:
                self._restore(p)  # clears the transition once the member runs again
            else:
                p.hosted.join = None
                if p.parked:
                    self._host.restore(p.hosted)
                p.done.set()

    def check_request(self, target: ActorId) -> None:
        """Refuse (InvalidOperation) a request the caller would wait for behind a barrier
        its own open scope registered (it would wait for ever)."""
        hosted = self._host.get(target)
        pending = None if hosted is None else hosted.join
        scope = None if pending is None else pending.scope
        if scope is not None and scope.holds_current_task():
            raise InvalidOperation(
                f"actor {target.value!r} has a deferred Join this handler registered: a "
                "request to it would wait behind its barrier (send one-way instead)"
            )


@final
class JoinCall:
    """``context.join_spot(...)`` / ``join_entry_spot(...)``: ``.timeout(s)`` at most once,
    then the synchronous terminal :meth:`defer` (once). There is no awaitable Join."""

    __slots__ = (
        "_context",
        "_deferred",
        "_registrar",
        "entry",
        "member",
        "request",
        "target",
        "timeout_ms",
    )

    def __init__(
        self,
        registrar: JoinRegistrar | None,
        context: ActorContext | None,
        target: SpotId | None,
        *,
        entry: bool,
        request: object,
    ) -> None:
        self._registrar = registrar
        self._context = context
        self.target = target
        self.entry = entry
        self.request = request
        self.timeout_ms: int | None = None
        self.member: tuple[JoinScope | None, SpotId, ActorId] | None = None
        """A Spot handler's Join of one of its members: (scope, Spot, Actor)."""
        self._deferred = False

    @classmethod
    def to_spot(
        cls,
        registrar: JoinRegistrar | None,
        context: ActorContext,
        spot_id: object,
        request: object,
    ) -> JoinCall:
        target = _spot_id(spot_id)
        if target.is_reserved_entry_shape:
            raise InvalidOperation(
                f"{target.value!r} is an Entry Spot id: use join_entry_spot() for Entry Spots"
            )
        return cls(registrar, context, target, entry=False, request=request)

    @classmethod
    def to_entry(
        cls,
        registrar: JoinRegistrar | None,
        context: ActorContext,
        entry_spot_id: object,
        request: object,
    ) -> JoinCall:
        target = None if entry_spot_id is None else _spot_id(entry_spot_id)
        if target is not None and not target.is_reserved_entry_shape:
            raise InvalidOperation(f"{target.value!r} is not an Entry Spot id: use join_spot()")
        return cls(registrar, context, target, entry=True, request=request)

    def timeout(self, seconds: float) -> Self:
        """The Join's own timeout (default ``ServerConfig.join_timeout``, 5 s), rounded up
        to whole milliseconds, finite, 1 ms .. 2**31-1 ms (else InvalidArgument). The
        deadline is fixed at :meth:`defer`."""
        if self._deferred:
            raise InvalidOperation("timeout() after defer()")
        if self.timeout_ms is not None:
            raise InvalidOperation("timeout() set twice")
        self.timeout_ms = check_join_timeout(seconds)
        return self

    def defer(self) -> OperationId:
        """Register the Join to run after the current handler ends normally. Returns its
        OperationId (the completion callback's ``operation_id``). Synchronous: no lookup,
        no Store access, nothing sent.

        Raises:
            InvalidOperation: deferred already; outside a handler registration scope.
            Unavailable: the Context was retired (the Actor moved away); the Actor has
                another pending membership transition (or is being destroyed).
            ConfigurationError: more than 64 Joins in this handler, a request over 1 MiB,
                more than 8 MiB of requests in this handler.
        """
        if self._deferred:
            raise InvalidOperation("defer() was already called on this join")
        registrar = self._registrar
        if registrar is None:
            raise InvalidOperation("this Actor runtime has no Spot membership")
        if self.member is not None:
            scope, spot_id, actor_id = self.member
            operation_id = registrar.register_member(scope, spot_id, actor_id, self)
        else:
            assert self._context is not None
            operation_id = registrar.register(self._context, self)
        self._deferred = True
        return operation_id

    def __repr__(self) -> str:
        what = "entry spot" if self.entry else "spot"
        return f"<JoinCall {what} {self.target and self.target.value!r}>"


def _spot_id(value: object) -> SpotId:
    """``value`` as a SpotId (InvalidId, a ConfigurationError, when it is not one)."""
    return value if isinstance(value, SpotId) else SpotId.parse(value)
