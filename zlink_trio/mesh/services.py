"""The hook through which extra inbound services plug into a server's MeshNode (test
plumbing and benchmarks; the roles of a node -- Spot owner, Actor owner -- are started
explicitly by the composition root, :mod:`zlink_trio._runtime`).

A service is an async function ``serve(context, *, task_status)``. The composition root
starts each one with ``await nursery.start(service, context)`` in the server's nursery,
after the roles, AFTER the Store and the engine are open and BEFORE the MeshNode binds,
registers or accepts anything. The context holds only mesh-level values (no application
registry). A service:

1. registers its inbound commands with ``context.node.on(command, handler)`` (only
   possible before the node starts);
2. opens its own child nursery for its tasks (so they live exactly as long as the
   service) and calls ``task_status.started(...)``;
3. runs until cancelled. At exit the server stops admission, lets accepted turns finish
   (``drain_timeout``), cancels the roles and the services, closes the engine, releases
   the lifecycle's rows, then closes the node (descriptor removed, goodbyes) and the
   Store (``zlink_trio._runtime.DRAIN_STEPS``).

Example::

    async def serve_echo(context: ServiceContext, *, task_status=trio.TASK_STATUS_IGNORED):
        async with trio.open_nursery() as nursery:
            async def on_send(peer, record):
                await lane.submit(record)            # admit only; never run app code inline
            context.node.on(Command.ACTOR_SEND, on_send)
            task_status.started()
            await trio.sleep_forever()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from ..config import ServerConfig
from ..store.api import LocationStore

if TYPE_CHECKING:
    from ..engine import Engine
    from .node import MeshNode

__all__ = ["RuntimeService", "ServiceContext"]


@attrs.frozen
class ServiceContext:
    """What a runtime service gets from the server."""

    config: ServerConfig
    store: LocationStore | None
    engine: Engine
    node: MeshNode


class RuntimeService(Protocol):
    async def __call__(
        self, context: ServiceContext, *, task_status: trio.TaskStatus[None] = ...
    ) -> None: ...
