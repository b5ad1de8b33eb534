"""The target side of a creation attempt, for any object kind (command 110 or 47, or a
local call).

Only the target named by a Store reservation runs the factory, and at most once per
reservation: concurrent deliveries of one operation (a replay racing the original) join the
attempt in flight, and a finished operation answers from its terminal record, kept in the
Store with the commit/abort it describes until the original deadline + retention.

A target never sends a terminal for an attempt while leaving that attempt's reservation in
place: every end without a Ready commit — a Store failure before or at the fence check, a
refused fence, an answer from the retained terminal, a rejection, any failure — aborts the
fenced reservation (a CAS on exactly ``fence.expected_store_version``, so a row that moved
on is never touched; a fence from the wire only once a read showed that row is this
operation's reservation), recording the terminal sent in the same transaction unless the
operation's terminal is already recorded; what the Store cannot settle in time goes to the
:class:`~.reclaim.Reclaimer`.

Order of one attempt:
1. the retained terminal, if any, is the answer (replay; the fenced reservation, a newer
   one the operation made again, is given back);
2. the reservation fence of the command is checked against the Store row (Creating, same
   version, generation, owner = this lifecycle, same operation);
3. the kind says whether this node can build the type at all (:meth:`~.kind.TargetKind.refuse`);
4. the creation request is read from the Store's pending content and its hash checked;
5. the kind's :class:`~.kind.Staging` builds the object and asks for its approval (for an
   Actor: one lifecycle turn of the Entry Spot runs the factory and OnCreateActor);
6. Commit → Ready commit (+ terminal) then publish; Refuse or any failure → abort (+
   terminal), so a refused object is never findable, never messaged and uses no capacity.

Steps 3–6 (:meth:`CreateTarget.run_reserved`) need only a Creating row of this lifecycle:
a kind whose target makes the reservation itself (an Instance Spot's cold activation,
spec 06 §4.1) runs them after its own reserve.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Generic, final

import trio

from ..config import ServerConfig
from ..errors import (
    ApplicationError,
    DeadlineExceeded,
    InvalidOperation,
    ProtocolError,
    ShuttingDown,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..mesh.api import MeshNodeApi
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
from ..wire.records import TerminalReply
from ..wire.tails import CreateTail
from .authority import Authority
from .kind import Commit, CreateOrder, Decision, IdT, TargetKind
from .reclaim import RETRY_INTERVAL, Reclaimer, give_back
from .sinks import LocalSink, TerminalSink, decode_recorded, encode_terminal, failure, ok

__all__ = ["CreateTarget"]

logger = logging.getLogger("zlink_trio.objects")

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
class _Attempt:
    """The attempt in flight for one operation: the sinks waiting for its terminal and
    the reservations of deliveries that joined it naming another one (a replay of an
    older attempt, a re-submission that reserved again while this one was ending, an
    OperationId re-used for another object)."""

    __slots__ = ("key", "others", "sinks", "version")

    def __init__(self, order: CreateOrder[Any], sink: TerminalSink) -> None:
        self.key = order.key
        self.version = order.fence.expected_store_version
        self.sinks: list[TerminalSink] = [sink]
        self.others: set[tuple[ObjectKey, int]] = set()

    def join(self, order: CreateOrder[Any], sink: TerminalSink) -> None:
        self.sinks.append(sink)
        version = order.fence.expected_store_version
        if (order.key, version) != (self.key, self.version):
            self.others.add((order.key, version))


def _reply_error(reply: object, limit: int) -> ApplicationError | None:
    """The application's mistake in a create callback's reply (Approve/Reject.reply):
    not bytes (or None), or over ``max_reply_bytes``; None when it is fine."""
    if reply is None:
        return None
    if not isinstance(reply, bytes):
        return ApplicationError(
            f"the create callback's reply must be bytes or None, got {type(reply).__name__}"
        )
    if len(reply) > limit:
        return ApplicationError(
            f"the create callback's reply of {len(reply)} bytes exceeds max_reply_bytes ({limit})"
        )
    return None


@final
class CreateTarget(Generic[IdT]):
    def __init__(
        self,
        *,
        kind: TargetKind[IdT],
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        nursery: trio.Nursery,
        authority: Authority[IdT],
        reclaimer: Reclaimer,
        owner: str = "runtime",
        task_name: str = "zlink_trio.objects.create",
    ) -> None:
        self._kind = kind
        self._config = config
        self._authority = authority
        self._reclaimer = reclaimer
        self._node = node
        self._store = store
        self._nursery = nursery
        self._owner = owner
        self._task_name = task_name
        self._inflight: dict[OperationKey, _Attempt] = {}
        self.rejected = 0
        self.failed = 0

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def handle(
        self,
        order: CreateOrder[IdT],
        sink: TerminalSink,
        *,
        reserved: AuthorityRow | None = None,
        private: bool = False,
    ) -> None:
        """Start (or join) the attempt of ``order``'s operation; the terminal goes to
        ``sink``. Never blocks: the attempt runs in the owning runtime's nursery.

        ``reserved``: a source on this node hands over the row its own reserve CAS just
        returned (Applied) for ``order``. That row is the Store's answer, not a fence
        copied from the wire, and the delivery cannot be a replay (replays travel only
        over the mesh; a local source drives its new reservation once): the attempt
        checks the fence against it instead of reading the row again, and skips the
        terminal-record read that exists to answer replays (an explicit OperationId's
        terminal was read by the source after that reservation; an attempt of the
        operation in flight is joined here, one that ended with its abort still pending
        is answered from the held reply). The Ready commit stays a CAS on exactly that
        row's version: a row that moved on meanwhile is never published.

        ``private``: the operation's id was made for this one call by a source on this
        node and never left it (no explicit OperationId): nobody can ever ask for its
        terminal (no replay, no re-submission), so a Created without an application
        reply is committed without a terminal record (a refusal or failure still records
        one)."""
        key = order.operation
        attempt = self._inflight.get(key)
        if attempt is not None:
            attempt.join(order, sink)
            return
        self._inflight[key] = _Attempt(order, sink)
        deadline = trio.current_time() + order.timeout_ms / 1000
        self._nursery.start_soon(
            self._run, order, deadline, reserved, private, name=self._task_name
        )

    async def _run(
        self,
        order: CreateOrder[IdT],
        deadline: float,
        reserved: AuthorityRow | None,
        private: bool,
    ) -> None:
        key = order.operation
        try:
            reply = await self._attempt(order, deadline, reserved, private)
        except Exception as exc:
            # Ending the attempt itself failed (not a Store outage: a bug, or a Store
            # refusing the abort): still one terminal, never a crashed runtime; the row
            # (if any is left) records its attempt deadline and is reclaimed after it.
            logger.exception("ending the creation attempt of %r failed", order.key)
            reply = failure(Unavailable(f"creation attempt failed: {type(exc).__name__}"))
        except BaseException:
            # Cancelled: the runtime is stopping. A local source waits on its sink in
            # memory: end it now (ShuttingDown, no terminal, so it gives its reservation
            # back) rather than at its deadline. A remote source sees the link close.
            attempt = self._inflight.pop(key, None)
            for sink in attempt.sinks if attempt is not None else ():
                if isinstance(sink, LocalSink):
                    sink.fail(ShuttingDown(f"the {self._owner} stopped during the creation"))
            raise
        attempt = self._inflight.pop(key, None)
        if attempt is None:
            return
        for object_key, version in sorted(
            attempt.others, key=lambda other: (other[0].object_id, other[1])
        ):
            # A delivery that joined naming another reservation gets this terminal too:
            # that reservation is given back first (a CAS on exactly its version).
            try:
                await self._give_back(order, object_key, version)
            except Exception:  # as above: its attempt deadline bounds it all the same
                logger.exception("giving back the reservation of %r failed", object_key)
        for sink in attempt.sinks:
            await sink.deliver(reply)

    async def _attempt(
        self,
        order: CreateOrder[IdT],
        deadline: float,
        reserved: AuthorityRow | None,
        private: bool,
    ) -> TerminalReply:
        """The terminal of ``order``'s attempt; its reservation is ended (committed, or
        given back) before it is returned."""
        try:
            return await self._fenced(order, deadline, reserved, private)
        except ZLinkError as exc:
            reply = failure(exc)
        except Exception as exc:
            logger.exception("creation attempt of %r failed", order.key)
            reply = failure(Unavailable(f"creation attempt failed: {type(exc).__name__}"))
        # Ended before (or outside) the steps that settle the reservation themselves: a
        # Store failure before or at the fence check, the request root unreadable, the
        # kind's staging failing to start. Give the fenced reservation back with this
        # terminal (a row that moved on is left alone by the CAS).
        await self._end_fenced(order, reply)
        return reply

    async def _fenced(
        self,
        order: CreateOrder[IdT],
        deadline: float,
        reserved: AuthorityRow | None,
        private: bool,
    ) -> TerminalReply:
        key = order.operation
        fence = order.fence
        retained = None if reserved is not None else await self._store.read_terminal(key)
        if retained is not None:
            # The operation ended before (a replay, or a re-submission that reserved
            # again): its one terminal is the answer, and the reservation this delivery
            # names has no attempt left to run: give it back.
            await self._give_back(order)
            recorded = decode_recorded(retained.result)
            if recorded.subject not in (None, order.key):
                return failure(
                    InvalidOperation(
                        "operation id already used for another object (retained until its "
                        "deadline + the terminal retention)"
                    )
                )
            return recorded.reply
        held = self._reclaimer.reply_for(key)
        if held is not None:  # ended; its abort (and terminal record) is still pending
            if not self._reclaimer.holds(order.key, fence.expected_store_version):
                await self._give_back(order)
            return held
        row = reserved if reserved is not None else await self._authority.read(order.object_id)
        me = self._node.identity
        if (
            row is None
            or row.state is not AuthorityState.CREATING
            or row.store_version != fence.expected_store_version
            or row.object_generation != fence.object_generation
            or row.owner.node_rid != me.node_rid
            or row.owner.node_generation != me.node_generation
            or row.operation != key
        ):
            refused = failure(
                Unavailable("the reservation fence does not match the Location Store")
            )
            if (
                row is not None
                and row.store_version == fence.expected_store_version
                and row.operation == key
            ):
                # This operation's reservation is there but is not this node's to run:
                # it ends with this terminal all the same. (A fence copied under another
                # operation names a reservation that is not ours to end.)
                await self._end_fenced(order, refused)
            return refused
        return await self.run_reserved(order, row, deadline, private=private)

    async def _give_back(
        self, order: CreateOrder[Any], key: ObjectKey | None = None, version: int | None = None
    ) -> None:
        """Abort the reservation ``order``'s fence names (or ``(key, version)``) if it is
        still exactly that row and was made by ``order``'s operation (a fence from the
        wire is checked against the row first). No terminal: the operation's is recorded
        already. In the background when the Store cannot be reached in time."""
        key = order.key if key is None else key
        version = order.fence.expected_store_version if version is None else version
        operation = order.operation
        if not await give_back(
            self._store, key, version, bound=self._config.drain_timeout, operation=operation
        ):
            self._reclaimer.later(key, version, operation=operation)

    async def _end_fenced(self, order: CreateOrder[IdT], reply: TerminalReply) -> None:
        """Give the reservation ``order``'s fence names back, recording ``reply`` as the
        operation's terminal in the same transaction (an earlier live terminal of the
        operation wins). Kept until the row's recorded attempt deadline + retention."""
        version = order.fence.expected_store_version
        retain_for = self._config.terminal_record_retention
        record: TerminalRecord | None
        try:
            record = TerminalRecord(order.operation, encode_terminal(reply, order.key))
        except ProtocolError:  # cannot happen for a failure terminal; stay safe
            record = None
        settled = await give_back(
            self._store,
            order.key,
            version,
            bound=self._config.drain_timeout,
            terminal=record,
            retain_for=retain_for,
            operation=order.operation,
        )
        if not settled:
            self._reclaimer.later(
                order.key,
                version,
                terminal=record,
                reply=reply,
                retain_for=retain_for,
                operation=order.operation,
            )

    async def run_reserved(
        self,
        order: CreateOrder[IdT],
        row: AuthorityRow,
        deadline: float,
        *,
        private: bool = False,
    ) -> TerminalReply:
        """Steps 3–6 for ``row``, a Creating reservation of this lifecycle made by
        ``order``'s operation: the terminal (already recorded with the commit or abort;
        see :meth:`handle` for ``private``)."""
        store = self._store
        key = order.operation
        object_key = row.key
        # The Store keeps the terminal until the row's recorded attempt deadline (the
        # source's original deadline) + retention, however long this attempt takes; a row
        # without one (made by a target itself) counts from this attempt's deadline.
        retain_for = self._config.terminal_record_retention
        if row.attempt_expires_at is None:
            retain_for += max(0.0, deadline - trio.current_time())

        async def abort(
            error: ZLinkError, state: CreateState, reply: bytes | None = None
        ) -> TerminalReply:
            if state is CreateState.REJECTED:
                terminal = ok(_create_tail(state, row, reply))
            else:
                terminal = failure(error, _create_tail(CreateState.FAILED, row, None))
            try:
                encoded = encode_terminal(terminal, object_key)
            except ProtocolError as exc:
                # The application's reply cannot be encoded: the attempt FAILED with that
                # error, and the reservation is given back all the same.
                state = CreateState.FAILED
                terminal = failure(exc, _create_tail(CreateState.FAILED, row, None))
                encoded = encode_terminal(terminal, object_key)
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

        refused = self._kind.refuse(order, row)
        if refused is not None:
            return await abort(refused, CreateState.FAILED)
        request: bytes | None = None
        if row.pending_content is not None:
            request = await store.read_root(row.pending_content)
            if request is None:
                return await abort(
                    InvalidOperation("the creation request content is missing or changed"),
                    CreateState.FAILED,
                )
        staging = self._kind.begin(order, row, request)
        if isinstance(staging, ZLinkError):
            return await abort(staging, CreateState.FAILED)
        try:
            decision: Decision | None = None
            with trio.move_on_at(deadline) as scope:
                try:
                    decision = await staging.stage(deadline)
                except ZLinkError as exc:
                    return await abort(exc, CreateState.FAILED)
                except Exception as exc:
                    logger.info("creation of %r failed in the application: %r", object_key, exc)
                    return await abort(
                        ApplicationError(f"{type(exc).__name__}: {exc}"), CreateState.FAILED
                    )
            if scope.cancelled_caught or decision is None:
                return await abort(
                    DeadlineExceeded("creation did not finish in time"), CreateState.FAILED
                )
            bad_reply = _reply_error(decision.reply, self._config.max_reply_bytes)
            if bad_reply is not None:
                logger.info("creation of %r failed in the application: %s", object_key, bad_reply)
                return await abort(bad_reply, CreateState.FAILED)
            if not isinstance(decision, Commit):
                return await abort(Unavailable("rejected"), CreateState.REJECTED, decision.reply)
            created = ok(_create_tail(CreateState.CREATED, row, decision.reply))
            created_record: TerminalRecord | None = None
            if not private or decision.reply is not None:
                try:
                    created_record = TerminalRecord(key, encode_terminal(created, object_key))
                except ProtocolError as exc:  # the application's reply cannot be encoded
                    return await abort(exc, CreateState.FAILED)
            committed = await self._commit(
                object_key, order.object_id, row, created_record, retain_for
            )
            if committed is None:
                # Lease lost or the row moved on: nothing was published; give the
                # reservation back if it is still ours (a conflict here is harmless).
                return await abort(
                    Unavailable("the Ready commit was refused (lease or reservation changed)"),
                    CreateState.FAILED,
                )
            staging.publish(committed)
            return created
        finally:
            staging.end()

    async def _commit(
        self,
        key: ObjectKey,
        object_id: IdT,
        row: AuthorityRow,
        terminal: TerminalRecord | None,
        retain_for: float,
    ) -> AuthorityRow | None:
        """Ready commit; an unknown outcome is settled by re-reading the row."""
        try:
            result = await self._store.commit_ready(
                key, row.store_version, terminal=terminal, retain_for=retain_for
            )
        except StoreOutcomeUnknown:
            return await self._settle_commit(object_id, row)
        except Unavailable:
            return None
        if isinstance(result, Applied):
            return result.row
        return None

    async def _settle_commit(self, object_id: IdT, row: AuthorityRow) -> AuthorityRow | None:
        """The row after a Ready commit whose outcome is unknown: ours and Ready (it
        committed), or None (it did not: the row is still the reservation, or moved on).

        Reads until the Store answers, however long that takes (only the runtime's end
        stops it): answering before the outcome is known would tell the source a lie
        (a failure for an object whose terminal record says Created, and that nobody
        hosts), and giving up would leave the row as it is for ever. Replays of the
        operation join this attempt meanwhile; the source ends at its deadline with
        DeadlineExceeded (admitted, no terminal) and gives its reservation back, a CAS
        that loses to a commit that applied."""
        delay = SETTLE_FIRST_DELAY
        while True:
            try:
                current = await self._authority.read(object_id)
            except (Unavailable, StoreOutcomeUnknown) as exc:
                logger.info("settling the Ready commit of %r: %r; reading again", row.key, exc)
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
