"""``server.actors``: the Actor manager (spec 04 §6) and messaging entry points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import trio

from ..config import ServerConfig
from ..errors import InvalidOperation, Unavailable
from ..ids import ActorId, ActorRef, OperationId, StableType
from ..mesh.api import MeshNodeApi, PeerAddress
from ..objects import create_call
from ..objects.control import ask_owner
from ..objects.create_source import CreateSource
from ..objects.durable import remaining_ms
from ..objects.owner_loss import Reclaim, owner_lost, reclaim_row, try_reclaim
from ..objects.placement import choose_mesh
from ..observe import FlowTrace
from ..store.api import AuthorityRow, AuthorityState, LocationStore, OwnerFence
from ..wire.records import ActorDestroy
from ..wire.tails import DestroyTail
from .authority import Authority
from .calls import call_deadline, yield_to_caller
from .client import ActorClient, RequestCall, SendCall
from .results import ActorCreateResult

if TYPE_CHECKING:
    from ..objects.destroy import Destroyer
    from .hosted import HostedActor

__all__ = ["ActorManager", "CreateCall"]

_RECLAIM_ROUNDS: Final = 3
"""Reads (then reclaim CASes) a destroy of a dead owner's incarnation makes at most: a
lost CAS means another reclaimer ended it (the next read shows it gone)."""

_STABLE_TYPES_MAX: Final = 256
"""Parsed stable type names kept (a node registers a few; more are cleared and re-parsed)."""

CreateCall = create_call.CreateCall[ActorId, ActorCreateResult]
"""``create(...)`` / ``get_or_create(...)`` of an Actor (the shared fluent create call)."""


@final
class ActorManager:
    """Create, GetOrCreate, Find and Destroy Actors; send to and request them by ActorId."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        source: CreateSource[ActorId, ActorCreateResult],
        destroyer: Destroyer[ActorId, HostedActor],
        client: ActorClient,
        authority: Authority,
        flow: FlowTrace,
    ) -> None:
        self._config = config
        self._flow = flow
        self._authority = authority
        self._node = node
        self._store = store
        self._source = source
        self._destroyer = destroyer
        self._client = client
        self._stable_types: dict[str, StableType] = {}
        """Parsed stable type names: every Actor created with one name shares one value
        (its row, its hash), instead of a StableType per Actor."""

    def _stable_type(self, stable_type: str | StableType) -> StableType:
        if type(stable_type) is not str:
            return StableType.parse(stable_type)
        parsed = self._stable_types.get(stable_type)
        if parsed is None:
            parsed = StableType.parse(stable_type)
            if len(self._stable_types) >= _STABLE_TYPES_MAX:
                self._stable_types.clear()
            self._stable_types[stable_type] = parsed
        return parsed

    # --- lifecycle --------------------------------------------------------------------
    def create(self, actor_id: str | ActorId, stable_type: str | StableType) -> CreateCall:
        """Exclusive create: AlreadyExists if a Ready Actor of that type exists,
        TypeMismatch for another type. Result: Created or Rejected."""
        return self._create_call(actor_id, stable_type, exclusive=True)

    def get_or_create(self, actor_id: str | ActorId, stable_type: str | StableType) -> CreateCall:
        """Existing (no factory, no callback) when a Ready Actor of that type exists,
        otherwise like create. Concurrent calls converge on one factory run."""
        return self._create_call(actor_id, stable_type, exclusive=False)

    def _create_call(
        self, actor_id: str | ActorId, stable_type: str | StableType, *, exclusive: bool
    ) -> CreateCall:
        # The class itself, not the subscripted alias (whose call goes through typing).
        return create_call.CreateCall(
            self._run_create,
            ActorId.parse(actor_id),
            self._stable_type(stable_type),
            exclusive=exclusive,
            default_timeout=self._config.default_create_timeout,
        )

    async def _refuse_unless_admitting(self) -> None:
        """An expired (fail-stopped) or closing node starts nothing: a typed error at
        once, without a Store call (Unavailable / ShuttingDown, see MeshNodeApi)."""
        refused = self._node.admission_error()
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise refused

    async def _run_create(self, call: CreateCall, deadline: float) -> ActorCreateResult:
        await self._refuse_unless_admitting()
        config = self._config
        request = call.creation_request
        if request is not None and len(request) > config.max_request_bytes:
            raise InvalidOperation(
                f"creation request of {len(request)} bytes exceeds {config.max_request_bytes}"
            )
        mesh = choose_mesh(config, call.mesh)
        return await self._source.run(
            call.object_id,
            call.stable_type,
            mesh,
            request,
            deadline,
            exclusive=call.exclusive,
            operation_id=call.operation,
        )

    async def find(self, actor_id: str | ActorId) -> ActorRef | None:
        """The ActorRef of the current Ready incarnation, or None. Starts no creation.

        Never returns an incarnation whose owner lease expired: a Ready row owned by
        another node whose lease is no longer current (by store time) is reclaimed (one
        fenced CAS; the incarnation ended with its owner) and the answer is None.

        Takes no timeout of its own (spec 04 §6.2): the caller's cancel scopes bound it."""
        target = ActorId.parse(actor_id)
        await self._refuse_unless_admitting()
        row = await self._authority.read(target)
        if row is None or row.state is not AuthorityState.READY:
            return None
        if await owner_lost(self._store, row, self._node.identity.node_rid):
            await reclaim_row(
                self._store, row, grace=self._config.reservation_grace, flow=self._flow
            )
            self._authority.forget(target)
            return None
        return ActorRef(target, row.object_generation, row.owner.mesh_name, row.owner.node_rid)

    async def destroy(self, actor: ActorRef) -> bool:
        """Destroy exactly the incarnation ``actor`` names.

        Returns False when that incarnation is already gone. An incarnation whose owner's
        lease expired is ended by reclaiming its row (one fenced CAS): True, without
        asking the dead owner. Raises InvalidOperation when another generation of the id
        is current (it is never destroyed instead), and Unavailable while the Actor is
        sealed for a move or its owner is unreachable.

        Takes no timeout of its own (spec 04 §6.2): the caller's cancel scopes bound it,
        and a remote owner's answer is awaited at most ``default_request_timeout`` within
        them; the owner is told that deadline and does not start a destroy after it
        (DeadlineExceeded). A destroy that started finishes even if its caller is gone.
        """
        if not isinstance(actor, ActorRef):
            raise InvalidOperation("destroy takes the ActorRef of the incarnation to destroy")
        await self._refuse_unless_admitting()
        unknown = False  # a reclaim of ours whose outcome is unknown (it may have applied)
        for _ in range(_RECLAIM_ROUNDS):
            row = await self._authority.read(actor.actor_id)
            if row is None:
                return unknown
            if row.object_generation != actor.object_generation:
                if unknown:
                    return True  # ours applied, and a new incarnation came since
                raise InvalidOperation(
                    f"actor {actor.actor_id.value!r} is generation "
                    f"{row.object_generation.value}, not {actor.object_generation.value}"
                )
            if row.state is AuthorityState.CREATING:
                return False
            if not await owner_lost(self._store, row, self._node.identity.node_rid):
                return await self._destroy_live(actor, row)
            outcome = await try_reclaim(
                self._store, row, grace=self._config.reservation_grace, flow=self._flow
            )
            if outcome is Reclaim.WON:
                self._authority.forget(actor.actor_id)
                return True
            unknown = unknown or outcome is Reclaim.UNKNOWN
            # MOVED (another reclaimer won) or UNKNOWN: the next read settles it.
        raise Unavailable(
            f"the reclaim of {actor.actor_id.value!r} (its owner's lease expired) did not "
            "settle; retry the destroy"
        )

    async def _destroy_live(self, actor: ActorRef, row: AuthorityRow) -> bool:
        """Destroy through the incarnation's live owner (this node, or a peer)."""
        if row.relocation is not None and row.relocation.sealed:
            raise Unavailable(f"actor {actor.actor_id.value!r} is sealed for a move")
        me = self._node.identity
        if row.owner.node_rid == me.node_rid:
            return await self._destroyer.destroy(actor.actor_id, actor.object_generation)
        destroyed = await self._destroy_remote(actor, row.owner)
        if destroyed:
            self._authority.forget(actor.actor_id)
        return destroyed

    async def _destroy_remote(self, actor: ActorRef, owner: OwnerFence) -> bool:
        """Ask the owner; its answer within ``min(now + default_request_timeout, the
        caller's effective deadline)`` -- the deadline the owner is told, too. Every
        transport failure is the documented ``Unavailable``, never a mesh-internal
        error."""
        deadline, caller_bound = call_deadline(self._config.default_request_timeout)
        if caller_bound:
            return await yield_to_caller(self._ask_owner(actor, owner, deadline), deadline)
        return await self._ask_owner(actor, owner, deadline)

    async def _ask_owner(self, actor: ActorRef, owner: OwnerFence, deadline: float) -> bool:
        me = self._node.identity
        reply = await ask_owner(
            self._node,
            PeerAddress(owner.mesh_name, owner.node_rid),
            ActorDestroy(
                correlation=0,
                operation_id=OperationId.new(),
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                actor_id=actor.actor_id,
                object_generation=actor.object_generation,
                target_rid=owner.node_rid,
                target_generation=owner.node_generation,
                timeout_ms=remaining_ms(deadline),
            ),
            deadline,
            name=actor.actor_id.value,
            what="destroy",
        )
        tail = reply.tail
        if not isinstance(tail, DestroyTail):
            raise Unavailable("the destroy terminal carries no destroy tail")
        return tail.destroyed

    # --- messaging ----------------------------------------------------------------------
    def send(self, actor_id: str | ActorId, packet: str, payload: object = b"") -> SendCall:
        """One-way send to the current Ready incarnation of ``actor_id`` (``payload``:
        bytes or an instance of a registered payload class)."""
        return self._client.send(actor_id, packet, payload)

    def request(
        self, actor_id: str | ActorId, packet: str, payload: object = b""
    ) -> RequestCall[bytes | None]:
        """Request to the current Ready incarnation of ``actor_id``; state a typed reply
        with ``.reply_type(cls)``."""
        return self._client.request(actor_id, packet, payload)

    @property
    def client(self) -> ActorClient:
        return self._client
