"""What a User Spot handler needs to Defer the Join of one of its member Actors (spec 04
§3.1): the Actor runtime's registrar, seen from below through this protocol (the Spot
layer does not import the Actor layer; the runtime sets :attr:`SpotHost.joins`)."""

from __future__ import annotations

from typing import Any, Protocol, Self

import trio

from ..ids import ActorId, OperationId, SpotId

__all__ = ["DeferredJoin", "MemberJoins"]


class DeferredJoin(Protocol):
    """``context.join_spot(actor_id, ...)`` of a Spot: ``.timeout(s)`` once, then the
    synchronous :meth:`defer` (the Actor API's ``JoinCall``)."""

    def timeout(self, seconds: float) -> Self: ...

    def defer(self) -> OperationId: ...


class MemberJoins(Protocol):
    """The registrar of deferred Joins on this node (``actors.join.JoinRegistrar``)."""

    def open_scope(self, task: trio.lowlevel.Task | None = None) -> Any:
        """A registration scope for the handler whose turn runs in ``task``."""
        ...

    def member_call(
        self,
        scope: Any,
        spot_id: SpotId,
        actor_id: ActorId,
        target: SpotId | None,
        *,
        entry: bool,
        request: object = b"",
    ) -> DeferredJoin:
        """The Join of member ``actor_id`` of ``spot_id`` (registered at ``defer()`` in
        ``scope``; None: outside a handler, ``defer()`` is InvalidOperation)."""
        ...

    def close(self, scope: Any, *, ok: bool) -> None:
        """The handler of ``scope`` ended (``ok``: normally): activate or discard."""
        ...
