"""The Actor Context: what a factory receives and an Actor exposes unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio

from ..errors import InvalidOperation, SessionNotBound
from ..ids import ActorId, MeshName, ObjectGeneration, SpotId, check_text_id
from ..objects.timers import Timers
from ..wire.payloads import TypedPayload

if TYPE_CHECKING:
    from .bindings import ActorBindings
    from .client import ActorClient
    from .hosted import HostedActor

__all__ = ["ActorContext", "BoundSession"]


@final
class BoundSession:
    """The Actor's bound-session capability: one-way push and close to the CURRENT bound
    session only. Without a binding both raise SessionNotBound (an InvalidOperation:
    bind first, then the same call succeeds). There is no global proxy to another
    session."""

    __slots__ = ("_context", "_port")

    def __init__(self, port: ActorBindings | None, context: ActorContext | None) -> None:
        self._port = port
        self._context = context

    @property
    def bound(self) -> bool:
        """Whether this Actor incarnation has a current binding now."""
        port, context = self._port, self._context
        return (
            port is not None
            and context is not None
            and port.bound(context.actor_id, context.object_generation)
        )

    async def push(self, packet: str, payload: object = b"") -> None:
        """One-way ``packet`` to the client of the current binding (``payload``: bytes or
        a registered payload object); completes once admitted (spec 02 §5: no ack, no
        retransmit, no delivery guarantee).

        Raises:
            SessionNotBound: no current binding.
            InvalidOperation: bad packet name or payload.
            Unavailable: the session owner cannot be reached now.
        """
        port, context = self._port, self._context
        if port is None or context is None:
            await trio.lowlevel.checkpoint()
            raise SessionNotBound("the Actor has no bound session")
        name = check_text_id(packet, "packet name")
        value: object = payload
        if not isinstance(payload, bytes | bytearray | memoryview):
            codec = context._client._payloads.of(payload)
            if codec is None:
                await trio.lowlevel.checkpoint()
                raise InvalidOperation(
                    "payload must be bytes or an instance of a registered payload class, "
                    f"got {type(payload).__name__}"
                )
            value = TypedPayload(codec, payload)
        await port.push(context.actor_id, context.object_generation, name, value)

    async def close(self) -> None:
        """Ask for the physical connection of the current binding to close (one-way).

        Raises:
            SessionNotBound: no current binding.
        """
        port, context = self._port, self._context
        if port is None or context is None:
            await trio.lowlevel.checkpoint()
            raise SessionNotBound("the Actor has no bound session")
        await port.close(context.actor_id, context.object_generation)


_UNBOUND = BoundSession(None, None)


@final
class ActorContext:
    """Identity of one Actor activation plus the capabilities its handlers use.

    Built by the framework BEFORE the factory runs; the factory receives only this object
    and the Actor must expose it as ``actor.context`` unchanged, otherwise the staging
    Actor is never published Ready. The fields are read-only for the application.
    """

    __slots__ = ("_actor_id", "_client", "_generation", "_hosted", "_mesh_name", "_spot_id")

    def __init__(
        self,
        actor_id: ActorId,
        object_generation: ObjectGeneration,
        mesh_name: MeshName,
        spot_id: SpotId | None,
        client: ActorClient,
    ) -> None:
        self._actor_id = actor_id
        self._generation = object_generation
        self._mesh_name = mesh_name
        self._spot_id = spot_id
        self._client = client
        self._hosted: HostedActor | None = None
        """The hosted activation, once published (set by the Actor owner)."""

    @property
    def actor_id(self) -> ActorId:
        return self._actor_id

    @property
    def object_generation(self) -> ObjectGeneration:
        return self._generation

    @property
    def mesh_name(self) -> MeshName:
        """The mesh of the Actor's current owner."""
        return self._mesh_name

    @property
    def spot_id(self) -> SpotId | None:
        """The Actor's current Spot (its Entry Spot or a User Spot), None while moving."""
        return self._spot_id

    @property
    def session(self) -> BoundSession:
        """The bound-session capability (push / close to the current binding)."""
        port = self._client.bindings
        return _UNBOUND if port is None else BoundSession(port, self)

    @property
    def actors(self) -> ActorClient:
        """Send to / request other Actors by ActorId (Actor-to-Actor calls)."""
        return self._client

    @property
    def timers(self) -> Timers:
        """The Actor's framework timers: ``once`` / ``every`` / ``cancel`` from its own
        handlers; each tick runs its ``@on_timer(name)`` handler as a turn of the Actor."""
        return Timers(self._hosted)

    def __repr__(self) -> str:
        return (
            f"ActorContext({self._actor_id.value!r}, gen={self._generation.value}, "
            f"mesh={self._mesh_name.value!r}, spot={self._spot_id and self._spot_id.value!r})"
        )
