"""``server.relocate`` of a Spot: the source side and its coordinator (spec 06 §6, §6.1,
§8; docs/relocation.md, "Spots").

The checks every relocation shares run first (Ready here, a type that may move, another
node). Then, in one child nursery of its own:

* the seal turn, a lifecycle turn of the Spot's lane (its running handler has finished):
  the lane is sealed, the application work it had accepted and not run is the saved work,
  and from now on application ingress is HELD in :class:`~.host.SpotHost` (never run here,
  never refused); the Store row gets the relocation mark (a Close now ends Unavailable);
* the capture: PreserveStateWith's adapter (in a lifecycle turn) or nothing
  (RecreateOnRelocation), the framework timers (registrations and pending ticks) and the
  current members, in one :class:`~zlink_trio.objects.relocation_envelope.RelocationEnvelope`
  in the Relocation Store;
* 120 prepare, 121 restore and its relay-ready reply (122). Before the reply is accepted
  every failure aborts: the mark is cleared, the saved work and the held ingress go back
  into the lane in arrival order, the target is told (124);
* accepted, never back: the saved work and the held ingress are relayed to the target as
  command 39 (each request's reply relayed back to its caller), the activation unpublished
  and the Message Follow route installed in the same synchronous step (so nothing that
  follows can overtake the relay on the link), then the one-way cutover (123); the call
  returns once the target reports its commit (125), or ``relocation_timeout`` later.

The target side is :mod:`.relocation_target`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, final

import attrs
import trio

from .._exceptions import raise_single_error
from ..config import ServerConfig
from ..errors import (
    ApplicationError,
    DeadlineExceeded,
    InvalidOperation,
    NotConfigured,
    NotFound,
    Unavailable,
    ZLinkError,
)
from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    SpotId,
)
from ..mesh.api import LinkLost, MeshNodeApi, PeerAddress, PeerGone, PeerNotAdmitted
from ..objects.activity import Activity
from ..objects.durable import remaining_ms
from ..objects.follow import FollowTable
from ..objects.policy import DisableRelocation, PreserveStateWith
from ..objects.relay import fail_terminal, relay_reply_to
from ..objects.relocation import (
    MarkClear,
    clear_mark,
    live_target,
    refuse_unless_relocatable,
    relay_ready_error,
    release_unconfirmed,
    set_mark,
    wait_committed_in_store,
)
from ..objects.relocation_envelope import RelocationEnvelope
from ..objects.sinks import raise_for_failure
from ..objects.timers import TimerTick
from ..store.api import (
    AuthorityRow,
    AuthorityState,
    LocationStore,
    OwnerFence,
    RelocationMark,
)
from ..wire.codec import encode_value
from ..wire.enums import MessageKind, ObjectKind, RelocationPolicy
from ..wire.payloads import TypedPayload
from ..wire.records import SpotDirectRoute, TerminalReply
from ..wire.relocation import (
    RelocationAbort,
    RelocationCommitted,
    RelocationCutover,
    RelocationPrepare,
    RelocationRestore,
)
from ..wire.tails import ReadyFence
from .dispatch import SpotMessage
from .host import SpotHost
from .hosted import SPOT_READY, HostedSpot, SpotItem
from .kind import spot_key
from .spot_kind import SpotKind
from .wide_move import WIDE_PARTICIPANT, SpotWideMemberMoves, SpotWideMembers

__all__ = ["MEMBERS_PARTICIPANT", "SpotRelocationResult", "SpotRelocator"]

logger = logging.getLogger("zlink_trio.relocation")

MEMBERS_PARTICIPANT = "zlink_trio.spot.members"
"""The envelope entry carrying a User Spot's current members (a CBOR list of ids)."""


@attrs.frozen
class SpotRelocationResult:
    """A Spot relocation whose relay-ready reply was accepted: the Spot belongs to the
    target from now on (its owner CAS makes it AuthorityOwnerGeneration
    ``owner_generation``; the ObjectGeneration is unchanged)."""

    relocation_id: OperationId
    spot_id: SpotId
    object_generation: ObjectGeneration
    source_rid: NodeRid
    target_rid: NodeRid
    owner_generation: AuthorityOwnerGeneration
    relayed: int
    """Messages relayed to the target (saved work and held ingress)."""
    committed: bool
    """The target reported its commit (125) within ``relocation_timeout``; False: it did
    not (it may still have committed, or died: the Store row tells). For a SpotWide
    Spot with members: the Spot's and every member's."""
    members: tuple[ActorId, ...] = ()
    """The member Actors that moved with a SpotWide Spot (the same aggregate commit)."""


@attrs.frozen(slots=True)
class _Move:
    relocation_id: OperationId
    spot_id: SpotId
    object_generation: ObjectGeneration
    mesh_name: MeshName
    source_rid: NodeRid
    source_generation: NodeGeneration
    source_owner_generation: AuthorityOwnerGeneration
    target_rid: NodeRid
    target_generation: NodeGeneration
    target_lease: OwnerLeaseGeneration

    @property
    def target_owner_generation(self) -> AuthorityOwnerGeneration:
        return AuthorityOwnerGeneration(self.source_owner_generation.value + 1)


class _Abort(Exception):
    def __init__(self, error: ZLinkError) -> None:
        super().__init__(error)
        self.error = error


@final
class SpotRelocator:
    """This node's relocation coordinator for its User and Instance Spots."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: SpotHost,
        follow: FollowTable[SpotId],
        nursery: trio.Nursery,
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._follow = follow
        self._nursery = nursery
        self.in_flight: dict[SpotId, OperationId] = {}
        self._moves = Activity()
        """The moves in flight from here (a clean stop lets them end before its own)."""
        self._commits: dict[OperationId, trio.Event] = {}
        self.moved_out = 0
        self.aborted = 0
        self.members: SpotWideMembers | None = None
        """The Actor runtime's side of a SpotWide Spot's move (None: refused)."""

    def awaits_commit(self, relocation_id: OperationId) -> bool:
        return relocation_id in self._commits

    async def on_committed(self, peer: object, record: RelocationCommitted) -> None:
        event = self._commits.get(record.relocation_id)
        if event is not None:
            event.set()

    async def relocate(
        self,
        spot_id: SpotId,
        to: NodeRid,
        *,
        draining: bool = False,
        generation: ObjectGeneration | None = None,
    ) -> SpotRelocationResult:
        """Move the Spot ``spot_id`` hosted here to node ``to`` (see the module docstring).

        Raises:
            NotFound: the Spot is not hosted (Ready) on this node.
            InvalidOperation: its type is DisableRelocation, ``to`` is this node, or
                ``generation`` (a SpotRef's) is not the hosted incarnation's.
            NotConfigured: a SpotWide User Spot with members on a node without Actor
                dispatch (its members move with it, in one aggregate commit).
            Unavailable: it is moving or closing already, or the target refused or could
                not be reached before relay-ready (the Spot stays here, in order).
        """
        refused = self._node.admission_error()
        if refused is not None and not draining:
            raise refused
        hosted = self._host.ready(spot_id)
        if hosted is None:
            raise NotFound(f"spot {spot_id.value!r} is not hosted (Ready) on this node")
        if generation is not None and generation != hosted.generation:
            raise InvalidOperation(
                f"the SpotRef names another incarnation of spot {spot_id.value!r} than the "
                "one hosted here"
            )
        spot_type = hosted.spot_type
        me = self._node.identity
        refuse_unless_relocatable(
            spot_type.relocation, "spot", spot_type.stable_type, to=to, me=me.node_rid
        )
        if spot_id in self.in_flight or hosted.close_requested:
            raise Unavailable(f"spot {spot_id.value!r} is already moving or closing")
        wide = hosted.spot_wide and hosted.has_members
        if wide and self.members is None:
            raise NotConfigured(
                f"spot {spot_id.value!r} is a SpotWide User Spot with members: they move with "
                "it in one aggregate commit, and this node runs no Actor dispatch"
            )
        mesh = hosted.context.mesh_name
        target_generation, lease = await live_target(self._store, mesh, to, "Spot")
        row = await self._store.read(spot_key(spot_id))
        _check_row(hosted, row, me.node_rid, me.node_generation)
        assert row is not None
        if spot_id in self.in_flight or self._host.ready(spot_id) is not hosted:
            raise Unavailable(f"spot {spot_id.value!r} is already moving or closing")
        move = _Move(
            relocation_id=OperationId.new(),
            spot_id=spot_id,
            object_generation=hosted.generation,
            mesh_name=mesh,
            source_rid=me.node_rid,
            source_generation=me.node_generation,
            source_owner_generation=row.owner_generation,
            target_rid=to,
            target_generation=target_generation,
            target_lease=lease,
        )
        plan: SpotWideMemberMoves | None = None
        if wide:
            assert self.members is not None
            # Every member reserved before anything is sealed (a refusal leaves all here).
            plan = self.members.plan(
                sorted(hosted.members, key=lambda actor: actor.value), to, target_generation, lease
            )
        self.in_flight[spot_id] = move.relocation_id
        self._commits[move.relocation_id] = trio.Event()
        self._moves.begin()
        try:
            result: list[SpotRelocationResult] = []
            try:
                async with trio.open_nursery() as nursery:  # this relocation's own nursery
                    result.append(await self._run(hosted, move, row, nursery, draining, plan))
            except BaseExceptionGroup as group:
                raise_single_error(group)
            return result[0]
        finally:
            self.in_flight.pop(spot_id, None)
            self._commits.pop(move.relocation_id, None)
            self._moves.end()

    async def relocate_out(self) -> int:
        """Drain by relocation (a clean stop, after the settle): every Ready Spot hosted
        here whose type may relocate moves to a live peer of its mesh that registers its
        type (spread round-robin, 16 at a time) — a SpotWide User Spot with its members
        (a peer that lacks a member's type refuses the move); what cannot move
        (DisableRelocation, no such peer, a failed move) stays for the release step.
        Returns the number moved."""
        # A move started before the stop ends first (its row is marked: released under
        # it, the target's commit would lose its fence and the held work with it).
        await self._moves.wait_idle()
        me = self._node.identity.node_rid
        plans: list[tuple[SpotId, NodeRid]] = []
        peers: dict[tuple[MeshName, object], list[NodeRid]] = {}
        turn: dict[tuple[MeshName, object], int] = {}
        for hosted in self._host:
            spot_type = hosted.spot_type
            if (
                hosted.state is not SPOT_READY
                or isinstance(spot_type.relocation, DisableRelocation)
                or (hosted.spot_wide and hosted.has_members and self.members is None)
            ):
                continue
            mesh = hosted.context.mesh_name
            key = (mesh, spot_type.stable_type)
            if key not in peers:
                try:
                    records = await self._store.list_nodes(mesh)
                except ZLinkError as exc:
                    logger.info("drain by relocation: no node list: %r", exc)
                    return 0
                peers[key] = [
                    r.descriptor.node_rid
                    for r in records
                    if r.live
                    and r.descriptor.node_rid != me
                    and spot_type.stable_type
                    in (
                        r.descriptor.instance_types
                        if hosted.kind is SpotKind.INSTANCE
                        else r.descriptor.spot_types
                    )
                ]
            candidates = peers[key]
            if not candidates:
                continue
            index = turn.get(key, 0)
            turn[key] = index + 1
            plans.append((hosted.spot_id, candidates[index % len(candidates)]))
        moved = 0
        limiter = trio.CapacityLimiter(16)

        async def move(spot_id: SpotId, to: NodeRid) -> None:
            nonlocal moved
            async with limiter:
                try:
                    await self.relocate(spot_id, to, draining=True)
                    moved += 1
                except ZLinkError as exc:
                    logger.info("drain by relocation: spot %r stays: %r", spot_id.value, exc)

        async with trio.open_nursery() as nursery:
            for spot_id, to in plans:
                nursery.start_soon(move, spot_id, to)
        return moved

    # --- the move ------------------------------------------------------------------------
    async def _run(
        self,
        hosted: HostedSpot,
        move: _Move,
        row: AuthorityRow,
        nursery: trio.Nursery,
        draining: bool,
        plan: SpotWideMemberMoves | None = None,
    ) -> SpotRelocationResult:
        """The move; with ``plan`` (a SpotWide Spot with members): the Spot's 120, then
        every member to relay-ready, then the Spot's 121 (the aggregate's relay-ready)."""
        peer = PeerAddress(move.mesh_name, move.target_rid)
        timeout = self._config.relocation_timeout
        deadline = trio.current_time() + timeout
        accepted = False
        saved: list[SpotItem] | None = None
        marked: list[AuthorityRow] = []
        try:
            with trio.move_on_at(deadline) as scope:
                saved = await self._seal(hosted, move, plan)
                marked.append(await self._mark(move, row))
                envelope = await self._capture(hosted, saved, plan)
                ref = await self._store.put_root(envelope.encode(), retain_for=timeout * 2)
                await self._prepare(peer, hosted, move, deadline)
                if plan is not None:
                    try:
                        await plan.reach_relay_ready(deadline)
                    except ZLinkError as exc:
                        raise _Abort(exc) from None
                accepted = await self._restore(peer, move, ref.sha256, ref.size, deadline)
            if scope.cancelled_caught and not accepted:
                raise _Abort(DeadlineExceeded("the relocation did not reach relay-ready in time"))
        except _Abort as abort:
            if await self._abort(hosted, move, saved, marked, abort.error, plan):
                assert saved is not None
                return await self._go_on(hosted, move, peer, saved, nursery, draining, plan)
            raise abort.error from None
        except ZLinkError as exc:
            if accepted:
                raise
            if await self._abort(hosted, move, saved, marked, exc, plan):
                assert saved is not None
                return await self._go_on(hosted, move, peer, saved, nursery, draining, plan)
            raise
        except BaseException:
            if not accepted:
                with trio.CancelScope(shield=True):
                    taken = await self._abort(
                        hosted,
                        move,
                        saved,
                        marked,
                        Unavailable("the relocation was cancelled"),
                        plan,
                    )
                    if taken and saved is not None:
                        await self._go_on(hosted, move, peer, saved, nursery, draining, plan)
            raise
        assert saved is not None
        return await self._go_on(hosted, move, peer, saved, nursery, draining, plan)

    async def _go_on(
        self,
        hosted: HostedSpot,
        move: _Move,
        peer: PeerAddress,
        saved: list[SpotItem],
        nursery: trio.Nursery,
        draining: bool,
        plan: SpotWideMemberMoves | None,
    ) -> SpotRelocationResult:
        """After relay-ready acceptance (or an abort that lost to the target's commit):
        never back. The Spot's and every member's relay and cutover, side by side (the
        target commits them together once all cutovers arrived)."""
        if plan is None:
            return await self._after_accepted(hosted, move, peer, saved, nursery, draining)
        members_committed: list[bool] = []
        done = trio.Event()

        async def members() -> None:
            with trio.CancelScope(shield=True):
                try:
                    members_committed.append(await plan.complete(draining=draining))
                finally:
                    done.set()

        nursery.start_soon(members)
        result = await self._after_accepted(hosted, move, peer, saved, nursery, draining)
        with trio.CancelScope(shield=True):
            await done.wait()  # (the members' task ends within relocation_timeout)
        return attrs.evolve(
            result,
            committed=result.committed and all(members_committed),
            members=tuple(actor for actor, _ in plan.units),
        )

    async def _seal(
        self, hosted: HostedSpot, move: _Move, plan: SpotWideMemberMoves | None
    ) -> list[SpotItem]:
        """The seal turn (a lifecycle turn of the Spot's lane); the saved work."""
        host = self._host
        waiting = [True]  # False once this move stopped waiting for its seal turn
        sealed: list[list[SpotItem]] = []

        async def seal(_: Any) -> list[SpotItem] | None:
            if not waiting[0]:
                # This move gave up (its deadline) while its seal turn waited behind a
                # running handler: the stale turn seals nothing (it would hold the Spot's
                # ingress forever, with no move to relay or reopen it).
                return None
            saved = host.seal_relocation(hosted, move.relocation_id)
            if saved is None:
                return None
            sealed.append(saved)
            planned = frozenset(() if plan is None else (actor for actor, _ in plan.units))
            if hosted.spot_wide and frozenset(hosted.members) != planned:
                # A Join (or leave) that was ahead of this turn completed: the members
                # this move planned are not the Spot's members any more, and a SpotWide
                # Spot moves only with all of them (spec 06 §6.1); it reopens, in order.
                host.unseal_relocation(hosted, move.relocation_id, saved)
                raise Unavailable(
                    f"spot {move.spot_id.value!r}: its members changed while the move "
                    "started; retry"
                )
            for item in saved:
                if type(item) is not SpotMessage and type(item) is not TimerTick:
                    # Framework work is queued (a close's boundary, application work):
                    # the move does not take it; the Spot reopens, in order.
                    host.unseal_relocation(hosted, move.relocation_id, saved)
                    raise Unavailable("framework work is pending for the Spot: retry later")
            return saved

        done = False
        try:
            saved = await hosted.run_lifecycle_work(seal)
            done = True
        except NotConfigured as exc:
            done = True
            raise _Abort(exc) from None
        except ZLinkError as exc:
            done = True
            raise _Abort(Unavailable(f"the Spot cannot be sealed: {exc}")) from None
        finally:
            waiting[0] = False
            if not done and sealed:
                # Cancelled after the turn sealed it, before the result came back here:
                # nobody else reopens it.
                host.unseal_relocation(hosted, move.relocation_id, sealed[0])
        if saved is None:
            raise _Abort(Unavailable(f"spot {move.spot_id.value!r} is closing or moving"))
        return saved

    async def _mark(self, move: _Move, row: AuthorityRow) -> AuthorityRow:
        """The relocation mark on the row (a Close of a sealed Spot ends Unavailable)."""
        mark = RelocationMark(
            relocation_id=move.relocation_id,
            target=OwnerFence(
                move.mesh_name, move.target_rid, move.target_generation, move.target_lease
            ),
            sealed=True,
        )
        try:
            return await set_mark(
                self._store, row, mark, source_owner_generation=move.source_owner_generation
            )
        except Unavailable:
            raise _Abort(Unavailable("the Spot's authority changed before its move")) from None

    async def _capture(
        self, hosted: HostedSpot, saved: list[SpotItem], plan: SpotWideMemberMoves | None
    ) -> RelocationEnvelope:
        timers = None if hosted.timers is None else hosted.timers.capture()
        ticks = tuple(item for item in saved if type(item) is TimerTick)
        participants: tuple[tuple[str, bytes], ...] = ()
        if hosted.has_members:
            members = sorted(member.value for member in hosted.members)
            participants = ((MEMBERS_PARTICIPANT, encode_value(members)),)
        if plan is not None:
            units = [[actor.value, relocation.to_bytes()] for actor, relocation in plan.units]
            participants = (*participants, (WIDE_PARTICIPANT, encode_value(units)))
        state: bytes | None = None
        policy = hosted.spot_type.relocation
        if isinstance(policy, PreserveStateWith):
            adapter = policy.adapter

            async def capture(instance: Any) -> object:
                return await adapter.capture(instance)

            try:
                captured = await hosted.run_lifecycle_work(capture)
            except ZLinkError as exc:
                raise _Abort(exc) from None
            except Exception as exc:  # the application's adapter: typed here
                raise _Abort(
                    ApplicationError(f"the relocation adapter's capture raised: {exc!r}")
                ) from None
            if not isinstance(captured, bytes):
                raise _Abort(InvalidOperation("the relocation adapter's capture must return bytes"))
            state = captured
        return RelocationEnvelope(state, timers, ticks, participants)

    async def _request(self, peer: PeerAddress, build: Any) -> object:
        try:
            pending = await self._node.request_with(peer, build)
            return await pending.wait()
        except (PeerNotAdmitted, PeerGone, LinkLost, DeadlineExceeded) as exc:
            raise _Abort(
                Unavailable(f"the relocation target could not be reached: {exc!r}")
            ) from None

    async def _prepare(
        self, peer: PeerAddress, hosted: HostedSpot, move: _Move, deadline: float
    ) -> None:
        policy = hosted.spot_type.relocation
        wire_policy = (
            RelocationPolicy.PRESERVE_STATE
            if isinstance(policy, PreserveStateWith)
            else RelocationPolicy.RECREATE
        )
        stable_type = hosted.spot_type.stable_type

        def build(correlation: int) -> RelocationPrepare:
            return RelocationPrepare(
                correlation=correlation,
                relocation_id=move.relocation_id,
                source_rid=move.source_rid,
                source_generation=move.source_generation,
                target_rid=move.target_rid,
                target_generation=move.target_generation,
                object_kind=ObjectKind.SPOT,
                object_id=move.spot_id.value,
                stable_type=stable_type,
                object_generation=move.object_generation,
                authority_owner_generation=move.source_owner_generation,
                policy=wire_policy,
                timeout_ms=remaining_ms(deadline),
            )

        reply = await self._request(peer, build)
        if not isinstance(reply, TerminalReply):
            raise _Abort(Unavailable("the target answered 120 with something else"))
        try:
            raise_for_failure(reply)
        except ZLinkError as exc:
            raise _Abort(exc) from None

    async def _restore(
        self, peer: PeerAddress, move: _Move, sha: bytes, size: int, deadline: float
    ) -> bool:
        def build(correlation: int) -> RelocationRestore:
            return RelocationRestore(
                correlation=correlation,
                relocation_id=move.relocation_id,
                state_sha256=sha,
                state_size=size,
                timeout_ms=remaining_ms(deadline),
            )

        error = relay_ready_error(await self._request(peer, build))
        if error is not None:
            raise _Abort(error)
        return True

    async def _abort(
        self,
        hosted: HostedSpot,
        move: _Move,
        saved: list[SpotItem] | None,
        marked: list[AuthorityRow],
        error: ZLinkError,
        plan: SpotWideMemberMoves | None = None,
    ) -> bool:
        """Before relay-ready acceptance: the source stays owner. The durable abort (the
        mark cleared) and the source-queue restore (saved work, then the held ingress, in
        arrival order) come first, then the target is told one-way (124); then the
        members (a SpotWide Spot's) reopen the same way.

        Returns True, reopening nothing, when the durable abort lost to the target's
        commit (its relay-ready came too late here, but its owner CAS, fenced by the
        mark, won): the Spot (and a SpotWide Spot's members) is the target's and the
        caller goes on as after an acceptance (the target commits only while the mark of
        this move is on the row, so once the mark is cleared here no target can take it)."""
        logger.info("relocation of spot %r aborted: %r", move.spot_id.value, error)
        if (
            marked
            and await clear_mark(
                self._store,
                marked[0].key,
                relocation_id=move.relocation_id,
                target_rid=move.target_rid,
                target_owner_generation=move.target_owner_generation,
                what=f"spot {move.spot_id.value!r}",
            )
            is MarkClear.TAKEN
        ):
            return True
        self.aborted += 1
        if saved is not None:
            self._host.unseal_relocation(hosted, move.relocation_id, saved)
            if hosted.orphans:
                await hosted.fail_orphans()
        with contextlib.suppress(PeerNotAdmitted, DeadlineExceeded, trio.WouldBlock, ZLinkError):
            await self._node.send(
                PeerAddress(move.mesh_name, move.target_rid),
                RelocationAbort(relocation_id=move.relocation_id, reason=error.kind),
                wait=False,
            )
        if plan is not None:
            await plan.abort(error)
        return False

    async def _after_accepted(
        self,
        hosted: HostedSpot,
        move: _Move,
        peer: PeerAddress,
        saved: list[SpotItem],
        nursery: trio.Nursery,
        draining: bool,
    ) -> SpotRelocationResult:
        """Relay-ready accepted: never back (see the module docstring)."""
        with trio.CancelScope(
            shield=True, deadline=trio.current_time() + self._config.relocation_timeout
        ):
            relayed = 0
            batch = [item for item in saved if type(item) is SpotMessage]
            while True:
                relayed += await self._relay(peer, move, batch)
                batch = self._host.take_held_relocation(hosted)
                if not batch:
                    break
            # No await from the empty take to here: nothing was held in between, and what
            # arrives from now on follows (behind the relay on the link).
            leftover = self._host.unpublish_relocated(hosted)
            assert not leftover
            self._follow.install_route(
                move.spot_id,
                object_generation=move.object_generation,
                mesh_name=move.mesh_name,
                source_owner_generation=move.source_owner_generation,
                target_rid=move.target_rid,
                target_generation=move.target_generation,
                lease_generation=move.target_lease,
            )
            self.moved_out += 1
            try:
                await self._node.send(
                    peer, RelocationCutover(relocation_id=move.relocation_id, relayed_count=relayed)
                )
            except (PeerNotAdmitted, DeadlineExceeded, ZLinkError) as exc:
                # The target's 1,000 ms fallback goes on without it (spec 02 §8.1).
                logger.info("cutover of spot %r not sent: %r", move.spot_id.value, exc)
        committed = self._commits[move.relocation_id]
        key = spot_key(move.spot_id)
        with trio.move_on_after(self._config.relocation_timeout):
            if draining or not self._node.admitting:
                # A closing node drops inbound commands (125 too): the Store tells.
                await wait_committed_in_store(
                    self._store,
                    key,
                    target_rid=move.target_rid,
                    target_owner_generation=move.target_owner_generation,
                    committed=committed,
                    what=f"spot {move.spot_id.value!r}",
                )
            else:
                await committed.wait()
        if not committed.is_set():
            await release_unconfirmed(
                self._store,
                key,
                object_generation=move.object_generation,
                source_rid=move.source_rid,
                source_generation=move.source_generation,
                source_owner_generation=move.source_owner_generation,
                what=f"spot {move.spot_id.value!r}",
                waited=self._config.relocation_timeout,
            )
        return SpotRelocationResult(
            relocation_id=move.relocation_id,
            spot_id=move.spot_id,
            object_generation=move.object_generation,
            source_rid=move.source_rid,
            target_rid=move.target_rid,
            owner_generation=move.target_owner_generation,
            relayed=relayed,
            committed=committed.is_set(),
        )

    async def _relay(self, peer: PeerAddress, move: _Move, items: list[SpotMessage]) -> int:
        """``items`` to the target's temporary queue, in order (command 39, the target's
        fence); a request's reply goes back to its caller by a task of the coordinator's
        nursery (bounded by the request's own deadline)."""
        node = self._node
        me = node.identity
        now = trio.current_time()
        sent = 0
        for item in items:
            if item.deadline <= now:
                continue  # an expired request is not run (its caller ended at its deadline)
            payload = item.payload
            if type(payload) is TypedPayload:
                try:
                    payload = payload.encode()
                except ZLinkError as exc:
                    if item.sink is not None:
                        await fail_terminal(item.sink, exc)
                    continue
            assert type(payload) is bytes
            request = item.sink is not None
            fence = ReadyFence(
                spot_id=move.spot_id,
                object_generation=move.object_generation,
                authority_owner_generation=move.target_owner_generation,
                target_rid=move.target_rid,
                target_generation=move.target_generation,
                owner_lease_generation=move.target_lease,
                timeout_ms=remaining_ms(item.deadline) if request else None,
            )
            build = _relayed(
                SpotDirectRoute,
                operation_id=OperationId.new(),
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                route=fence,
                message_kind=MessageKind.REQUEST if request else MessageKind.SEND,
                packet_name=item.packet,
                payload=payload,
            )
            try:
                if item.sink is not None:
                    pending = await node.request_with(peer, build)
                    self._nursery.start_soon(
                        relay_reply_to,
                        item.sink,
                        item.deadline,
                        pending,
                        "the Spot moved and its new owner did not answer",
                    )
                else:
                    await node.send(peer, build(0))
                sent += 1
            except (PeerNotAdmitted, DeadlineExceeded, ZLinkError) as exc:
                if item.sink is not None:
                    await fail_terminal(
                        item.sink, Unavailable(f"the Spot moved; relay failed: {exc!r}")
                    )
        return sent


def _check_row(
    hosted: HostedSpot, row: AuthorityRow | None, rid: NodeRid, generation: NodeGeneration
) -> None:
    """The row the move starts from: Ready, this incarnation, owned by this lifecycle,
    no move in flight, no first message of a cold activation still to recover."""
    name = hosted.spot_id.value
    if (
        row is None
        or row.state is not AuthorityState.READY
        or row.object_generation != hosted.generation
    ):
        raise NotFound(f"spot {name!r} has no Ready authority of this incarnation")
    if row.owner.node_rid != rid or row.owner.node_generation != generation:
        raise Unavailable(f"spot {name!r} is owned by another node lifecycle")
    if row.relocation is not None:
        raise Unavailable(f"spot {name!r} is moving already")
    if row.recovery is not None:
        raise Unavailable(f"spot {name!r}: its first message is still being recovered")


def _relayed(cls: type[SpotDirectRoute], **fields: Any) -> Callable[[int], SpotDirectRoute]:
    """The relayed 39 for a correlation (0 for a one-way send)."""

    def build(correlation: int) -> SpotDirectRoute:
        return cls(correlation=correlation, **fields)

    return build
