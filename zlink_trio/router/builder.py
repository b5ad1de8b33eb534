"""Assembling a router (spec 10 §11.2): :class:`SessionRouterBuilder` and
:func:`open_session_router`.

Set exactly one of ``session_opener`` (gets the caller's OpenAttributes) and
``session_factory`` (stateless, never sees them). SINGLE_NODE fills every SPI left out with
its in-memory implementation and needs no node id; DISTRIBUTED requires every SPI and a node
id, and :meth:`SessionRouterBuilder.build` fails otherwise. The builder takes the record
store and the lease store separately and assembles a new SessionStore on every build, so two
routers never share one. The router's internal parts (lease renewer, handle cache, event
publisher) are not injectable.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, final

import attrs

from ..errors import ConfigurationError
from .application import (
    LiveSession,
    LiveSessionFactory,
    LiveSessionOpener,
    OpenRequest,
    SessionMetrics,
)
from .config import SessionRouterConfig
from .idempotency import IdempotencyTtls
from .ids import NodeId
from .memory import (
    MemoryIdempotencyStore,
    MemorySessionInbox,
    MemorySessionLeaseStore,
    MemorySessionRecordStore,
    MemorySessionSignalBus,
)
from .router import RouterParts, SessionRouter, serve_session_router
from .session_store import SessionStore
from .spi import (
    IdempotencyStore,
    SessionInbox,
    SessionLeaseStore,
    SessionRecordStore,
    SessionSignalBus,
)
from .values import DeploymentMode

__all__ = ["SessionRouterBuilder", "open_session_router"]


@final
class _FactoryOpener:
    """The lambda-friendly path: a stateless factory that ignores OpenAttributes."""

    def __init__(self, factory: LiveSessionFactory) -> None:
        self._factory = factory

    async def open(self, request: OpenRequest) -> LiveSession:
        return await self._factory(request.session_id, request.agent_ref, request.options)


def _opt(t: Any) -> Any:
    return attrs.validators.optional(attrs.validators.instance_of(t))


@attrs.frozen(kw_only=True)
class SessionRouterBuilder:
    """Everything one node's router needs. Immutable: derive variants with ``attrs.evolve``."""

    mode: DeploymentMode = attrs.field(
        default=DeploymentMode.SINGLE_NODE, validator=attrs.validators.instance_of(DeploymentMode)
    )
    node_id: NodeId | None = attrs.field(default=None, validator=_opt(NodeId))
    config: SessionRouterConfig = attrs.field(
        factory=SessionRouterConfig, validator=attrs.validators.instance_of(SessionRouterConfig)
    )
    record_store: SessionRecordStore | None = attrs.field(
        default=None, validator=_opt(SessionRecordStore)
    )
    lease_store: SessionLeaseStore | None = attrs.field(
        default=None, validator=_opt(SessionLeaseStore)
    )
    inbox: SessionInbox | None = attrs.field(default=None, validator=_opt(SessionInbox))
    signal_bus: SessionSignalBus | None = attrs.field(
        default=None, validator=_opt(SessionSignalBus)
    )
    idempotency_store: IdempotencyStore | None = attrs.field(
        default=None, validator=_opt(IdempotencyStore)
    )
    session_opener: LiveSessionOpener | None = None
    session_factory: LiveSessionFactory | None = None
    metrics: SessionMetrics = attrs.field(
        factory=SessionMetrics, validator=attrs.validators.instance_of(SessionMetrics)
    )

    def build(self) -> RouterParts:
        """Validate and assemble (a fresh SessionStore each time). Raises
        :class:`~zlink_trio.errors.ConfigurationError`."""
        if (self.session_opener is None) == (self.session_factory is None):
            raise ConfigurationError("set exactly one of session_opener and session_factory")
        opener: LiveSessionOpener = (
            self.session_opener
            if self.session_opener is not None
            else _FactoryOpener(self.session_factory)  # type: ignore[arg-type]
        )
        spis = {
            "record_store": self.record_store,
            "lease_store": self.lease_store,
            "inbox": self.inbox,
            "signal_bus": self.signal_bus,
            "idempotency_store": self.idempotency_store,
        }
        if self.mode is DeploymentMode.DISTRIBUTED:
            missing = [name for name, spi in spis.items() if spi is None]
            if self.node_id is None:
                missing.append("node_id")
            if missing:
                raise ConfigurationError(
                    "DISTRIBUTED needs every SPI and a node id (in-memory SPIs across nodes "
                    f"are a silent split-brain); missing: {', '.join(missing)}"
                )
        config = self.config
        node = self.node_id if self.node_id is not None else NodeId(f"node-{uuid.uuid4().hex}")
        records = self.record_store or MemorySessionRecordStore()
        leases = self.lease_store or MemorySessionLeaseStore()
        idempotency = self.idempotency_store or MemoryIdempotencyStore(
            ttls=IdempotencyTtls(
                primary=config.idempotency_primary_ttl,
                secondary=config.idempotency_secondary_ttl,
                forward=config.idempotency_forward_ttl,
            )
        )
        return RouterParts(
            config=config,
            node_id=node,
            store=SessionStore(
                records=records, leases=leases, node_id=node, lease_ttl=config.lock_lease
            ),
            inbox=self.inbox or MemorySessionInbox(),
            bus=self.signal_bus or MemorySessionSignalBus(),
            idempotency=idempotency,
            opener=opener,
            metrics=self.metrics,
        )


@asynccontextmanager
async def open_session_router(builder: SessionRouterBuilder) -> AsyncIterator[SessionRouter]:
    """Build and serve a router for the duration of the block; leaving it closes the router
    gracefully (waiting ``release_interrupt_timeout`` for running turns)."""
    parts = builder.build()
    async with serve_session_router(parts) as router:
        yield router
