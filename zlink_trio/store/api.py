"""The Location Store contract (DESIGN.md §5).

One protocol, two implementations (``MemoryLocationStore``, ``PostgresLocationStore``) that
pass the same contract suite (``tests/contract/store/``).

Rules every implementation keeps:

* Every authority mutation is a compare-and-swap on the row's ``store_version``. A lost CAS
  returns :class:`Conflict` carrying the current row (``None`` when the row is Missing); it
  never overwrites silently and never raises for the conflict itself.
* ``store_version`` values come from ONE store-wide increasing sequence, so a row deleted
  and re-created always gets a larger version than any version it had before ("a larger
  StoreVersion" invalidates route caches).
* ``ObjectGeneration`` values come from one global sequence and are issued by
  :meth:`LocationStore.reserve`; relocation never changes them. ``AuthorityOwnerGeneration``
  starts at 1 and increments on every owner change of one incarnation.
* Leases expire by *store* time (database time for PostgreSQL), never by a node's clock.
  A mutation that names an owner whose lease is expired or superseded raises
  :class:`~zlink_trio.errors.OwnerLeaseExpired` and changes nothing.
* Node registration creates the descriptors AND their Entry Spot claims in one transaction;
  on any conflict with an active (unexpired) claim nothing changes and
  :class:`~zlink_trio.errors.DescriptorConflict` is raised.
* Capacity: each node has ``capacity``; ``reserve`` adds one *pending*, ``commit_ready``
  moves it to *active*, ``abort_creation`` gives it back, ``release`` frees the active one,
  ``change_owner`` (and ``change_owners``, per row) moves the active unit from the old
  owner node to the new one. Entry Spot claims consume no capacity.
* A mutation interrupted so that its outcome is unknown (connection lost mid-commit)
  raises :class:`~zlink_trio.errors.StoreOutcomeUnknown`; a Trio cancellation propagates
  as ``trio.Cancelled`` and leaves the outcome unknown too: callers re-read.
* ``recovery_epoch`` increases whenever the store recovered from an outage (reconnect,
  failover); route caches compare it and drop every positive entry when it moved.
* Each CAS method accepts the row only in the states it names; a row in another state is
  a :class:`Conflict` carrying the current row, exactly like a version mismatch. The
  precondition (row present, version, state) is checked before any fence or capacity rule
  (``reserve``, which has no expected version, states its own order).
* Entry Spot claims (``ENTRY_SPOT`` rows) change only through ``register_node`` and
  ``remove_node``: every other mutation of such a row raises
  :class:`~zlink_trio.errors.InvalidOperation` (a missing row is still ``Conflict(None)``).
* Values returned are immutable (frozen attrs, tuples); never the store's internal state.
* Malformed input is refused here, the same for every store, before any store access: an
  ``ObjectKey`` id that is not a valid text id (lone surrogate, empty, > 255 UTF-8 bytes)
  is :class:`~zlink_trio.ids.InvalidId`; an ``expected_version``
  (:func:`check_expected_version`) or ``RecoveryPointer.replay_cursor`` that is not an int
  in 0..2**63-1 is a ``ValueError``.

Test hooks (not part of the protocol, used through ``zlink_trio.testing``):
``async _advance_clock_for_tests(seconds)`` moves store time forward by ``seconds`` for
every client of the store (leases, terminal and root retention all follow it).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from typing import Final, Generic, Protocol, TypeVar, runtime_checkable

import attrs

from ..config import ObjectRole
from ..ids import (
    AuthorityOwnerGeneration,
    InvalidId,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    SpotId,
    StableType,
    check_text_id,
)
from .validate import check_attempt_ttl, check_expected_version, check_replay_cursor

__all__ = [
    "ENTRY_SPOT_TYPE",
    "UNCHANGED",
    "Applied",
    "AuthorityRow",
    "AuthorityState",
    "CasResult",
    "Conflict",
    "ContentRef",
    "Endpoint",
    "LocationStore",
    "Namespace",
    "NodeDescriptor",
    "NodeLease",
    "NodeRecord",
    "ObjectKey",
    "ObjectKind",
    "OperationKey",
    "OwnerFence",
    "RecoveryPointer",
    "RelocationMark",
    "Reservation",
    "TerminalRecord",
    "Unchanged",
    "check_expected_version",
]

T = TypeVar("T")

ENTRY_SPOT_TYPE: Final = StableType("zlink.entry-spot")
"""Stable type carried by every Entry Spot claim row (kind ``ENTRY_SPOT``)."""


class Unchanged(enum.Enum):
    """Type of :data:`UNCHANGED`: "leave this field as it is" in a CAS that may set it."""

    UNCHANGED = "unchanged"


UNCHANGED: Final = Unchanged.UNCHANGED


class Namespace(enum.Enum):
    """Actors and Spots are separate global namespaces; Entry/User/Instance Spots share
    the Spot namespace (so a caller id can never take an Entry Spot's id)."""

    ACTOR = "actor"
    SPOT = "spot"


class ObjectKind(enum.Enum):
    ACTOR = "actor"
    ENTRY_SPOT = "entry_spot"
    USER_SPOT = "user_spot"
    INSTANCE_SPOT = "instance_spot"

    @property
    def namespace(self) -> Namespace:
        return Namespace.ACTOR if self is ObjectKind.ACTOR else Namespace.SPOT


class AuthorityState(enum.Enum):
    """Missing is the absence of a row."""

    CREATING = "creating"
    READY = "ready"
    CLOSING = "closing"


def _check_object_id(_inst: object, _attr: object, value: str) -> None:
    if not isinstance(value, str):
        raise InvalidId(f"object id: expected str, got {type(value).__name__}")
    check_text_id(value, "object id")


def _check_replay_cursor(_inst: object, _attr: object, value: int) -> None:
    check_replay_cursor(value)


@attrs.frozen(slots=True, cache_hash=True)
class ObjectKey:
    namespace: Namespace
    object_id: str = attrs.field(validator=_check_object_id)

    @classmethod
    def actor(cls, actor_id: str) -> ObjectKey:
        return cls(Namespace.ACTOR, actor_id)

    @classmethod
    def _trusted(cls, namespace: Namespace, object_id: str) -> ObjectKey:
        """A key of an id validated already (an ``ActorId``/``SpotId``'s value, a stored
        key): built without running the validator again. Never for untrusted input."""
        key = _OBJECT_NEW(cls)
        _KEY_NAMESPACE(key, namespace)
        _KEY_OBJECT_ID(key, object_id)
        _KEY_HASH(key, None)  # what the generated __init__ sets: computed on first use
        return key

    @classmethod
    def spot(cls, spot_id: str) -> ObjectKey:
        return cls(Namespace.SPOT, spot_id)


_OBJECT_NEW: Final = object.__new__
_KEY_NAMESPACE: Final = ObjectKey.__dict__["namespace"].__set__
_KEY_OBJECT_ID: Final = ObjectKey.__dict__["object_id"].__set__
_KEY_HASH: Final = ObjectKey.__dict__["_attrs_cached_hash"].__set__


@attrs.frozen(slots=True)
class OwnerFence:
    """Who owns an authority row: node identity plus the owner-lease lifecycle."""

    mesh_name: MeshName
    node_rid: NodeRid
    node_generation: NodeGeneration
    lease_generation: OwnerLeaseGeneration


@attrs.frozen(slots=True)
class ContentRef:
    """Reference to an immutable Relocation Store root: its SHA-256 and size."""

    sha256: bytes
    size: int

    @classmethod
    def of(cls, data: bytes) -> ContentRef:
        return cls(hashlib.sha256(data).digest(), len(data))

    def matches(self, data: bytes) -> bool:
        return len(data) == self.size and hashlib.sha256(data).digest() == self.sha256


@attrs.frozen(slots=True, cache_hash=True)
class OperationKey:
    """Identity of one durable operation: (source NodeRid, lifecycle generation, OperationId)."""

    source_rid: NodeRid
    source_generation: NodeGeneration
    operation_id: OperationId


@attrs.frozen(slots=True)
class RecoveryPointer:
    """Recovery root of a cold-activated Instance Spot plus its durable inbox replay cursor."""

    root: ContentRef
    replay_cursor: int = attrs.field(validator=_check_replay_cursor)


@attrs.frozen(slots=True)
class RelocationMark:
    """An authority row's relocation in flight (set and cleared by CAS)."""

    relocation_id: OperationId
    target: OwnerFence
    sealed: bool


@attrs.frozen(slots=True)
class AuthorityRow:
    key: ObjectKey
    kind: ObjectKind
    stable_type: StableType
    state: AuthorityState
    store_version: int
    object_generation: ObjectGeneration
    owner_generation: AuthorityOwnerGeneration
    owner: OwnerFence
    membership: SpotId | None = None
    """Current Spot of an Actor (Entry or User Spot); None for Spots."""
    pending_content: ContentRef | None = None
    """Creation request content recorded at reservation; cleared at commit."""
    operation: OperationKey | None = None
    """The durable operation that made the reservation (Creating rows)."""
    recovery: RecoveryPointer | None = None
    relocation: RelocationMark | None = None
    attempt_expires_at: float | None = None
    """Creating rows: store time of the deadline of the attempt that made the
    reservation (the source operation's deadline); None once Ready, or when the
    reservation was made without one. Past it (plus the reclaimer's grace) anyone may
    :meth:`~LocationStore.reclaim` the row, and the operation's terminal record is kept
    exactly until it + the terminal retention (:meth:`LocationStore.commit_ready`)."""


def _check_attempt_ttl(_inst: object, _attr: object, value: float | None) -> None:
    check_attempt_ttl(value)


@attrs.frozen(slots=True)
class Reservation:
    """Input of :meth:`LocationStore.reserve` (Missing -> Creating)."""

    key: ObjectKey
    kind: ObjectKind
    stable_type: StableType
    owner: OwnerFence
    membership: SpotId | None = None
    content: ContentRef | None = None
    operation: OperationKey | None = None
    recovery: RecoveryPointer | None = None
    attempt_ttl: float | None = attrs.field(default=None, validator=_check_attempt_ttl)
    """Seconds from store now to the attempt's deadline (the row records
    ``attempt_expires_at`` = store now + this). Finite and >= 0, or None."""

    def __attrs_post_init__(self) -> None:
        if self.kind.namespace is not self.key.namespace:
            raise ValueError("kind and key namespace disagree")
        if self.kind is ObjectKind.ENTRY_SPOT:
            raise ValueError("Entry Spot claims are made by register_node only")


@attrs.frozen(slots=True)
class Applied(Generic[T]):
    """The CAS won; ``row`` is the row after the mutation (None when it was deleted)."""

    row: T


@attrs.frozen(slots=True)
class Conflict:
    """The CAS lost; ``current`` is the row as it is now (None = Missing)."""

    current: AuthorityRow | None


CasResult = Applied[T] | Conflict


@attrs.frozen(slots=True)
class Endpoint:
    host: str
    port: int


@attrs.frozen(slots=True)
class NodeDescriptor:
    """What a node publishes for one mesh. ``entry_spot_id`` is immutable for the
    descriptor's lifetime (renewals cannot change it)."""

    mesh_name: MeshName
    node_rid: NodeRid
    node_generation: NodeGeneration
    endpoint: Endpoint
    object_role: ObjectRole
    actor_types: frozenset[StableType]
    spot_types: frozenset[StableType]
    instance_types: frozenset[StableType]
    placement_weight: float
    entry_spot_id: SpotId


@attrs.frozen(slots=True)
class NodeLease:
    """Result of registration or renewal."""

    node_rid: NodeRid
    node_generation: NodeGeneration
    lease_generation: OwnerLeaseGeneration
    expires_at: float
    """Store time (seconds) at which the lease expires."""


@attrs.frozen(slots=True)
class NodeRecord:
    """A descriptor as read back, with its node's lease and capacity counters.

    ``active``/``pending`` count the authority rows owned by the node's NodeRid (Entry
    claims excluded): Creating rows are pending, Ready and Closing rows are active. They
    survive re-registration of the same NodeRid and ``remove_node`` as long as the rows do.
    """

    descriptor: NodeDescriptor
    lease_generation: OwnerLeaseGeneration
    lease_expires_at: float
    live: bool
    """Lease unexpired at read time (store clock)."""
    capacity: int
    active: int
    pending: int


@attrs.frozen(slots=True)
class TerminalRecord:
    """A durable operation's terminal, kept until the original deadline + retention.

    ``result`` is opaque to the store (the encoded terminal: state + optional reply).
    """

    key: OperationKey
    result: bytes


@runtime_checkable
class LocationStore(Protocol):
    """The Location Store protocol. All methods are Trio-async and cancellation-safe."""

    @property
    def recovery_epoch(self) -> int:
        """Increases after every recovery from a Store outage."""
        ...

    async def now(self) -> float:
        """Store time in seconds (the clock leases and retention are measured on)."""
        ...

    # ----- authority rows ------------------------------------------------------------
    async def read(self, key: ObjectKey) -> AuthorityRow | None: ...

    async def scan_owned(self, node_rid: NodeRid) -> Sequence[AuthorityRow]:
        """Every authority row owned by ``node_rid``, Entry claims included (startup
        authority scan)."""
        ...

    async def list_rows(
        self, namespace: Namespace, *, after: str | None, limit: int
    ) -> Sequence[AuthorityRow]:
        """One page of rows ordered by object id, strictly after ``after`` when given.

        Order is Unicode code point order (= UTF-8 byte order; PostgreSQL: ``COLLATE "C"``).
        ``limit`` must be in 1..1000, else ValueError. Entry claims are included."""
        ...

    async def reserve(self, reservation: Reservation) -> CasResult[AuthorityRow]:
        """Missing -> Creating. Issues a new ObjectGeneration, AuthorityOwnerGeneration 1,
        takes one pending capacity unit on the owner node.

        Returns Conflict(current) when a row exists. Raises OwnerLeaseExpired when the
        owner's lease is not current, CapacityExceeded when active+pending >= capacity,
        NotFound when the owner's descriptor for that mesh does not register the type (in
        ``actor_types``, ``spot_types`` or ``instance_types`` by kind). The checks run in
        this order: owner lease, existing row, type, capacity.
        """
        ...

    async def commit_ready(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[AuthorityRow]:
        """Creating -> Ready: pending -> active, ``pending_content``, ``operation`` and
        ``attempt_expires_at`` cleared. When ``terminal`` is given it is recorded in the
        same transaction (a live record with that key wins, as in :meth:`record_terminal`),
        kept until the row's ``attempt_expires_at`` + ``retain_for`` — the original
        deadline + retention, however long the attempt took — or, for a row without an
        attempt deadline, until store now + ``retain_for``. The row's owner lease must be
        current (OwnerLeaseExpired, nothing written, terminal included)."""
        ...

    async def abort_creation(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[None]:
        """Creating -> Missing (row deleted), pending unit returned; optional terminal
        recorded in the same transaction (retention as in :meth:`commit_ready`). Needs no
        current lease (cleanup of a dead owner's reservation)."""
        ...

    async def reclaim(
        self, key: ObjectKey, expected_version: int, owner: OwnerFence, *, grace: float
    ) -> CasResult[None]:
        """End an incarnation whose owner can no longer act: Creating, Ready or Closing
        -> Missing (row deleted), its pending or active unit given back.

        One CAS fenced by ``expected_version`` AND ``owner`` (the row's owner NodeRid,
        NodeGeneration and OwnerLeaseGeneration must equal it; the mesh too). It applies
        only when, by store time, the owner's lease is no longer current (expired,
        superseded by a re-registration, or its registration removed) or — Creating rows
        only — store now >= ``attempt_expires_at`` + ``grace``. Otherwise (the owner is
        live, the attempt still running) it is ``Conflict(current)`` and nothing changes,
        exactly like a lost CAS: of N concurrent reclaimers of one row exactly one gets
        ``Applied``. An expired lease is never revived (:meth:`renew_lease`), so a row
        found reclaimable stays so until someone reclaims it. ``grace`` >= 0, else
        ValueError."""
        ...

    async def owner_live(self, owner: OwnerFence) -> bool:
        """Whether ``owner``'s lease is current by store time (same NodeRid, NodeGeneration
        and OwnerLeaseGeneration registered, lease unexpired)."""
        ...

    async def list_reclaimable(self, *, grace: float, limit: int) -> Sequence[AuthorityRow]:
        """Up to ``limit`` (1..1000, else ValueError) rows :meth:`reclaim` would accept
        now (Entry claims excluded), ordered by (namespace, object id): the background
        sweep's work list."""
        ...

    async def change_owner(
        self,
        key: ObjectKey,
        expected_version: int,
        new_owner: OwnerFence,
        *,
        membership: SpotId | Unchanged | None = UNCHANGED,
    ) -> CasResult[AuthorityRow]:
        """Ready row moves to ``new_owner``: AuthorityOwnerGeneration + 1, one active unit
        moves from the old owner node to the new one, relocation mark cleared. The new
        owner's lease must be current (OwnerLeaseExpired). When the new owner is another
        NodeRid whose active+pending >= capacity, raises CapacityExceeded. ``membership``
        (unless :data:`UNCHANGED`) is set in the same CAS: a cross-node Join moves the
        owner and the Actor's Spot at once."""
        ...

    async def change_owners(
        self, changes: Sequence[tuple[ObjectKey, int]], new_owner: OwnerFence
    ) -> CasResult[tuple[AuthorityRow, ...]]:
        """The multi-row aggregate owner change (a SpotWide User Spot and its member
        Actors move in ONE commit, spec 06 §6.1): every ``(key, expected_version)`` row
        moves to ``new_owner`` exactly as :meth:`change_owner` would move it (Ready only,
        AuthorityOwnerGeneration + 1, ObjectGeneration and membership unchanged,
        relocation mark cleared, one active unit per row from its old owner node to the
        new one), all in one transaction.

        Either every row changes and the result is ``Applied(rows)``, the new rows in the
        order given, or nothing changes: ``Conflict(current)`` for the FIRST key (in the
        order given) that is Missing, not at its expected version or not Ready, and
        before any fence or capacity rule (an Entry claim among the keys raises
        InvalidOperation when reached in that order). Then the new owner's lease must be
        current (OwnerLeaseExpired), and the new owner node must have room for every row
        that comes from another NodeRid at once: active+pending + that count > capacity
        raises CapacityExceeded. The rows need not share one owner: the result is that
        of applying :meth:`change_owner` to them in order, atomically.

        ``changes`` empty, or naming one key twice, raises ValueError (before any store
        access, like a bad ``expected_version``)."""
        ...

    async def set_membership(
        self, key: ObjectKey, expected_version: int, membership: SpotId | None
    ) -> CasResult[AuthorityRow]:
        """Field update in any state (Creating, Ready, Closing)."""
        ...

    async def set_recovery(
        self, key: ObjectKey, expected_version: int, recovery: RecoveryPointer | None
    ) -> CasResult[AuthorityRow]:
        """Field update in any state (Creating, Ready, Closing)."""
        ...

    async def set_relocation(
        self, key: ObjectKey, expected_version: int, relocation: RelocationMark | None
    ) -> CasResult[AuthorityRow]:
        """Field update in any state (Creating, Ready, Closing)."""
        ...

    async def begin_closing(self, key: ObjectKey, expected_version: int) -> CasResult[AuthorityRow]:
        """Ready -> Closing (admission is being sealed; the row still names the owner)."""
        ...

    async def release(self, key: ObjectKey, expected_version: int) -> CasResult[None]:
        """Ready or Closing -> Missing (row deleted); the active unit is freed."""
        ...

    # ----- nodes, descriptors, leases ---------------------------------------------------
    async def register_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        descriptors: Sequence[NodeDescriptor],
        *,
        capacity: int,
        lease_ttl: float,
    ) -> NodeLease:
        """One transaction: the node's lease row, every descriptor and every descriptor's
        Entry Spot claim (a Ready ENTRY_SPOT authority row owned by the node). Conflicts
        with ACTIVE claims raise DescriptorConflict and change nothing; expired claims are
        replaced.

        Details every implementation keeps:

        * A new OwnerLeaseGeneration is issued on every registration (one store-wide
          sequence), so re-registering supersedes the previous lease.
        * The Entry claim row: key ``ObjectKey.spot(entry_spot_id)``, kind ENTRY_SPOT,
          stable type :data:`ENTRY_SPOT_TYPE`, Ready, a new ObjectGeneration, owner
          generation 1, owner ``OwnerFence(descriptor.mesh_name, node_rid, node_generation,
          new lease generation)``.
        * Active claims (-> DescriptorConflict, nothing changed): the NodeRid's previous
          registration while its lease is unexpired; an Entry id that is the key of any
          User/Instance Spot row (whatever its state or owner) or of an Entry claim whose
          owning registration is still current and unexpired; two descriptors of the
          batch with the same mesh or the same Entry id.
        * Expired claims are replaced in the same transaction: the NodeRid's expired
          registration (its descriptors and their Entry claims) and any expired Entry claim
          row holding one of the new Entry ids (with the stale descriptor that published it).
        * A descriptor whose node_rid/node_generation differ from the arguments, a negative
          ``capacity`` or a non-positive ``lease_ttl`` raise ValueError (nothing changed).
        """
        ...

    async def renew_lease(
        self, node_rid: NodeRid, lease_generation: OwnerLeaseGeneration, lease_ttl: float
    ) -> NodeLease:
        """Extend the lease to store now + ``lease_ttl``. Raises OwnerLeaseExpired when it
        already expired or was superseded (an expired owner must re-register, it is never
        revived); ValueError for a non-positive ``lease_ttl``."""
        ...

    async def remove_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        lease_generation: OwnerLeaseGeneration,
    ) -> bool:
        """Remove the node's lease row, descriptors and Entry claims only if the stored
        lifecycle and lease generation match (expired or not); False (and nothing removed)
        otherwise. An Entry claim already replaced by another registration is left alone.
        Authority rows the node owns (Actors, Spots) are not touched."""
        ...

    async def list_nodes(self, mesh_name: MeshName | None = None) -> Sequence[NodeRecord]:
        """Descriptors (live and expired) with lease state and capacity counters, ordered by
        (mesh_name, node_rid)."""
        ...

    # ----- durable operation terminals ------------------------------------------------------
    async def record_terminal(self, record: TerminalRecord, *, retain_for: float) -> TerminalRecord:
        """Insert unless a live record with that key exists; returns the stored record
        (first writer wins). The record lives while store time < now + ``retain_for``
        (``retain_for`` >= 0, else ValueError)."""
        ...

    async def read_terminal(self, key: OperationKey) -> TerminalRecord | None:
        """The live record, or None once its retention has passed."""
        ...

    # ----- Relocation Store (immutable roots) -------------------------------------------------
    async def put_root(self, data: bytes, *, retain_for: float | None = None) -> ContentRef:
        """Store immutable bytes under their SHA-256 (idempotent). ``retain_for`` (store
        seconds) lets the root expire by itself; None keeps it until ``delete_root``. A
        second put of the same bytes keeps the longer of the two retentions (None is the
        longest). A negative ``retain_for`` raises ValueError."""
        ...

    async def read_root(self, ref: ContentRef) -> bytes | None:
        """The bytes if present AND matching ref's hash and size, else None."""
        ...

    async def delete_root(self, ref: ContentRef) -> bool:
        """Idempotent delete; True when something was removed."""
        ...
