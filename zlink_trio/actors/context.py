"""The Actor Context: what a factory receives and an Actor exposes unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio

from ..errors import InvalidOperation, NotConfigured, SessionNotBound, Unavailable
from ..ids import MAX_ID_BYTES, ActorId, MeshName, ObjectGeneration, SpotId, check_text_id
from ..objects.timers import Timers
from ..wire.payloads import TypedPayload
from .join import JoinCall

if TYPE_CHECKING:
    from ..spots.client import SpotClient
    from .bindings import ActorBindings
    from .client import ActorClient
    from .hosted import HostedActor
    from .join import JoinRegistrar

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
        # (check_text_id's own first test, inline: a valid ASCII name needs no call)
        if type(packet) is str and packet.isascii() and 0 < len(packet) <= MAX_ID_BYTES:
            name = packet
        else:
            name = check_text_id(packet, "packet name")
        value: object = payload
        if type(payload) is not bytes and not isinstance(payload, bytearray | memoryview):
            codec = context._client._payloads.of(payload)
            if codec is None:
                await trio.lowlevel.checkpoint()
                raise InvalidOperation(
                    "payload must be bytes or an instance of a registered payload class, "
                    f"got {type(payload).__name__}"
                )
            value = TypedPayload(codec, payload)
        # (the slots, not the properties: no two Python calls per push)
        await port.push(context._actor_id, context._generation, name, value)

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
class _Retired:
    """A retired Context's Spot object (see ``ActorContext._spot``)."""

    __slots__ = ("spot",)

    def __init__(self, spot: object) -> None:
        self.spot = spot


@final
class ActorContext:
    """Identity of one Actor activation plus the capabilities its handlers use.

    Built by the framework BEFORE the factory runs; the factory receives only this object
    and the Actor must expose it as ``actor.context`` unchanged, otherwise the staging
    Actor is never published Ready. The fields are read-only for the application.
    """

    __slots__ = (
        "_actor_id",
        "_client",
        "_generation",
        "_hosted",
        "_mesh_name",
        "_session",
        "_spot",
        "_spot_id",
    )

    def __init__(
        self,
        actor_id: ActorId,
        object_generation: ObjectGeneration,
        mesh_name: MeshName,
        spot_id: SpotId | None,
        client: ActorClient,
        joins: JoinRegistrar | None = None,
    ) -> None:
        self._actor_id = actor_id
        self._generation = object_generation
        self._mesh_name = mesh_name
        self._spot_id = spot_id
        self._client = client
        self._hosted: HostedActor | None = None
        """The hosted activation, once published (set by the Actor owner)."""
        # The Join registrar is the client's (the runtime gives both the same one), so an
        # idle Actor's Context keeps no slot for it.
        assert joins is None or joins is client.barriers, "the Join registrar is the client's"
        self._spot: object = None
        """The SpotWide Spot's object, or None; wrapped in :class:`_Retired` once the
        Context was retired (one slot for both)."""
        self._session: BoundSession | None = None
        """The capability :attr:`session` made last (it holds nothing but the port and
        this Context: made again only if the port changes)."""

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
    def spot(self) -> object:
        """The containing Spot's application object when that Spot is SpotWide (the
        Actor's turns share its gate, so the Spot's state may be used inside them); None
        in an Entry Spot or a PerActor Spot, where Spot state is reached only through an
        explicit Spot send/request (04 §3.1)."""
        spot = self._spot
        return spot.spot if type(spot) is _Retired else spot

    @property
    def session(self) -> BoundSession:
        """The bound-session capability (push / close to the current binding)."""
        port = self._client.bindings
        if port is None:
            return _UNBOUND
        session = self._session
        if session is None or session._port is not port:
            session = self._session = BoundSession(port, self)
        return session

    @property
    def actors(self) -> ActorClient:
        """Send to / request other Actors by ActorId (Actor-to-Actor calls). Unavailable
        once the Context was retired (the Actor moved to another node by a Join)."""
        if type(self._spot) is _Retired:
            raise Unavailable(
                f"actor {self._actor_id.value!r} moved to another node: its old Context "
                "sends nothing (it is never forwarded to the new activation)"
            )
        return self._client

    @property
    def timers(self) -> Timers:
        """The Actor's framework timers: ``once`` / ``every`` / ``cancel`` from its own
        handlers; each tick runs its ``@on_timer(name)`` handler as a turn of the Actor."""
        return Timers(self._hosted)

    @property
    def spots(self) -> SpotClient:
        """Send to / request Spots by SpotId (spec 04 §3.1: the explicit Spot call through
        which an Actor reads or changes Spot-owned state; it runs on the target Spot's
        turn, never on this Actor's).

        Raises:
            NotConfigured: this server makes no Spot direct calls.
        """
        spots = self._client.spots
        if spots is None:
            raise NotConfigured("this server makes no Spot direct calls")
        return spots

    @property
    def retired(self) -> bool:
        """True once the Actor moved to another node (a cross-node Join committed): this
        Context's identity stays readable, every new call through it is Unavailable."""
        return type(self._spot) is _Retired

    def join_spot(self, spot_id: str | SpotId, request: object = b"") -> JoinCall:
        """A Join of this Actor to the User Spot ``spot_id``: set ``.timeout(s)`` if
        needed, then ``.defer()`` (synchronous: it runs after this handler ends normally;
        the result comes to the type's ``@on_join_complete`` method). ``request`` (bytes
        or a registered payload, at most 1 MiB) goes to the Spot's JOIN callback."""
        return JoinCall.to_spot(self._client.barriers, self, spot_id, request)

    def join_entry_spot(
        self, entry_spot_id: str | SpotId | None = None, request: object = b""
    ) -> JoinCall:
        """A Join of this Actor to an Entry Spot: by default the Entry Spot of its current
        node (leaving its User Spot; in the Entry Spot already: Accepted, nothing
        changes), or the Entry Spot ``entry_spot_id`` of another node (the Actor moves
        there). Then ``.defer()`` as for :meth:`join_spot`."""
        return JoinCall.to_entry(self._client.barriers, self, entry_spot_id, request)

    def _move_to(self, spot_id: SpotId, spot: object = None) -> None:
        """The membership commit of a same-node Join (the framework only): the SpotId,
        and the SpotWide Spot's object (None otherwise)."""
        self._spot_id = spot_id
        self._spot = _Retired(spot) if type(self._spot) is _Retired else spot

    def _retire(self) -> None:
        """The Actor moved to another node (the framework only)."""
        if type(self._spot) is not _Retired:
            self._spot = _Retired(self._spot)

    def __repr__(self) -> str:
        return (
            f"ActorContext({self._actor_id.value!r}, gen={self._generation.value}, "
            f"mesh={self._mesh_name.value!r}, spot={self._spot_id and self._spot_id.value!r})"
        )
