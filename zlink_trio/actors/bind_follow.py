"""Message Follow of a bind (spec 02 §5; docs/relocation.md "Message Follow of a bind").

A command 38 that reaches a previous owner of its Actor — the caller's ActorRef names the
location the Actor moved away from — is relayed ONCE per hop over the committed Message
Follow route (``actors/follow.py``): the original request (its OperationId, session
identity, binding generation and deadline) with this node as the source, the session
owner named in the record, the route's target lifecycle and target AuthorityOwnerGeneration
as its fence, ``follow_hops + 1``. The target admits it with the same three checks as
any bind; its terminal comes back here and goes to the original caller (the reply route
is preserved). No Store read, no handler, never a second 38 from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import trio

from ..errors import InvalidOperation, StaleRoute, Unavailable, ZLinkError
from ..ids import ActorId
from ..mesh.api import PeerAddress
from ..objects.durable import run_durable
from ..objects.sinks import failure
from ..wire.codec import evolve
from ..wire.enums import BindAction
from ..wire.records import BoundSessionBind, TerminalReply
from .follow import FollowRoute, FollowRoutes

if TYPE_CHECKING:
    from ..mesh.node import MeshNode
    from .host import ActorHost

__all__ = ["BindFollow"]

_WIRE_MAX_HOPS: Final = 8
"""The hop bound of spec 06 §6 (whatever the configuration says)."""


@final
class BindFollow:
    """The Actor owner's decision whether a 38 is relayed, and the relay itself."""

    __slots__ = ("_host", "_max_hops", "_node", "_routes", "followed")

    def __init__(
        self, *, node: MeshNode, host: ActorHost, routes: FollowRoutes, max_hops: int
    ) -> None:
        self._node = node
        self._host = host
        self._routes = routes
        self._max_hops = min(max_hops, _WIRE_MAX_HOPS)
        self.followed = 0
        """Binds relayed from here (each once)."""

    def route_for(self, record: BoundSessionBind) -> FollowRoute[ActorId] | ZLinkError | None:
        """None: the bind is decided here (the Actor is hosted here, or being committed
        here, or no route exists: the usual checks answer). A route: relay over it. An
        error: the bind's terminal (the route exists but does not fit the bind)."""
        me = self._node.identity
        if record.target_rid != me.node_rid or record.target_node_generation != me.node_generation:
            return None  # another lifecycle: the usual StaleRoute
        actor_id = record.actor_id
        host = self._host
        if host.get(actor_id) is not None or host.has_temporary_queue(actor_id):
            return None  # hosted (Ready, sealed: the usual checks) or pre-commit here
        route = self._routes.lookup(actor_id)
        if route is None:
            return None  # no route, or it expired: Unavailable
        if record.object_generation != route.object_generation:
            return InvalidOperation(
                f"actor {actor_id.value!r}: generation {record.object_generation.value} is "
                "not the incarnation that moved away"
            )
        expected = record.authority_owner_generation
        if expected is not None and expected != route.source_owner_generation:
            return StaleRoute("the bind's owner generation is not the one that moved away")
        if record.follow_hops >= self._max_hops:
            return Unavailable("the Message Follow chain of the bind is longer than its bound")
        return route

    def forwarded(self, record: BoundSessionBind, route: FollowRoute[ActorId]) -> BoundSessionBind:
        """The relayed 38: this node as its source, the session owner carried along, the
        route's target fence, one hop more; everything else unchanged."""
        me = self._node.identity
        owner_rid, owner_generation = record.session_owner
        return evolve(
            record,
            source_rid=me.node_rid,
            source_generation=me.node_generation,
            target_rid=route.target_rid,
            target_node_generation=route.target_generation,
            authority_owner_generation=route.target_owner_generation,
            owner_lease_generation=route.target_lease_generation,
            follow_hops=record.follow_hops + 1,
            session_owner_rid=owner_rid,
            session_owner_generation=owner_generation,
        )

    async def relay(self, record: BoundSessionBind, route: FollowRoute[ActorId]) -> TerminalReply:
        """The relayed 38 and its terminal: a durable operation under the caller's
        OperationId (a broken link replays it; the target's retained terminal answers a
        replay), within the bind's own deadline; Unavailable when the target cannot be
        reached, DeadlineExceeded when it was reached but did not answer in time."""
        forwarded = self.forwarded(record, route)
        peer = PeerAddress(route.mesh_name, route.target_rid)
        self.followed += 1
        self._routes.followed += 1
        deadline = trio.current_time() + record.timeout_ms / 1000
        try:
            return await run_durable(
                self._node,
                peer,
                lambda timeout_ms: evolve(forwarded, timeout_ms=timeout_ms),
                deadline,
                cleanup=record.action is not BindAction.BIND,
            )
        except ZLinkError as exc:
            return failure(exc)
