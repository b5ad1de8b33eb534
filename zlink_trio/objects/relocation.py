"""What a relocation tells the parts of a node that move with an object: the unit values
and the participant protocol (docs/relocation.md, "Participants").

A participant is framework state kept per hosted Actor outside the Actor itself — the
Actor owner's side of its session bindings (spec 02 §8: commands 42/43/44) is the one
participant today. The relocation calls every registered participant at fixed points of
the seal · restore · commit order; each call runs in the relocation's own task (never in
an Actor turn), bounded by the relocation's scope (a cancelled call is an abort before
relay-ready acceptance, or ignored after it).

Order (source S, target T; docs/relocation.md has the diagram)::

    S  seal turn (the running handler finished; ingress held in the Actor owner)
    S  participant.seal(unit) -> bytes        refuse: raise ZLinkError -> abort
    S  120 prepare, 121 restore ─────────────▶ T  participant.restore(unit, state)
                                               T  (raise ZLinkError -> REJECTED -> abort)
    S  ◀──────────── 122 relay-ready ACCEPTED
    S  participant.departed(unit)             the unit belongs to T from here on
       ... relay, 123 cutover ...
                                               T  owner CAS, queue merge, route switch,
                                               T  lifecycle callbacks, dispatch opened
                                               T  participant.committed(unit, generation)
    abort before acceptance (explicit failure, REJECTED, timeout, T unreachable):
    S  durable abort (Store mark cleared), source queue restored
    S  participant.aborted(unit)
                                               T  participant.discarded(unit) (if restored)

Every call is made at most once per (unit, participant) — a duplicated 121 restores once
(the relocation is idempotent per RelocationId, target attempt and owner generation).
``aborted`` is called only for a unit whose ``seal`` returned; ``discarded`` only for one
whose ``restore`` returned. ``committed``, ``aborted``, ``departed`` and ``discarded``
must not raise (an exception is logged and changes nothing): the outcome is decided.
"""

from __future__ import annotations

import enum
import logging
from typing import Protocol

import attrs
import trio

from ..errors import InvalidOperation, Unavailable, ZLinkError, error_from_kind
from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    StableType,
)
from ..store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    LocationStore,
    ObjectKey,
    RelocationMark,
)
from ..wire.enums import RelayReadyResult
from ..wire.records import TerminalReply
from ..wire.relocation import RelocationRelayReady
from .policy import DisableRelocation
from .sinks import raise_for_failure

__all__ = [
    "ActorRelocationParticipant",
    "MarkClear",
    "RelocationUnit",
    "clear_mark",
    "clear_mark_once",
    "hold_until_cleared",
    "live_target",
    "refuse_unless_relocatable",
    "relay_ready",
    "relay_ready_error",
    "release_unconfirmed",
    "set_mark",
    "wait_committed_in_store",
]

logger = logging.getLogger("zlink_trio.relocation")


@attrs.frozen(slots=True)
class RelocationUnit:
    """One Actor's move: who, which incarnation, from which owner to which node."""

    relocation_id: OperationId
    actor_id: ActorId
    object_generation: ObjectGeneration
    """Unchanged by the move (spec 04 §6.1)."""
    mesh_name: MeshName
    source_rid: NodeRid
    source_generation: NodeGeneration
    source_owner_generation: AuthorityOwnerGeneration
    """The AuthorityOwnerGeneration of the source owner (the target's CAS fence); the
    target's is ``source_owner_generation + 1`` once committed."""
    target_rid: NodeRid
    target_generation: NodeGeneration

    @property
    def target_owner_generation(self) -> AuthorityOwnerGeneration:
        return AuthorityOwnerGeneration(self.source_owner_generation.value + 1)


class ActorRelocationParticipant(Protocol):
    """Framework state that moves with an Actor (register it with
    ``ActorRuntime.relocation_participants``; see the module docstring for the order)."""

    @property
    def participant_name(self) -> str:
        """Unique per node: the key of this participant's state in the moved envelope."""
        ...

    async def seal(self, unit: RelocationUnit) -> bytes:
        """Source, after the Actor's seal turn, before 120: seal this participant's part
        (e.g. command 42 to each bound session's owner, awaiting 43) and return its state
        to carry to the target (b"" for none).

        Raises:
            ZLinkError: refuse the move (the relocation aborts; the source stays owner).
        """
        ...

    async def restore(self, unit: RelocationUnit, state: bytes) -> None:
        """Target, inside Restore, before the relay-ready reply: install ``state`` (what
        ``seal`` returned at the source) for the hidden new activation.

        Raises:
            ZLinkError: Restore fails explicitly (REJECTED; the relocation aborts).
        """
        ...

    async def departed(self, unit: RelocationUnit) -> None:
        """Source, right after the relay-ready reply was accepted: the unit never comes
        back to this owner; forget its state here."""
        ...

    async def committed(self, unit: RelocationUnit) -> None:
        """Target, after the owner CAS (AuthorityOwnerGeneration =
        ``unit.target_owner_generation``), the queue merge, the regular-route switch, the
        lifecycle callbacks and the dispatch opening (e.g. command 44 commit)."""
        ...

    async def aborted(self, unit: RelocationUnit) -> None:
        """Source, after the durable abort and the source-queue restore of a move that
        failed before relay-ready acceptance (e.g. command 44 abort)."""
        ...

    async def discarded(self, unit: RelocationUnit) -> None:
        """Target: the temporary queue and the hidden activation of ``unit`` were
        discarded (abort before acceptance, or the cleanup timeout); drop what
        ``restore`` installed."""
        ...


def refuse_unless_relocatable(
    policy: object, what: str, stable_type: StableType, *, to: NodeRid, me: NodeRid
) -> None:
    """The checks every relocation (an Actor's, a Spot's) makes before anything moves:
    its type's policy allows a move (spec 04 §6.1, spec 06 §8) and the target is another
    node.

    Raises:
        InvalidOperation: the type is DisableRelocation, or ``to`` is this node.
    """
    if isinstance(policy, DisableRelocation):
        raise InvalidOperation(f"{what} type {stable_type.value!r} is DisableRelocation")
    if to == me:
        raise InvalidOperation("the relocation target is this node")


async def release_unconfirmed(
    store: LocationStore,
    key: ObjectKey,
    *,
    object_generation: ObjectGeneration,
    source_rid: NodeRid,
    source_generation: NodeGeneration,
    source_owner_generation: AuthorityOwnerGeneration,
    what: str,
    waited: float,
) -> None:
    """No commit reported within ``relocation_timeout`` after acceptance: if the row
    still names the source lifecycle (the target never committed: it died, or its CAS
    failed), the incarnation ends by one fenced release (the id is not wedged on an owner
    that no longer hosts it; the move never goes back). If the target committed meanwhile
    (its 125 was lost) the row names it and nothing changes; a target committing after
    this release loses its CAS and discards."""
    try:
        row = await store.read(key)
        if (
            row is None
            or row.object_generation != object_generation
            or row.owner.node_rid != source_rid
            or row.owner.node_generation != source_generation
            or row.owner_generation != source_owner_generation
        ):
            return
        result = await store.release(key, row.store_version)
        logger.warning(
            "relocation of %s: the target did not commit within %.1f s; released (%r)",
            what,
            waited,
            result,
        )
    except ZLinkError as exc:
        logger.info("cleanup of the unconfirmed move of %s: %r", what, exc)


async def set_mark(
    store: LocationStore,
    row: AuthorityRow,
    mark: RelocationMark,
    *,
    source_owner_generation: AuthorityOwnerGeneration,
) -> AuthorityRow:
    """The source's relocation mark on ``row`` (one CAS, right after the seal turn): the
    target commits only while the row carries the mark of its RelocationId
    (:func:`clear_mark` takes it away when the source gives up). Returns the marked row.

    Raises:
        Unavailable: the row changed since ``row`` was read, or it is not Ready at
            ``source_owner_generation`` any more (the move does not start).
    """
    result = await store.set_relocation(row.key, row.store_version, mark)
    if (
        not isinstance(result, Applied)
        or result.row.owner_generation != source_owner_generation
        or result.row.state is not AuthorityState.READY
    ):
        raise Unavailable("the authority changed before the move")
    return result.row


class MarkClear(enum.Enum):
    """One try at clearing a move's relocation mark (:func:`clear_mark_once`)."""

    CLEARED = "cleared"
    """The mark is gone (cleared now, already, or never set): the source may reopen."""
    TAKEN = "taken"
    """The row names the target: its commit won; never back to the source."""
    UNKNOWN = "unknown"
    """A Store error or a lost CAS: the target may still commit under the mark."""


async def clear_mark_once(
    store: LocationStore,
    key: ObjectKey,
    *,
    relocation_id: OperationId,
    target_rid: NodeRid,
    target_owner_generation: AuthorityOwnerGeneration,
    what: str,
) -> MarkClear:
    """One read and (if the row carries the mark of ``relocation_id``) one clearing CAS
    (see :func:`clear_mark`)."""
    try:
        current = await store.read(key)
        if current is not None and (
            current.owner.node_rid == target_rid
            and current.owner_generation == target_owner_generation
        ):
            logger.warning(
                "relocation of %s: the target committed before the abort; it is the target's",
                what,
            )
            return MarkClear.TAKEN
        if (
            current is None
            or current.relocation is None
            or current.relocation.relocation_id != relocation_id
        ):
            return MarkClear.CLEARED
        cleared = await store.set_relocation(current.key, current.store_version, None)
        if isinstance(cleared, Applied):
            return MarkClear.CLEARED
    except ZLinkError as exc:
        logger.info("clearing the relocation mark of %s: %r", what, exc)
    return MarkClear.UNKNOWN


async def clear_mark(
    store: LocationStore,
    key: ObjectKey,
    *,
    relocation_id: OperationId,
    target_rid: NodeRid,
    target_owner_generation: AuthorityOwnerGeneration,
    what: str,
    tries: int = 4,
) -> MarkClear:
    """The durable abort of a move that failed before its relay-ready reply was accepted:
    the mark of ``relocation_id`` is cleared by CAS, before the source reopens (so a late
    ACCEPTED can no longer let the target commit: its owner CAS needs that mark).

    TAKEN, clearing nothing, when the target's commit won the race (the row already
    names the target at ``target_owner_generation``): the object is the target's and the
    caller goes on as after an acceptance (never back to the source). A row without this
    mark (cleared already, or never marked) is left alone: CLEARED. A lost CAS or a Store
    error is retried (``tries`` in all), then UNKNOWN (logged): the target may still
    commit under the mark, the caller decides (:func:`hold_until_cleared`)."""
    for _ in range(tries):
        outcome = await clear_mark_once(
            store,
            key,
            relocation_id=relocation_id,
            target_rid=target_rid,
            target_owner_generation=target_owner_generation,
            what=what,
        )
        if outcome is not MarkClear.UNKNOWN:
            return outcome
    logger.warning("relocation of %s: its relocation mark could not be cleared", what)
    return MarkClear.UNKNOWN


async def hold_until_cleared(
    store: LocationStore,
    key: ObjectKey,
    *,
    relocation_id: OperationId,
    target_rid: NodeRid,
    target_owner_generation: AuthorityOwnerGeneration,
    committed: trio.Event,
    until: float,
    what: str,
) -> bool:
    """A source that could not clear its mark keeps the object sealed and retries the
    clear (backing off 50 ms doubling to 1 s) until it is cleared (False: reopen), the
    row names the target or the target's commit notice (125) sets ``committed`` (True:
    go on as accepted), or the Trio time ``until`` passed — past it the target's attempt
    can no longer commit (False: reopen; the stale mark stays, the next move replaces
    it)."""
    delay = 0.05
    while True:
        if committed.is_set():
            return True
        outcome = await clear_mark_once(
            store,
            key,
            relocation_id=relocation_id,
            target_rid=target_rid,
            target_owner_generation=target_owner_generation,
            what=what,
        )
        if outcome is not MarkClear.UNKNOWN:
            return outcome is MarkClear.TAKEN
        left = until - trio.current_time()
        if left <= 0:
            logger.warning(
                "relocation of %s: its mark could not be cleared; the target's attempt has "
                "ended, reopening under the stale mark",
                what,
            )
            return committed.is_set()
        with trio.move_on_after(min(delay, left)):
            await committed.wait()
        delay = min(delay * 2, 1.0)


async def live_target(
    store: LocationStore, mesh: MeshName, to: NodeRid, what: str
) -> tuple[NodeGeneration, OwnerLeaseGeneration]:
    """The NodeGeneration and lease generation of the live node ``to`` of ``mesh`` (one
    read of the Store's node list), the lifecycle a move names as its target.

    Raises:
        Unavailable: ``to`` is not a live node of ``mesh`` (``what``: "Actor", "Spot").
    """
    for record in await store.list_nodes(mesh):
        descriptor = record.descriptor
        if descriptor.node_rid == to and record.live:
            return descriptor.node_generation, record.lease_generation
    raise Unavailable(f"node {to.hex[:12]} is not a live node of the {what}'s mesh")


def relay_ready(relocation_id: OperationId, error: ZLinkError | None) -> RelocationRelayReady:
    """The target's relay-ready reply (122) to a Restore: ACCEPTED, or REJECTED with the
    kind of ``error`` (its correlation is set when it is sent)."""
    if error is None:
        return RelocationRelayReady(
            correlation=0, relocation_id=relocation_id, result=RelayReadyResult.ACCEPTED
        )
    return RelocationRelayReady(
        correlation=0,
        relocation_id=relocation_id,
        result=RelayReadyResult.REJECTED,
        failure_code=error.kind,
    )


def relay_ready_error(reply: object) -> ZLinkError | None:
    """The source's reading of the answer to its 121: None for a relay-ready ACCEPTED,
    else the error the move aborts with (a REJECTED's kind, a failed terminal, or
    Unavailable for anything else)."""
    if isinstance(reply, RelocationRelayReady):
        if reply.result is RelayReadyResult.ACCEPTED:
            return None
        assert reply.failure_code is not None
        return error_from_kind(reply.failure_code, "the target rejected the restore")
    if isinstance(reply, TerminalReply):
        try:
            raise_for_failure(reply)
        except ZLinkError as exc:
            return exc
    return Unavailable("the target answered 121 without a relay-ready reply")


async def wait_committed_in_store(
    store: LocationStore,
    key: ObjectKey,
    *,
    target_rid: NodeRid,
    target_owner_generation: AuthorityOwnerGeneration,
    committed: trio.Event,
    what: str,
) -> None:
    """Read the moved row until it names the target at ``target_owner_generation`` (then
    set ``committed``), backing off (10 ms doubling to 200 ms): a closing source drops
    inbound commands, the commit notice (125) too. The caller bounds the wait."""
    delay = 0.01
    while not committed.is_set():
        try:
            row = await store.read(key)
        except ZLinkError as exc:
            logger.info("reading the moved row of %s: %r", what, exc)
            row = None
        if (
            row is not None
            and row.owner.node_rid == target_rid
            and row.owner_generation == target_owner_generation
        ):
            committed.set()
            return
        await trio.sleep(delay)
        delay = min(delay * 2, 0.2)
