"""``server.spots``: the Spot manager (spec 06 §3, §3.4, §7).

Create and GetOrCreate make User Spots only (an Instance Spot comes into being only by a
direct call's cold activation): the fluent call of every manager (``in_mesh``,
``request``, ``timeout``, ``operation_id``, one submit), run by the shared create source
(:mod:`zlink_trio.objects.create_source`) with the User Spot kind adapter. ``find`` and
``query`` read the Location Store; ``close`` closes exactly the incarnation a SpotRef
names, on this node or through command 48 to its remote owner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

import attrs
import trio

from ..config import ServerConfig
from ..errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidOperation,
    NotConfigured,
    TypeMismatch,
    Unavailable,
)
from ..ids import (
    OperationId,
    SpotId,
    SpotRef,
    StableType,
    new_user_spot_id,
    user_spot_id_for_operation,
)
from ..mesh.api import MeshNodeApi, PeerAddress
from ..objects.authority import Authority
from ..objects.calls import call_deadline, yield_to_caller
from ..objects.control import ask_owner
from ..objects.create_call import CreateCall
from ..objects.create_source import CreateSource
from ..objects.durable import remaining_ms
from ..objects.owner_loss import Reclaim, owner_lost, reclaim_row, try_reclaim
from ..objects.placement import choose_mesh
from ..observe import FlowTrace
from ..store.api import AuthorityRow, AuthorityState, LocationStore, Namespace, ObjectKind
from ..wire.records import UserSpotClose
from ..wire.tails import CloseTail
from .client import SpotClient, SpotRequestCall, SpotSendCall
from .close import CloseFence, SpotCloser
from .kind import reserved_shape_error, spot_ref
from .results import SpotCreateResult
from .spot_kind import SpotKind

__all__ = ["MAX_QUERY_BYTES", "SpotCreateCall", "SpotInfo", "SpotManager", "SpotPage"]

MAX_QUERY_PAGE: Final = 1000
MAX_QUERY_BYTES: Final = 4 * 1024 * 1024
"""A query page's encoded size bound (spec 06 §3.4)."""

_RECLAIM_ROUNDS: Final = 3

SpotCreateCall = CreateCall[SpotId, SpotCreateResult]
"""``create(...)`` / ``get_or_create(...)`` of a User Spot (the shared fluent create call)."""


@attrs.frozen
class SpotInfo:
    """One current Spot as a query lists it."""

    spot: SpotRef
    kind: SpotKind
    stable_type: StableType


@attrs.frozen
class SpotPage:
    """One page of :meth:`SpotManager.query`: Ready User and Instance Spots in SpotId
    order (Unicode code points); ``next_after`` is the cursor of the next page (None: the
    last page)."""

    spots: tuple[SpotInfo, ...]
    next_after: str | None


def _encoded_size(info: SpotInfo) -> int:
    """An upper bound of one entry's encoded size (ids as text8, generation u63, RID)."""
    ref = info.spot
    return (
        len(ref.spot_id.value.encode()) + len(ref.mesh_name.value.encode())
        + len(info.stable_type.value.encode()) + 16 + 9 + 8 + 16
    )  # fmt: skip


@final
class SpotManager:
    """Create, GetOrCreate, Find, Query and Close User Spots."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        source: CreateSource[SpotId, SpotCreateResult],
        closer: SpotCloser,
        authority: Authority[SpotId],
        flow: FlowTrace,
        client: SpotClient | None = None,
    ) -> None:
        self._client = client
        self._config = config
        self._node = node
        self._store = store
        self._source = source
        self._closer = closer
        self._authority = authority
        self._flow = flow
        self.id_source: Callable[[], SpotId] = new_user_spot_id
        """The ids ``create(type)`` issues (a lowercase canonical UUID v4 each); tests
        replace it through ``zlink_trio.testing.set_spot_id_source``."""

    # --- direct calls (spec 06 §4, §5) ---------------------------------------------------
    def _direct(self) -> SpotClient:
        if self._client is None:
            raise NotConfigured("this server makes no Spot direct calls")
        return self._client

    def send(self, spot_id: str | SpotId, packet: str, payload: object = b"") -> SpotSendCall:
        """One-way ``packet`` to the Spot ``spot_id`` (bytes or a registered payload
        class); completes once admitted. Options: ``.instance(type=None)`` (cold
        activation of a Missing Instance Spot), ``.in_mesh(name)`` (with ``instance``
        only), ``.timeout(s)`` (the admission). See :mod:`zlink_trio.spots.client`."""
        return self._direct().send(spot_id, packet, payload)

    def request(
        self, spot_id: str | SpotId, packet: str, payload: object = b""
    ) -> SpotRequestCall[bytes | None]:
        """Request ``packet`` of the Spot ``spot_id``: resolve, optional cold activation
        (``.instance(type=None)``, ``.in_mesh(name)``), dispatch and reply within ONE
        deadline (``.timeout(s)``), terminal once; ``.reply_type(cls)`` for a typed
        reply. See :mod:`zlink_trio.spots.client`."""
        return self._direct().request(spot_id, packet, payload)

    # --- create -----------------------------------------------------------------------
    def create(self, stable_type: str | StableType) -> SpotCreateCall:
        """Create a User Spot of ``stable_type`` under a new framework-issued SpotId (a
        lowercase canonical UUID v4). Result: SpotCreated or SpotRejected; an id that is
        taken (an active authority) ends AlreadyExists -- never a second UUID."""
        return SpotCreateCall(
            self._run_issued_create,
            self.id_source(),
            StableType.parse(stable_type),
            exclusive=True,
            default_timeout=self._config.default_create_timeout,
        )

    def get_or_create(self, spot_id: str | SpotId, stable_type: str | StableType) -> SpotCreateCall:
        """SpotExisting (no factory, no callback) when a Ready User Spot of that type has
        ``spot_id``; otherwise like create under ``spot_id``. Concurrent calls converge on
        one reservation and one factory run. The reserved Entry shape
        (``<prefix>-entry-<uuid4>``) is InvalidOperation before anything is reserved; the
        id held by another kind or type is TypeMismatch."""
        return SpotCreateCall(
            self._run_create,
            SpotId.parse(spot_id),
            StableType.parse(stable_type),
            exclusive=False,
            default_timeout=self._config.default_create_timeout,
        )

    async def _refuse_unless_admitting(self) -> None:
        """An expired (fail-stopped) or closing node starts nothing: a typed error at
        once, without a Store call."""
        refused = self._node.admission_error()
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise refused

    async def _run_issued_create(self, call: SpotCreateCall, deadline: float) -> SpotCreateResult:
        """``create(type)``: under an explicit OperationId the id is derived from the
        operation's key, so a re-submission (after it ended, or overlapping it) names the
        same Spot and gets the original terminal; otherwise the id drawn at ``create``."""
        spot_id = call.object_id
        if call.operation is not None:
            me = self._node.identity
            spot_id = user_spot_id_for_operation(
                me.node_rid.value, me.node_generation.value, call.operation.value
            )
        return await self._create(call, spot_id, deadline)

    async def _run_create(self, call: SpotCreateCall, deadline: float) -> SpotCreateResult:
        return await self._create(call, call.object_id, deadline)

    async def _create(
        self, call: SpotCreateCall, spot_id: SpotId, deadline: float
    ) -> SpotCreateResult:
        reserved = reserved_shape_error(spot_id)
        if reserved is not None:
            await trio.lowlevel.checkpoint()
            raise reserved
        await self._refuse_unless_admitting()
        config = self._config
        request = call.creation_request
        if request is not None and len(request) > config.max_request_bytes:
            raise InvalidOperation(
                f"creation request of {len(request)} bytes exceeds {config.max_request_bytes}"
            )
        mesh = choose_mesh(config, call.mesh)
        try:
            return await self._source.run(
                spot_id,
                call.stable_type,
                mesh,
                request,
                deadline,
                exclusive=call.exclusive,
                operation_id=call.operation,
            )
        except TypeMismatch:
            if call.exclusive:
                # create(type)'s own id is taken, by whatever kind or type: the id
                # conflict is the answer (no second UUID is tried).
                raise AlreadyExists(f"spot id {spot_id.value!r} is already in use") from None
            raise

    # --- find and query ---------------------------------------------------------------
    async def find(self, spot_id: str | SpotId) -> SpotRef | None:
        """The SpotRef of the current Ready User or Instance Spot ``spot_id``, or None.
        Starts no creation. An incarnation whose owner's lease expired is reclaimed (one
        fenced CAS) and the answer is None. Takes no timeout of its own."""
        target = SpotId.parse(spot_id)
        await self._refuse_unless_admitting()
        row = await self._authority.read(target)
        if row is None or row.state is not AuthorityState.READY or SpotKind.of(row.kind) is None:
            return None
        if await owner_lost(self._store, row, self._node.identity.node_rid):
            await reclaim_row(
                self._store, row, grace=self._config.reservation_grace, flow=self._flow
            )
            self._authority.forget(target)
            return None
        return spot_ref(row)

    async def query(self, *, after: str | SpotId | None = None, limit: int = 100) -> SpotPage:
        """One page of the current Ready User and Instance Spots, in SpotId order,
        strictly after ``after``: at most ``limit`` (1..1000) entries and 4 MiB encoded.
        Pass the page's ``next_after`` to read on. (No unbounded list exists.)"""
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_QUERY_PAGE
        ):
            raise InvalidArgument(f"limit must be an int in 1..{MAX_QUERY_PAGE}, got {limit!r}")
        cursor = None if after is None else SpotId.parse(after).value
        await self._refuse_unless_admitting()
        rows = await self._store.list_rows(Namespace.SPOT, after=cursor, limit=limit)
        spots: list[SpotInfo] = []
        size = 0
        last: str | None = None
        for row in rows:
            info = _info(row)
            if info is not None:
                entry = _encoded_size(info)
                if size + entry > MAX_QUERY_BYTES:
                    break
                size += entry
                spots.append(info)
            last = row.key.object_id
        more = len(rows) >= limit or (last is not None and last != rows[-1].key.object_id)
        return SpotPage(tuple(spots), last if more else None)

    # --- close ------------------------------------------------------------------------
    async def close(self, spot: SpotRef) -> bool:
        """Close exactly the User Spot incarnation ``spot`` names (spec 06 §7).

        Returns False when that incarnation is already gone, or while it has a current
        Actor membership (admission and authority stay; members are never moved or
        destroyed). An incarnation whose owner's lease expired is ended by reclaiming its
        row: True. Raises InvalidOperation when another generation of the id is current
        (it is never closed instead) or ``spot`` names an Instance Spot (it closes
        itself), Unavailable while it is moving, its owner is unreachable or its row
        changed meanwhile.

        Takes no timeout of its own: the caller's cancel scopes bound it, and a remote
        owner's answer is awaited at most ``default_request_timeout`` within them."""
        if not isinstance(spot, SpotRef):
            raise InvalidOperation("close takes the SpotRef of the incarnation to close")
        await self._refuse_unless_admitting()
        unknown = False
        for _ in range(_RECLAIM_ROUNDS):
            row = await self._authority.read(spot.spot_id)
            if row is None:
                return unknown
            if row.object_generation != spot.object_generation:
                if unknown:
                    return True
                raise InvalidOperation(
                    f"spot {spot.spot_id.value!r} is generation {row.object_generation.value}, "
                    f"not {spot.object_generation.value}"
                )
            if row.kind is not ObjectKind.USER_SPOT:
                raise InvalidOperation(
                    f"spot {spot.spot_id.value!r} is not a User Spot: an Instance Spot closes "
                    "itself (SpotContext.close)"
                )
            if row.state is AuthorityState.CREATING:
                return False
            if not await owner_lost(self._store, row, self._node.identity.node_rid):
                return await self._close_live(spot, row)
            outcome = await try_reclaim(
                self._store, row, grace=self._config.reservation_grace, flow=self._flow
            )
            if outcome is Reclaim.WON:
                self._authority.forget(spot.spot_id)
                return True
            unknown = unknown or outcome is Reclaim.UNKNOWN
        raise Unavailable(
            f"the reclaim of {spot.spot_id.value!r} (its owner's lease expired) did not "
            "settle; retry the close"
        )

    async def _close_live(self, spot: SpotRef, row: AuthorityRow) -> bool:
        if row.relocation is not None and row.relocation.sealed:
            raise Unavailable(f"spot {spot.spot_id.value!r} is sealed for a move")
        fence = CloseFence(row.owner_generation, row.store_version)
        if row.owner.node_rid == self._node.identity.node_rid:
            return await self._closer.close(spot.spot_id, spot.object_generation, fence=fence)
        deadline, caller_bound = call_deadline(self._config.default_request_timeout)
        if caller_bound:
            closed = await yield_to_caller(self._close_remote(spot, row, deadline), deadline)
        else:
            closed = await self._close_remote(spot, row, deadline)
        if closed:
            self._authority.forget(spot.spot_id)
        return closed

    async def _close_remote(self, spot: SpotRef, row: AuthorityRow, deadline: float) -> bool:
        """Command 48 to the owner; its terminal's ``closed`` bool is the answer (never a
        Location row read afterwards)."""
        me = self._node.identity
        owner = row.owner
        reply = await ask_owner(
            self._node,
            PeerAddress(owner.mesh_name, owner.node_rid),
            UserSpotClose(
                correlation=0,
                operation_id=OperationId.new(),
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                spot=spot,
                target_rid=owner.node_rid,
                target_generation=owner.node_generation,
                expected_authority_owner_generation=row.owner_generation,
                expected_store_version=row.store_version,
                timeout_ms=remaining_ms(deadline),
            ),
            deadline,
            name=spot.spot_id.value,
            what="close",
        )
        tail = reply.tail
        if not isinstance(tail, CloseTail):
            raise Unavailable("the close terminal carries no close tail")
        return tail.closed


def _info(row: AuthorityRow) -> SpotInfo | None:
    kind = SpotKind.of(row.kind)
    if kind is None or row.state is not AuthorityState.READY:
        return None
    return SpotInfo(spot_ref(row), kind, row.stable_type)
