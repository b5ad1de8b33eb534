"""The source side of Actor Create / GetOrCreate (spec 04 §6.2–§6.5).

One end-to-end deadline, fixed at submit, covers resolve, reservation, the target's
factory and approval, and the Ready barrier. Only the caller whose Store reservation CAS
wins owns the creation run; everyone else observes Creating and re-checks the authority with
bounded backoff until it is Ready (→ Existing, or AlreadyExists for an exclusive Create) or
Missing again (→ competes for a new reservation with its OWN request; no operation shares
another's Rejected state or reply).
"""

from __future__ import annotations

import logging
import random
from typing import final

import trio

from ..config import ServerConfig
from ..errors import (
    AlreadyExists,
    CapacityExceeded,
    DeadlineExceeded,
    OwnerLeaseExpired,
    StoreOutcomeUnknown,
    TypeMismatch,
    Unavailable,
)
from ..ids import ActorId, ActorRef, MeshName, OperationId, StableType
from ..mesh.api import MeshNodeApi, PeerAddress
from ..store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    LocationStore,
    ObjectKey,
    ObjectKind,
    OperationKey,
    OwnerFence,
    Reservation,
)
from ..wire.enums import CreateState
from ..wire.records import ActorCreate, TerminalReply
from ..wire.tails import CreateTail, ReservationFence
from .create_target import CreateTarget
from .durable import remaining_ms, run_durable
from .placement import choose_node
from .results import ActorCreateResult, Created, Existing, Rejected
from .sinks import LocalSink, decode_terminal, raise_for_failure

__all__ = ["CreateSource"]

logger = logging.getLogger("zlink_trio.actors")


def _ref(row: AuthorityRow) -> ActorRef:
    return ActorRef(
        ActorId(row.key.object_id), row.object_generation, row.owner.mesh_name, row.owner.node_rid
    )


def _result(reply: TerminalReply) -> ActorCreateResult:
    raise_for_failure(reply)
    tail = reply.tail
    if not isinstance(tail, CreateTail):
        raise Unavailable("the create terminal carries no create tail")
    if tail.state is CreateState.REJECTED:
        return Rejected(tail.reply)
    ref = tail.actor_ref()
    if tail.state is CreateState.EXISTING:
        return Existing(ref)
    return Created(ref, tail.reply)


@final
class CreateSource:
    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        target: CreateTarget,
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._target = target
        self._rng = random.Random()
        self.creates = 0
        self.replays = 0

    async def run(
        self,
        actor_id: ActorId,
        stable_type: StableType,
        mesh: MeshName,
        request: bytes | None,
        deadline: float,
        *,
        exclusive: bool,
        operation_id: OperationId | None,
    ) -> ActorCreateResult:
        me = self._node.identity
        explicit = operation_id is not None
        op = operation_id or OperationId.new()
        key = OperationKey(me.node_rid, me.node_generation, op)
        reserved: AuthorityRow | None = None
        # This scope covers resolve and reservation only: the durable operation that
        # follows owns the same deadline itself (nested cancel scopes with one deadline
        # would let the outer one swallow the inner one's typed ending).
        with trio.move_on_at(deadline):
            if explicit:
                # A re-submitted operation gets its retained terminal (until deadline + 5 min).
                retained = await self._store.read_terminal(key)
                if retained is not None:
                    return _result(decode_terminal(retained.result))
            backoff = self._config.create_backoff_initial
            object_key = ObjectKey.actor(actor_id.value)
            while reserved is None:
                row = await self._store.read(object_key)
                if row is not None:
                    if row.kind is not ObjectKind.ACTOR or row.stable_type != stable_type:
                        raise TypeMismatch(
                            f"actor {actor_id.value!r} exists with type {row.stable_type.value!r}"
                        )
                    if row.state is AuthorityState.READY:
                        if exclusive:
                            raise AlreadyExists(f"actor {actor_id.value!r} already exists")
                        return Existing(_ref(row))
                    if row.state is AuthorityState.CREATING and row.operation == key:
                        # Our own reservation, made by a reserve whose outcome was unknown
                        # (connection lost after the commit): drive it, never orphan it.
                        self.creates += 1
                        reserved = row
                        break
                    # Creating or Closing: wait for the authority to settle (bounded backoff).
                    await trio.sleep(backoff * (0.5 + self._rng.random()))
                    backoff = min(backoff * 2, self._config.create_backoff_max)
                    continue
                # None: lost the reservation race (or the node moved): read again
                reserved = await self._reserve(key, actor_id, stable_type, mesh, request, deadline)
        if reserved is not None:
            try:
                return await self._drive(key, reserved, deadline)
            except (Unavailable, DeadlineExceeded):
                await self._give_back(reserved)
                raise
        raise DeadlineExceeded(f"create of {actor_id.value!r} did not finish before its deadline")

    async def _reserve(
        self,
        key: OperationKey,
        actor_id: ActorId,
        stable_type: StableType,
        mesh: MeshName,
        request: bytes | None,
        deadline: float,
    ) -> AuthorityRow | None:
        store = self._store
        nodes = await store.list_nodes(mesh)
        target = choose_node(nodes, stable_type, rng=self._rng)
        content = None
        if request is not None:
            retain = (
                max(0.0, deadline - trio.current_time()) + self._config.terminal_record_retention
            )
            content = await store.put_root(request, retain_for=retain)
        descriptor = target.descriptor
        owner = OwnerFence(
            descriptor.mesh_name,
            descriptor.node_rid,
            descriptor.node_generation,
            target.lease_generation,
        )
        try:
            result = await store.reserve(
                Reservation(
                    key=ObjectKey.actor(actor_id.value),
                    kind=ObjectKind.ACTOR,
                    stable_type=stable_type,
                    owner=owner,
                    membership=descriptor.entry_spot_id,
                    content=content,
                    operation=key,
                )
            )
        except (OwnerLeaseExpired, CapacityExceeded) as exc:
            logger.debug("reservation on %s refused (%r); choosing again", descriptor.node_rid, exc)
            await trio.sleep(self._config.create_backoff_initial)
            return None
        except StoreOutcomeUnknown as exc:
            # It may have committed: the caller's next read finds our reservation (its
            # operation is ``key``) or Missing, and goes on from there.
            logger.info("reservation of %r has an unknown outcome (%r); re-reading", actor_id, exc)
            return None
        if isinstance(result, Applied):
            self.creates += 1
            return result.row
        return None

    async def _give_back(self, row: AuthorityRow) -> None:
        """The operation ended without a terminal: if the reservation it made is still
        untouched (the target never started committing it), abort it so the id and the
        pending capacity are free again. A target that got there first wins the CAS. An
        abort with an unknown outcome is retried while the row is still that reservation."""
        with trio.CancelScope(shield=True), trio.move_on_after(self._config.drain_timeout):
            unknown = False
            while True:
                try:
                    if unknown:  # the last abort may or may not have happened: still ours?
                        current = await self._store.read(row.key)
                        if current is None or current.store_version != row.store_version:
                            return
                    await self._store.abort_creation(row.key, row.store_version)
                    return
                except StoreOutcomeUnknown as exc:
                    logger.info("giving back the reservation of %r: %r", row.key, exc)
                    unknown = True
                except (Unavailable, OSError) as exc:
                    logger.info("could not give back the reservation of %r: %r", row.key, exc)
                    return

    async def _drive(
        self, key: OperationKey, row: AuthorityRow, deadline: float
    ) -> ActorCreateResult:
        """Send the create to the reserved target and wait for its terminal (replaying it
        under the same OperationId on transient transport failures)."""
        me = self._node.identity
        fence = ReservationFence(
            expected_store_version=row.store_version,
            object_generation=row.object_generation,
            authority_owner_generation=row.owner_generation,
            target_rid=row.owner.node_rid,
            target_generation=row.owner.node_generation,
            target_owner_lease_generation=row.owner.lease_generation,
            pending_capacity_delta=1,
        )

        def record(timeout_ms: int) -> ActorCreate:
            return ActorCreate(
                correlation=0,
                operation_id=key.operation_id,
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                actor_id=ActorId(row.key.object_id),
                stable_type=row.stable_type,
                reservation=fence,
                timeout_ms=timeout_ms,
            )

        if row.owner.node_rid == me.node_rid:
            sink = LocalSink()
            self._target.handle(record(remaining_ms(deadline)), sink)
            with trio.move_on_at(deadline):
                return _result(await sink.wait())
            raise DeadlineExceeded("create did not finish before its deadline")
        attempts = 0

        def counted() -> None:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                self.replays += 1

        reply = await run_durable(
            self._node,
            PeerAddress(row.owner.mesh_name, row.owner.node_rid),
            record,
            deadline,
            on_attempt=counted,
        )
        return _result(reply)
