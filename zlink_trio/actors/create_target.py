"""The target side of an Actor creation attempt (command 110, or a local call).

Only the target named by a Store reservation runs the factory, and at most once per
reservation: concurrent deliveries of one operation (a replay racing the original) join the
attempt in flight, and a finished operation answers from its terminal record, kept in the
Store with the commit/abort it describes until the original deadline + retention.

Order of one attempt:
1. the retained terminal, if any, is the answer (replay);
2. the reservation fence of the command is checked against the Store row (Creating, same
   version, generation, owner = this lifecycle, same operation);
3. the creation request is read from the Store's pending content and its hash checked;
4. one lifecycle turn of the Entry Spot builds the staging Actor with the factory (Context
   only; the Actor must expose that Context unchanged) and asks OnCreateActor;
5. Approve → Ready commit (+ terminal) then publish; Reject or any failure → abort (+
   terminal), so a rejected Actor is never findable, never messaged and uses no capacity.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import trio

from ..config import ServerConfig
from ..errors import (
    ApplicationError,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    ProtocolError,
    ShuttingDown,
    StaleRoute,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId, MeshName, StableType
from ..mesh.api import MeshNodeApi
from ..spots.approval import ActorCreateEvent, Approve
from ..store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    LocationStore,
    ObjectKey,
    OperationKey,
    TerminalRecord,
)
from ..wire.enums import CreateState
from ..wire.records import ActorCreate, TerminalReply
from ..wire.tails import CreateTail
from .authority import Authority
from .context import ActorContext
from .host import ActorHost
from .hosted import HostedActor, fail_parked
from .reclaim import RETRY_INTERVAL, Reclaimer, give_back
from .registry import ActorType
from .sinks import LocalSink, TerminalSink, decode_terminal, encode_terminal, failure, ok

if TYPE_CHECKING:
    from ..spots.entry import EntrySpot
    from .client import ActorClient
    from .stats import DispatchStats

__all__ = ["CreateTarget"]

logger = logging.getLogger("zlink_trio.actors")

SETTLE_FIRST_DELAY: Final = 0.05
"""Seconds before the first re-read of a Ready commit whose outcome is unknown (doubling
up to the reclaimer's retry interval while the Store stays unreachable)."""


def _create_tail(state: CreateState, row: AuthorityRow, reply: bytes | None) -> CreateTail:
    return CreateTail(
        state=state,
        object_id=row.key.object_id,
        object_generation=row.object_generation,
        mesh_name=row.owner.mesh_name,
        node_rid=row.owner.node_rid,
        reply=reply,
    )


@final
class CreateTarget:
    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        types: Mapping[StableType, ActorType],
        entry_spots: Mapping[MeshName, EntrySpot],
        client: ActorClient,
        stats_for: Callable[[StableType], DispatchStats],
        nursery: trio.Nursery,
        authority: Authority,
        reclaimer: Reclaimer,
    ) -> None:
        self._config = config
        self._authority = authority
        self._reclaimer = reclaimer
        self._node = node
        self._store = store
        self._host = host
        self._types = types
        self._entry_spots = entry_spots
        self._client = client
        self._stats_for = stats_for
        self._nursery = nursery
        self._inflight: dict[OperationKey, list[TerminalSink]] = {}
        self.factory_runs = 0
        self.rejected = 0
        self.failed = 0

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def handle(self, record: ActorCreate, sink: TerminalSink) -> None:
        """Start (or join) the attempt of ``record``'s operation; the terminal goes to
        ``sink``. Never blocks: the attempt runs in the Actor owner's nursery."""
        key = OperationKey(record.source_rid, record.source_generation, record.operation_id)
        waiters = self._inflight.get(key)
        if waiters is not None:
            waiters.append(sink)
            return
        self._inflight[key] = [sink]
        deadline = trio.current_time() + record.timeout_ms / 1000
        self._nursery.start_soon(self._run, key, record, deadline, name="zlink_trio.actor.create")

    async def _run(self, key: OperationKey, record: ActorCreate, deadline: float) -> None:
        try:
            reply = await self._attempt(key, record, deadline)
        except ZLinkError as exc:
            reply = failure(exc)
        except Exception as exc:
            logger.exception("creation attempt of %r failed", record.actor_id)
            reply = failure(Unavailable(f"creation attempt failed: {type(exc).__name__}"))
        except BaseException:
            # Cancelled: the runtime is stopping. A local source waits on its sink in
            # memory: end it now (ShuttingDown, no terminal, so it gives its reservation
            # back) rather than at its deadline. A remote source sees the link close.
            for sink in self._inflight.pop(key, []):
                if isinstance(sink, LocalSink):
                    sink.fail(ShuttingDown("the Actor runtime stopped during the creation"))
            raise
        sinks = self._inflight.pop(key, [])
        for sink in sinks:
            await sink.deliver(reply)

    async def _attempt(
        self, key: OperationKey, record: ActorCreate, deadline: float
    ) -> TerminalReply:
        store = self._store
        retained = await store.read_terminal(key)
        if retained is not None:
            return decode_terminal(retained.result)
        held = self._reclaimer.reply_for(key)
        if held is not None:  # ended; its abort (and terminal record) is still pending
            return held
        object_key = ObjectKey.actor(record.actor_id.value)
        row = await self._authority.read(record.actor_id)
        me = self._node.identity
        fence = record.reservation
        if (
            row is None
            or row.state is not AuthorityState.CREATING
            or row.store_version != fence.expected_store_version
            or row.object_generation != fence.object_generation
            or row.owner.node_rid != me.node_rid
            or row.owner.node_generation != me.node_generation
            or row.operation != key
        ):
            return failure(Unavailable("the reservation fence does not match the Location Store"))
        retain_for = (
            max(0.0, deadline - trio.current_time()) + self._config.terminal_record_retention
        )

        async def abort(
            error: ZLinkError, state: CreateState, reply: bytes | None = None
        ) -> TerminalReply:
            if state is CreateState.REJECTED:
                terminal = ok(_create_tail(state, row, reply))
            else:
                terminal = failure(error, _create_tail(CreateState.FAILED, row, None))
            try:
                encoded = encode_terminal(terminal)
            except ProtocolError as exc:
                # The application's reply cannot be encoded: the attempt FAILED with that
                # error, and the reservation is given back all the same.
                state = CreateState.FAILED
                terminal = failure(exc, _create_tail(CreateState.FAILED, row, None))
                encoded = encode_terminal(terminal)
            if state is CreateState.REJECTED:
                self.rejected += 1
            else:
                self.failed += 1
            record_ = TerminalRecord(key, encoded)
            settled = await give_back(
                store,
                object_key,
                row.store_version,
                bound=self._config.drain_timeout,
                terminal=record_,
                retain_for=retain_for,
            )
            if not settled:
                # The Store could not be reached in time: the reservation (and this
                # terminal) is given back in the background; replays get this terminal.
                self._reclaimer.later(
                    object_key,
                    row.store_version,
                    terminal=record_,
                    reply=terminal,
                    retain_for=retain_for,
                )
            return terminal

        actor_type = self._types.get(record.stable_type)
        if actor_type is None or row.stable_type != record.stable_type:
            return await abort(
                NotFound(f"actor type {record.stable_type.value!r} is not registered here"),
                CreateState.FAILED,
            )
        request: bytes | None = None
        if row.pending_content is not None:
            request = await store.read_root(row.pending_content)
            if request is None:
                return await abort(
                    InvalidOperation("the creation request content is missing or changed"),
                    CreateState.FAILED,
                )
        entry = self._entry_spots.get(row.owner.mesh_name)
        if entry is None:
            return await abort(Unavailable("no Entry Spot for that mesh here"), CreateState.FAILED)
        actor_id = ActorId(row.key.object_id)
        context = ActorContext(
            actor_id, row.object_generation, row.owner.mesh_name, row.membership, self._client
        )
        built: list[Any] = []

        async def stage() -> ActorCreateEvent:
            self.factory_runs += 1
            instance = actor_type.factory(context)
            if inspect.isawaitable(instance):
                instance = await instance
            if getattr(instance, "context", None) is not context:
                raise InvalidOperation(
                    "the factory's Actor must expose the Context it was given, unchanged"
                )
            built.append(instance)
            return ActorCreateEvent(
                actor_id=actor_id,
                stable_type=record.stable_type,
                object_generation=row.object_generation,
                entry_spot_id=entry.spot_id,
                request=request,
                actor=instance,
            )

        self._host.begin_staging(actor_id)
        try:
            decision: Any = None
            with trio.move_on_at(deadline) as scope:
                try:
                    _event, decision = await entry.approve(stage, deadline)
                except ZLinkError as exc:
                    return await abort(exc, CreateState.FAILED)
                except Exception as exc:
                    logger.info("creation of %r failed in the application: %r", actor_id, exc)
                    return await abort(
                        ApplicationError(f"{type(exc).__name__}: {exc}"), CreateState.FAILED
                    )
            if scope.cancelled_caught:
                return await abort(
                    DeadlineExceeded("creation did not finish in time"), CreateState.FAILED
                )
            if not isinstance(decision, Approve):
                return await abort(Unavailable("rejected"), CreateState.REJECTED, decision.reply)
            created = ok(_create_tail(CreateState.CREATED, row, decision.reply))
            try:
                created_record = TerminalRecord(key, encode_terminal(created))
            except ProtocolError as exc:  # the application's reply cannot be encoded
                return await abort(exc, CreateState.FAILED)
            committed = await self._commit(object_key, row, created_record, retain_for)
            if committed is None:
                # Lease lost or the row moved on: nothing was published; give the
                # reservation back if it is still ours (a conflict here is harmless).
                return await abort(
                    Unavailable("the Ready commit was refused (lease or reservation changed)"),
                    CreateState.FAILED,
                )
            kind = self._host.kind(
                actor_type,
                me.node_rid,
                self._stats_for(actor_type.stable_type),
                self._config.max_reply_bytes,
            )
            hosted = HostedActor(kind, context, built[0], committed.owner_generation)
            self._host.publish(hosted)
            return created
        finally:
            parked = self._host.end_staging(actor_id)
            if parked:  # frames admitted for it while it was staging; it was not published
                self._nursery.start_soon(
                    fail_parked, parked, StaleRoute(f"actor {actor_id.value!r} was not created")
                )

    async def _commit(
        self, key: ObjectKey, row: AuthorityRow, terminal: TerminalRecord, retain_for: float
    ) -> AuthorityRow | None:
        """Ready commit; an unknown outcome is settled by re-reading the row."""
        try:
            result = await self._store.commit_ready(
                key, row.store_version, terminal=terminal, retain_for=retain_for
            )
        except StoreOutcomeUnknown:
            return await self._settle_commit(row)
        except Unavailable:
            return None
        if isinstance(result, Applied):
            return result.row
        return None

    async def _settle_commit(self, row: AuthorityRow) -> AuthorityRow | None:
        """The row after a Ready commit whose outcome is unknown: ours and Ready (it
        committed), or None (it did not: the row is still the reservation, or moved on).

        Reads until the Store answers, however long that takes (only the runtime's end
        stops it): answering before the outcome is known would tell the source a lie
        (a failure for an Actor whose terminal record says Created, and that nobody
        hosts), and giving up would leave the row as it is for ever. Replays of the
        operation join this attempt meanwhile; the source ends at its deadline with
        DeadlineExceeded (admitted, no terminal) and gives its reservation back, a CAS
        that loses to a commit that applied."""
        actor_id = ActorId(row.key.object_id)
        delay = SETTLE_FIRST_DELAY
        while True:
            try:
                current = await self._authority.read(actor_id)
            except (Unavailable, StoreOutcomeUnknown) as exc:
                logger.info("settling the Ready commit of %r: %r; reading again", actor_id, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, RETRY_INTERVAL)
                continue
            if (
                current is not None
                and current.state is AuthorityState.READY
                and current.object_generation == row.object_generation
                and current.owner.node_rid == row.owner.node_rid
                and current.owner.node_generation == row.owner.node_generation
            ):
                return current
            return None
