"""SessionBindingAggregate: the ONE place of Session-side binding validation (spec 02 §2,
§4–§8).

The aggregate holds, for this node's session owner lifecycle, every open session and each
session's bindings (ActorId → :class:`Binding`) with their routes, and decides every
session-side question by comparing exactly the values the spec names:

* the physical session identity and its SessionRid (this owner's NodeRid, lifecycle
  generation, owner id; the session's 16-byte RID);
* the binding generation and the ActorId / ObjectGeneration it points at;
* the relocation identity of a seal, and that the seal and the route change name the same
  binding.

It never reads or writes the Location Store, never re-checks Actor authority and never
chooses a relocation target. Every method is synchronous: each call is one step of the
serial execution section (Trio runs no other task inside it), so a commit and every
state derived from it (the route, the current ActorRef location snapshot, the indexes the
push path reads) become visible at one point — linearization point 2 of spec 02 §5.

Binding generations come from one owner-wide counter and are compared only within this
owner lifecycle (another owner, or a restart of this one, is another identity).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, TypeAlias, final

import attrs

from ..errors import SessionNotBound, ShuttingDown, Unavailable
from ..ids import (
    ActorId,
    ActorRef,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
)
from ..wire.records import BoundSessionClose, BoundSessionReplaced, BoundSessionSend
from ..wire.tails import BindTail, SessionRouteAbort, SessionRouteCommit

if TYPE_CHECKING:
    from ..actors.bindings import BindingIdentity

__all__ = [
    "BOUND",
    "MAX_EARLY_PUSHES",
    "Binding",
    "BindingRoute",
    "Bound",
    "EndReason",
    "Ended",
    "Held",
    "Releasing",
    "SealOutcome",
    "Sealed",
    "Sender",
    "SessionBindingAggregate",
    "SessionEntry",
    "SessionOwnerIdentity",
    "SessionStatus",
]


class SessionStatus(enum.Enum):
    OPEN = "open"
    """Inbound application dispatch and new binds are accepted."""
    CLOSING = "closing"
    """A binding was replaced (spec 02 §6): no new inbound application dispatch, no new
    bind; outbound sends (the replacement callback's notice, pushes) still go out."""
    CLOSED = "closed"
    """The connection is gone: nothing is accepted; its bindings are being cleaned."""


class EndReason(enum.Enum):
    """Why a binding left its session (the client's Unbound frame tells most of them)."""

    REPLACED = "replaced"
    DESTROYED = "destroyed"
    OWNER_LOST = "owner_lost"
    NOTIFIED = "notified"
    DISCONNECTED = "disconnected"
    SEAL_TIMEOUT = "seal_timeout"


@attrs.frozen(slots=True)
class SessionOwnerIdentity:
    """This session owner lifecycle, as a binding (and a 51) names it."""

    node_rid: NodeRid
    node_generation: NodeGeneration
    owner_id: int
    lease_generation: OwnerLeaseGeneration


@attrs.frozen(slots=True)
class BindingRoute:
    """Where a binding's relays go: the Actor owner that admitted the bind (its fence)."""

    mesh_name: MeshName
    node_rid: NodeRid
    node_generation: NodeGeneration
    owner_generation: AuthorityOwnerGeneration
    lease_generation: OwnerLeaseGeneration


# --- binding states (a tagged union: Bound | Sealed | Ended) ---------------------------------


@attrs.frozen
class Bound:
    """Relays go to the route now."""


@final
class Held:
    """A message accepted while its binding was sealed (spec 02 §8.1), with what it needs
    to be submitted later (its own size, deadline and cancellation limits still apply)."""

    __slots__ = ("item", "sequence")

    def __init__(self, item: object, sequence: int) -> None:
        self.item = item
        self.sequence = sequence


@final
class Sealed:
    """A relocation of the bound Actor installed a seal: relays are held in arrival order
    until command 44 (commit or abort) or the seal deadline."""

    __slots__ = ("deadline", "early", "held", "relocation_id", "resolved", "timer")

    def __init__(self, relocation_id: OperationId, deadline: float) -> None:
        self.relocation_id = relocation_id
        self.deadline = deadline
        self.held: list[Held] = []
        self.early: list[EarlyRecord] = []
        """Pushes, 140s and a 51 of a newer owner that arrived before the 44, in arrival
        order (checked again at commit)."""
        self.timer: object = None
        """The session owner's seal-timeout timer (cancelled when a 44 wins)."""
        self.resolved: object = None
        """Set by the session owner when a 44 resolved a parked seal."""


@final
class Releasing:
    """Command 44 was applied (a commit switched the route and the ref; an abort kept the
    source route): the seal and its timeout are over, and the held messages are being
    submitted in arrival order. A relay accepted now queues behind them (so nothing
    that arrives after the unseal overtakes a held message); the binding is Bound once
    the queue is empty (:meth:`SessionBindingAggregate.take_held`)."""

    __slots__ = ("early", "held", "relocation_id", "timer")

    def __init__(
        self,
        relocation_id: OperationId,
        held: list[Held],
        timer: object,
        early: list[EarlyRecord],
    ) -> None:
        self.relocation_id = relocation_id
        self.held = held
        self.early = early
        """The kept early records (:meth:`SessionBindingAggregate.accept_push`,
        ``accept_control``, ``replaced``), for the session owner to check again (commit)
        or drop (abort)."""
        self.timer = timer
        """The seal's timer, for the session owner to cancel."""


@attrs.frozen
class Ended:
    reason: EndReason


BindingState: TypeAlias = Bound | Sealed | Releasing | Ended
EarlyRecord: TypeAlias = BoundSessionSend | BoundSessionClose | BoundSessionReplaced
"""What a newer owner of a sealed binding's incarnation sent before the move's 44."""
Sender: TypeAlias = tuple[NodeRid, NodeGeneration]
"""The node lifecycle a relocation command came from (the transport proved it)."""
BOUND: Final = Bound()
MAX_EARLY_PUSHES: Final = 1024
"""Pushes of a sealed binding's next owner kept until its 44, or of a bind in flight kept
until its terminal (more are rejected)."""


@final
class Binding:
    """One Actor binding of one session. ``ref`` is the current ActorRef location
    snapshot (it follows a relocation; ActorId and ObjectGeneration never change)."""

    __slots__ = ("entry", "generation", "handle", "notice", "ref", "route", "state")

    def __init__(
        self, entry: SessionEntry, ref: ActorRef, generation: int, route: BindingRoute
    ) -> None:
        self.entry = entry
        self.ref = ref
        self.generation = generation
        self.route = route
        self.state: BindingState = BOUND
        self.notice: object = None
        """The disconnect notification of this binding once one started (one per binding
        identity: a NotifyDisconnected and the physical disconnect share it)."""
        self.handle: object = None
        """The public handle of this binding (made once by the session's actors API)."""

    @property
    def actor_id(self) -> ActorId:
        return self.ref.actor_id

    @property
    def object_generation(self) -> ObjectGeneration:
        return self.ref.object_generation

    @property
    def current(self) -> bool:
        """Still the session's binding of its Actor (not ended, not replaced)."""
        return not isinstance(self.state, Ended) and self.entry.bindings.get(self.actor_id) is self

    def __repr__(self) -> str:
        return (
            f"<Binding {self.actor_id.value!r} gen={self.object_generation.value} "
            f"binding={self.generation} {type(self.state).__name__}>"
        )


@final
class SessionEntry:
    """One physical session as the aggregate knows it."""

    __slots__ = ("bindings", "by_generation", "sequence", "session_rid", "status")

    def __init__(self, session_rid: bytes) -> None:
        self.session_rid = session_rid
        self.status = SessionStatus.OPEN
        self.bindings: dict[ActorId, Binding] = {}
        self.by_generation: dict[int, Binding] = {}
        self.sequence = 0
        """Session sequence of the last accepted relay (spec 02 §4: acceptance order)."""


class SealOutcome(enum.Enum):
    SEALED = "sealed"
    REJECTED = "rejected"


@final
class SessionBindingAggregate:
    """See the module docstring."""

    __slots__ = (
        "_admitting",
        "_by_node",
        "_generation",
        "_parked",
        "_pending",
        "_sessions",
        "owner",
    )

    def __init__(self, owner: SessionOwnerIdentity) -> None:
        self.owner = owner
        self._sessions: dict[bytes, SessionEntry] = {}
        self._pending: dict[tuple[bytes, int], list[BoundSessionSend]] = {}
        """Binds in flight (session RID, binding generation) and the pushes that arrived
        for them before their terminal (see :meth:`accept_push`)."""
        self._parked: dict[tuple[bytes, int], Binding] = {}
        """Sealed bindings of closed sessions, until their seal resolves (see close)."""
        self._by_node: dict[NodeRid, set[Binding]] = {}
        self._generation = 0
        self._admitting = True

    # --- sessions -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> Iterator[SessionEntry]:
        return iter(list(self._sessions.values()))

    def session(self, session_rid: bytes) -> SessionEntry | None:
        return self._sessions.get(session_rid)

    def stop_admitting(self) -> None:
        """Shutdown: no new session and no new bind from now on (spec 02 §10)."""
        self._admitting = False

    @property
    def admitting(self) -> bool:
        return self._admitting

    def open(self, session_rid: bytes) -> SessionEntry:
        if not self._admitting:
            raise ShuttingDown("the session owner is shutting down: no new session")
        if session_rid in self._sessions:
            raise Unavailable("connection id collision")  # 128 random bits: never expected
        entry = self._sessions[session_rid] = SessionEntry(session_rid)
        return entry

    def closing(self, entry: SessionEntry) -> None:
        """The session stops taking inbound application dispatch (replacement)."""
        if entry.status is SessionStatus.OPEN:
            entry.status = SessionStatus.CLOSING

    def close(self, entry: SessionEntry) -> list[Binding]:
        """The physical connection is gone: freeze the current binding snapshot (each
        binding is then cleaned up once by the caller) and forget the session."""
        entry.status = SessionStatus.CLOSED
        snapshot = list(entry.bindings.values())
        for binding in snapshot:
            self._forget(binding)
            if isinstance(binding.state, Sealed):
                # A physical disconnect says nothing about the move: the seal's 44 (or
                # its deadline) still decides which route the disconnect goes to.
                self._parked[(entry.session_rid, binding.generation)] = binding
        if self._sessions.get(entry.session_rid) is entry:
            del self._sessions[entry.session_rid]
        return snapshot

    # --- bind -----------------------------------------------------------------------------------
    def begin_bind(self, entry: SessionEntry) -> int:
        """A bind may start: its binding generation (fresh, owner-wide)."""
        if not self._admitting:
            raise ShuttingDown("the session owner is shutting down: no new binding")
        if entry.status is not SessionStatus.OPEN:
            raise Unavailable(f"the session is {entry.status.value}: no new binding")
        self._generation += 1
        self._pending[(entry.session_rid, self._generation)] = []
        return self._generation

    def bind_pending(self, session_rid: bytes, generation: int) -> bool:
        """Whether a bind of that session and binding generation is in flight here (its
        terminal not committed yet)."""
        return (session_rid, generation) in self._pending

    def end_bind(self, entry: SessionEntry, generation: int) -> list[BoundSessionSend]:
        """The bind of ``generation`` ended (committed or not): the pushes kept for it,
        in arrival order (the caller checks them again against the committed binding,
        or rejects them)."""
        return self._pending.pop((entry.session_rid, generation), [])

    def commit_bind(
        self, entry: SessionEntry, ref: ActorRef, tail: BindTail, route: BindingRoute
    ) -> Binding | None:
        """The Actor owner registered ``tail.binding_generation`` (its terminal arrived):
        publish the binding, its route and location snapshot in one step. None when the
        session is no longer open (the caller tombstones what the owner registered).

        The same physical session re-binding its current binding gets the generation it
        had (the owner answered with it): that binding stays as it is (idempotent)."""
        if entry.status is SessionStatus.CLOSED or self._sessions.get(entry.session_rid) is not (
            entry
        ):
            return None
        existing = entry.bindings.get(ref.actor_id)
        if (
            existing is not None
            and existing.generation == tail.binding_generation
            and existing.object_generation == ref.object_generation
        ):
            return existing
        if existing is not None:
            self._forget(existing)  # this session moves on to the new generation
            existing.state = Ended(EndReason.REPLACED)
        binding = Binding(entry, ref, tail.binding_generation, route)
        entry.bindings[ref.actor_id] = binding
        entry.by_generation[binding.generation] = binding
        self._by_node.setdefault(route.node_rid, set()).add(binding)
        return binding

    def find(self, entry: SessionEntry, actor_id: ActorId) -> Binding | None:
        """This session's binding of ``actor_id`` (never a directory lookup)."""
        binding = entry.bindings.get(actor_id)
        return binding if binding is not None and binding.current else None

    # --- relay ------------------------------------------------------------------------------------
    def relay(self, binding: Binding) -> int:
        """A relay through ``binding`` is accepted now: its session sequence.

        A closing session (replaced) still relays the packets it accepted before, through
        its other bindings; a closed one relays nothing.

        Raises:
            SessionNotBound: the binding ended (replaced, destroyed, disconnected, ...).
            Unavailable: the session is closed.
        """
        entry = binding.entry
        if not binding.current:
            raise SessionNotBound(f"actor {binding.actor_id.value!r} is not bound here any more")
        if entry.status is SessionStatus.CLOSED:
            raise Unavailable("the session is closed")
        entry.sequence += 1
        return entry.sequence

    # --- Actor → session records (36, 51, 140) ----------------------------------------------------
    def accept_push(self, record: BoundSessionSend) -> Binding | str | None:
        """The binding a push may be submitted through, or why it may not (all four of
        spec 02 §5 must be current: ObjectGeneration, source NodeGeneration,
        AuthorityOwnerGeneration, binding generation).

        None: the push is kept — its binding is sealed for a relocation and the push comes
        from a newer owner of the same incarnation (the move's target runs turns before
        its command 44 is handled here). It is checked again against the committed route
        when the 44 commit is applied, and dropped by an abort or the seal timeout.
        Also kept: a push for a bind of this session still in flight here — the Actor
        owner registered it and the Actor's next turn pushed before the terminal came
        back (a followed bind's terminal comes through the previous owner; a local one
        after a schedule point). The bind checks it again once committed
        (:meth:`end_bind`)."""
        binding = self._current_binding(
            record.session_owner_rid,
            record.session_owner_generation,
            record.session_rid,
            record.expected_binding_generation,
        )
        if isinstance(binding, str):
            early = self._pending.get((record.session_rid, record.expected_binding_generation))
            entry = self._sessions.get(record.session_rid)
            if (
                early is not None
                and entry is not None
                and entry.status is SessionStatus.OPEN
                and record.expected_binding_generation not in entry.by_generation
                and record.session_owner_rid == self.owner.node_rid
                and record.session_owner_generation == self.owner.node_generation
                and len(early) < MAX_EARLY_PUSHES
            ):
                early.append(record)
                return None
            return binding
        if _fence_holds(
            binding,
            record.actor_id,
            record.object_generation,
            record.source_rid,
            record.source_node_generation,
            record.authority_owner_generation,
        ):
            return binding
        if _keep_early(
            binding, record.actor_id, record.object_generation, record.authority_owner_generation
        ):
            state = binding.state
            assert isinstance(state, Sealed)
            state.early.append(record)
            return None
        return _STALE_FENCE

    def push_binding(
        self,
        identity: BindingIdentity,
        actor_id: ActorId,
        object_generation: ObjectGeneration,
        source_rid: NodeRid,
        source_generation: NodeGeneration,
        owner_generation: AuthorityOwnerGeneration,
    ) -> Binding | None:
        """:meth:`accept_push` of a local push (the Actor owner is this node) by the
        fields its record would carry, without building the record: the binding when
        the push may be submitted through it (accept_push would return it), else None
        — then the caller builds the record and asks :meth:`accept_push`, which
        answers from the same state (these checks change nothing)."""
        # (``_current_binding`` and ``_fence_holds`` inline, the same tests in the same
        # order: two Python calls fewer per push; ``is`` first: the same value object
        # needs no attrs ``__eq__`` call)
        owner = self.owner
        owner_rid = identity.owner_rid
        node_generation = identity.owner_generation
        if (owner_rid is not owner.node_rid and owner_rid != owner.node_rid) or (
            node_generation is not owner.node_generation
            and node_generation != owner.node_generation
        ):
            return None
        entry = self._sessions.get(identity.session_rid)
        if entry is None or entry.status is SessionStatus.CLOSED:
            return None
        binding = entry.by_generation.get(identity.binding_generation)
        if binding is None or isinstance(binding.state, Ended):
            return None
        ref = binding.ref
        ref_actor_id = ref.actor_id
        if binding.entry.bindings.get(ref_actor_id) is not binding:
            return None
        route = binding.route
        if (
            (ref_actor_id is actor_id or ref_actor_id == actor_id)
            and (
                ref.object_generation is object_generation
                or ref.object_generation == object_generation
            )
            and (route.node_rid is source_rid or route.node_rid == source_rid)
            and (
                route.node_generation is source_generation
                or route.node_generation == source_generation
            )
            and (
                route.owner_generation is owner_generation
                or route.owner_generation == owner_generation
            )
        ):
            return binding
        return None

    def accept_control(self, record: BoundSessionClose) -> Binding | str | None:
        """As :meth:`accept_push` for a command 140 (None: kept with a sealed binding's
        early records, from a newer owner of the same incarnation)."""
        binding = self._current_binding(
            record.session_owner_rid,
            record.session_owner_generation,
            record.session_rid,
            record.binding_generation,
        )
        if isinstance(binding, str) or _fence_holds(
            binding,
            record.actor_id,
            record.object_generation,
            record.source_rid,
            record.source_generation,
            record.authority_owner_generation,
        ):
            return binding
        if _keep_early(
            binding, record.actor_id, record.object_generation, record.authority_owner_generation
        ):
            state = binding.state
            assert isinstance(state, Sealed)
            state.early.append(record)
            return None
        return _STALE_FENCE

    def _current_binding(
        self,
        owner_rid: NodeRid,
        owner_generation: NodeGeneration,
        session_rid: bytes,
        binding_generation: int,
    ) -> Binding | str:
        """The current binding a 24 or a 140 from an Actor owner names, or why there is none:
        the session owner lifecycle, an open session and its current binding generation."""
        owner = self.owner
        # (``is`` first: the same value object, no attrs ``__eq__``/``__ne__`` call.)
        if (owner_rid is not owner.node_rid and owner_rid != owner.node_rid) or (
            owner_generation is not owner.node_generation
            and owner_generation != owner.node_generation
        ):
            return "names another session owner lifecycle"
        entry = self._sessions.get(session_rid)
        if entry is None or entry.status is SessionStatus.CLOSED:
            return "unknown or closed session"
        binding = entry.by_generation.get(binding_generation)
        if (
            binding is None
            or isinstance(binding.state, Ended)
            or binding.entry.bindings.get(binding.ref.actor_id) is not binding
        ):  # (``Binding.current``, inlined: two Python calls fewer per push)
            return "not the current binding"
        return binding

    def replaced(self, record: BoundSessionReplaced) -> Binding | str | None:
        """Command 51: the retired binding, when EVERY identity value of the record's
        previous-owner part matches a current binding of this owner (and the sender is
        that binding's Actor owner); it is retired here and its session goes closing.
        Otherwise why it is ignored (a late, duplicate or foreign 51).

        None: the 51 is kept — the binding is sealed for a relocation and the 51 comes
        from a newer owner of the same incarnation (the move's target replaced the
        binding before its command 44 reached here). It is checked again when the 44
        commit is applied, and dropped by an abort or the seal timeout."""
        previous = record.previous
        owner = self.owner
        if (
            previous.node_rid != owner.node_rid
            or previous.node_generation != owner.node_generation
            or previous.owner_id != owner.owner_id
            or previous.owner_lease_generation != owner.lease_generation
        ):
            return "names another session owner lifecycle"
        entry = self._sessions.get(previous.session_rid)
        if entry is None or entry.status is SessionStatus.CLOSED:
            return "unknown or closed session"
        binding = entry.by_generation.get(previous.retired_binding_generation)
        if binding is None or not binding.current:
            return "not a current binding (late or duplicate)"
        source = record.source
        if (
            binding.route.node_rid != source.node_rid
            or binding.route.node_generation != source.node_generation
        ):
            if _keep_early(
                binding,
                source.actor_id,
                source.object_generation,
                source.authority_owner_generation,
            ):
                state = binding.state
                assert isinstance(state, Sealed)
                state.early.append(record)
                return None
            return "the sender is not the binding's Actor owner"
        self.end(binding, EndReason.REPLACED)
        self.closing(entry)
        return binding

    # --- ending a binding ---------------------------------------------------------------------
    def end(self, binding: Binding, reason: EndReason) -> bool:
        """Remove ``binding`` from its session (False when it was not current)."""
        if not binding.current:
            return False
        self._forget(binding)
        binding.state = Ended(reason)
        return True

    def on_node(self, node_rid: NodeRid) -> list[Binding]:
        """The current bindings whose route names ``node_rid`` (owner-loss checks)."""
        return [b for b in self._by_node.get(node_rid, ()) if b.current]

    def routed_nodes(self) -> list[NodeRid]:
        return list(self._by_node)

    def _forget(self, binding: Binding) -> None:
        entry = binding.entry
        if entry.bindings.get(binding.actor_id) is binding:
            del entry.bindings[binding.actor_id]
        if entry.by_generation.get(binding.generation) is binding:
            del entry.by_generation[binding.generation]
        on_node = self._by_node.get(binding.route.node_rid)
        if on_node is not None:
            on_node.discard(binding)
            if not on_node:
                del self._by_node[binding.route.node_rid]

    # --- relocation seal and route (spec 02 §8; driven by the relocation issue) -------------
    def install_seal(
        self,
        session_rid: bytes,
        binding_generation: int,
        actor_id: ActorId,
        object_generation: ObjectGeneration,
        relocation_id: OperationId,
        deadline: float,
        *,
        sender: Sender | None = None,
    ) -> tuple[SealOutcome, Binding | None]:
        """Command 42: seal that binding for ``relocation_id`` (held messages from now on,
        until 44 or ``deadline``). Sealing again for the same relocation is a no-op; a
        binding that is not current, or sealed by another relocation, is REJECTED."""
        entry = self._sessions.get(session_rid)
        binding = None if entry is None else entry.by_generation.get(binding_generation)
        if (
            binding is None
            or not binding.current
            or binding.actor_id != actor_id
            or binding.object_generation != object_generation
        ):
            return SealOutcome.REJECTED, None
        if sender is not None and not _routes_to(binding.route, sender):
            return SealOutcome.REJECTED, binding  # only the Actor's owner seals its route
        state = binding.state
        if isinstance(state, Sealed):
            if state.relocation_id == relocation_id:
                return SealOutcome.SEALED, binding
            return SealOutcome.REJECTED, binding
        sealed = Sealed(relocation_id, deadline)
        if isinstance(state, Releasing):
            # Held messages of the previous move not submitted yet stay first in line.
            sealed.held, state.held = state.held, []
        binding.state = sealed
        return SealOutcome.SEALED, binding

    def hold(self, binding: Binding, item: object, sequence: int) -> bool:
        """Keep a relay accepted while ``binding`` is sealed or its held messages are
        still being released (True), or False when it is Bound (the caller submits it)."""
        state = binding.state
        if not isinstance(state, Sealed | Releasing):
            return False
        state.held.append(Held(item, sequence))
        return True

    def take_held(self, binding: Binding) -> list[Held]:
        """The next batch of held messages of a releasing binding, in arrival order. An
        empty batch means the queue is drained: the binding is Bound from this step on
        (later relays go straight to the route). Empty as well when the binding is not
        releasing (it ended meanwhile: the caller drops nothing, there is nothing)."""
        state = binding.state
        if not isinstance(state, Releasing):
            return []
        batch = state.held
        if not batch:
            binding.state = BOUND
            return []
        state.held = []
        return batch

    def apply_route(
        self, commit: SessionRouteCommit, *, sender: Sender | None = None
    ) -> tuple[Binding, list[Held]] | None:
        """Command 44 commit: switch the route and the ActorRef location snapshot of the
        sealed binding together, lift the seal and hand back the held messages (the
        caller submits them to the new route before anything accepted later: the binding
        is :class:`Releasing` until :meth:`take_held` drained them). None — a
        ``late_session_route_update`` — when the seal is not that relocation's (late,
        duplicate, or another relocation's update): nothing changes."""
        entry = self._sessions.get(commit.session_rid)
        owner = self.owner
        if (
            entry is None
            or commit.session_owner_rid != owner.node_rid
            or commit.session_owner_generation != owner.node_generation
        ):
            return None
        binding = entry.by_generation.get(commit.binding_generation)
        if (
            binding is None
            or not binding.current
            or binding.actor_id != commit.actor_id
            or binding.object_generation != commit.object_generation
        ):
            return None
        state = binding.state
        if not isinstance(state, Sealed) or state.relocation_id != commit.relocation_id:
            return None
        if sender is not None and sender != (commit.target_rid, commit.target_node_generation):
            return None  # a commit comes from the move's target itself
        old_node = binding.route.node_rid
        binding.route = BindingRoute(
            commit.target_mesh,
            commit.target_rid,
            commit.target_node_generation,
            commit.authority_owner_generation,
            commit.owner_lease_generation,
        )
        binding.ref = ActorRef(
            binding.actor_id, binding.object_generation, commit.target_mesh, commit.target_rid
        )
        on_old = self._by_node.get(old_node)
        if on_old is not None:
            on_old.discard(binding)
            if not on_old:
                del self._by_node[old_node]
        self._by_node.setdefault(commit.target_rid, set()).add(binding)
        binding.state = Releasing(state.relocation_id, state.held, state.timer, state.early)
        return binding, state.held

    def abort_seal(
        self, abort: SessionRouteAbort, *, sender: Sender | None = None
    ) -> tuple[Binding, list[Held]] | None:
        """Command 44 abort: lift only the matching seal; the held messages go back to the
        source route (the caller resubmits them, no reply). None when nothing matches."""
        entry = self._sessions.get(abort.session_rid)
        binding = None if entry is None else entry.by_generation.get(abort.binding_generation)
        if binding is None or not binding.current:
            return None
        state = binding.state
        if not isinstance(state, Sealed) or state.relocation_id != abort.relocation_id:
            return None
        if sender is not None and not _routes_to(binding.route, sender):
            return None  # an abort comes from the source (the route that stays)
        binding.state = Releasing(state.relocation_id, state.held, state.timer, state.early)
        return binding, state.held

    def resolve_parked(
        self, action: SessionRouteCommit | SessionRouteAbort, *, sender: Sender | None = None
    ) -> tuple[Binding, Sealed] | None:
        """A 44 for a sealed binding of a session that closed meanwhile: a commit switches
        its route and ref (an abort keeps them), the seal is lifted (its held messages
        are dropped with the session) and the binding is handed back for its disconnect
        notification. None when no parked seal matches."""
        binding = self._parked.get((action.session_rid, action.binding_generation))
        if binding is None:
            return None
        state = binding.state
        if not isinstance(state, Sealed) or state.relocation_id != action.relocation_id:
            return None
        if isinstance(action, SessionRouteCommit):
            if (
                binding.actor_id != action.actor_id
                or binding.object_generation != action.object_generation
                or (
                    sender is not None
                    and sender != (action.target_rid, action.target_node_generation)
                )
            ):
                return None
            binding.route = BindingRoute(
                action.target_mesh,
                action.target_rid,
                action.target_node_generation,
                action.authority_owner_generation,
                action.owner_lease_generation,
            )
            binding.ref = ActorRef(
                binding.actor_id, binding.object_generation, action.target_mesh, action.target_rid
            )
        elif sender is not None and not _routes_to(binding.route, sender):
            return None
        del self._parked[(action.session_rid, action.binding_generation)]
        binding.state = Ended(EndReason.DISCONNECTED)
        return binding, state

    def drop_parked(self, binding: Binding) -> bool:
        """The seal deadline of a parked binding passed: forget it (True) — its Actor's
        location is unknown here, so no disconnect notification goes anywhere."""
        key = (binding.entry.session_rid, binding.generation)
        if self._parked.get(key) is not binding:
            return False
        del self._parked[key]
        binding.state = Ended(EndReason.SEAL_TIMEOUT)
        return True

    def seal_expired(self, binding: Binding, relocation_id: OperationId) -> bool:
        """The seal deadline of ``relocation_id`` passed before its 44: True when that seal
        is still installed (the caller closes the physical session; the held messages are
        dropped with the binding). Whichever of this and the 44 comes first wins."""
        state = binding.state
        if not isinstance(state, Sealed) or state.relocation_id != relocation_id:
            return False
        self.end(binding, EndReason.SEAL_TIMEOUT)
        return True


def _keep_early(
    binding: Binding,
    actor_id: ActorId,
    object_generation: ObjectGeneration,
    owner_generation: AuthorityOwnerGeneration,
) -> bool:
    """A record of a NEWER owner of the same incarnation for a sealed binding (the move's
    target ran turns before its 44 was handled here): kept until the 44, bounded."""
    state = binding.state
    return (
        isinstance(state, Sealed)
        and binding.actor_id == actor_id
        and binding.object_generation == object_generation
        and owner_generation.value > binding.route.owner_generation.value
        and len(state.early) < MAX_EARLY_PUSHES
    )


def _routes_to(route: BindingRoute, sender: Sender) -> bool:
    return route.node_rid == sender[0] and route.node_generation == sender[1]


_STALE_FENCE = "stale Actor, owner or binding fence"


def _fence_holds(
    binding: Binding,
    actor_id: ActorId,
    object_generation: ObjectGeneration,
    source_rid: NodeRid,
    source_generation: NodeGeneration,
    owner_generation: AuthorityOwnerGeneration,
) -> bool:
    """The record's Actor fence (spec 02 §5) matches the binding and its current route.
    (Each ``is`` first: the same value object needs no attrs ``__eq__`` call.)"""
    route = binding.route
    ref = binding.ref
    return (
        (ref.actor_id is actor_id or ref.actor_id == actor_id)
        and (
            ref.object_generation is object_generation or ref.object_generation == object_generation
        )
        and (route.node_rid is source_rid or route.node_rid == source_rid)
        and (
            route.node_generation is source_generation or route.node_generation == source_generation
        )
        and (
            route.owner_generation is owner_generation or route.owner_generation == owner_generation
        )
    )
