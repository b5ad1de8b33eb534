"""The Spot Context: what a Spot factory receives and a Spot exposes unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, final

from ..errors import InvalidOperation, NotConfigured
from ..ids import ActorId, MeshName, ObjectGeneration, SpotId, StableType
from ..objects.timers import Timers
from .spot_kind import SpotKind

if TYPE_CHECKING:
    from .client import SpotClient
    from .hosted import HostedSpot
    from .members import DeferredJoin

__all__ = ["SpotContext"]


@final
class SpotContext:
    """Identity of one User or Instance Spot activation plus the capabilities its
    handlers use.

    Built by the framework BEFORE the factory runs; the factory receives only this object
    and the Spot must expose it as ``spot.context`` unchanged, otherwise the staging Spot
    is never published Ready. The fields are read-only for the application.
    """

    __slots__ = (
        "_client",
        "_close",
        "_generation",
        "_hosted",
        "_kind",
        "_mesh_name",
        "_spot_id",
        "_stable_type",
    )

    def __init__(
        self,
        spot_id: SpotId,
        object_generation: ObjectGeneration,
        kind: SpotKind,
        stable_type: StableType,
        mesh_name: MeshName,
        close: Callable[[], None],
        client: SpotClient | None = None,
    ) -> None:
        self._client = client
        self._spot_id = spot_id
        self._generation = object_generation
        self._kind = kind
        self._stable_type = stable_type
        self._mesh_name = mesh_name
        self._close = close
        self._hosted: HostedSpot | None = None
        """The hosted activation (set by it: the factory already runs in its lane)."""

    @property
    def spot_id(self) -> SpotId:
        return self._spot_id

    @property
    def object_generation(self) -> ObjectGeneration:
        return self._generation

    @property
    def kind(self) -> SpotKind:
        return self._kind

    @property
    def stable_type(self) -> StableType:
        return self._stable_type

    @property
    def mesh_name(self) -> MeshName:
        """The mesh of the Spot's current owner."""
        return self._mesh_name

    @property
    def timers(self) -> Timers:
        """The Spot's framework timers: ``once`` / ``every`` / ``cancel`` from its own
        turns (handlers, timer handlers, its factory and lifecycle callbacks); each tick
        runs its ``@on_timer(name)`` handler as a turn of the Spot's application queue.
        Registered while the Spot is staging, they fire from its publication on. On a
        relocation target the timers the Spot had at the source are restored: what its
        factory registers there again is replaced by them (never held twice)."""
        return Timers(self._hosted)

    @property
    def spots(self) -> SpotClient:
        """Send to / request other Spots by SpotId from this Spot's handlers (the calls
        carry this Spot as their source Spot). Its Instance intent may cold-activate an
        Instance Spot (spec 06 §4).

        Raises:
            NotConfigured: this server makes no Spot direct calls.
        """
        if self._client is None:
            raise NotConfigured("this server makes no Spot direct calls")
        return self._client.from_spot(self._spot_id)

    @property
    def join_allowed(self) -> bool:
        """Whether this Spot's handlers may Defer a Join (spec 04 §3.1): User Spots yes,
        Instance Spot handlers never (InvalidOperation)."""
        return self._kind is SpotKind.USER

    def join_spot(self, actor_id: object, spot_id: object, request: object = b"") -> DeferredJoin:
        """The Join of this User Spot's local member ``actor_id`` to the User Spot
        ``spot_id``, from one of this Spot's request, packet or timer handlers (spec 04
        §3.1): ``.timeout(s)`` at most once, then the synchronous ``.defer()``, under the
        rules of the Actor API (``ActorContext.join_spot``): at most 64 per handler, a
        request of at most 1 MiB and 8 MiB together (ConfigurationError), the default 5 s
        timeout. The member's barrier holds its messages from ``defer()`` on; the Join
        runs when this handler ended normally (an exception discards it); its result
        reaches the member's ``@on_join_complete``.

        Raises:
            InvalidOperation: an Instance Spot (no members); an Entry Spot id (use
                :meth:`join_entry_spot`). At ``defer()``: outside a handler of this Spot
                or its own task, ``actor_id`` not a local member of this Spot.
        """
        hosted = self._live()
        target = _spot_id(spot_id)
        if target.is_reserved_entry_shape:
            raise InvalidOperation(
                f"{target.value!r} is an Entry Spot id: use join_entry_spot() for Entry Spots"
            )
        return hosted.member_join(_actor_id(actor_id), target, entry=False, request=request)

    def join_entry_spot(
        self, actor_id: object, entry_spot_id: object = None, request: object = b""
    ) -> DeferredJoin:
        """The Join of this User Spot's local member ``actor_id`` to an Entry Spot (None:
        the Entry Spot of its node and mesh) -- its leave. As :meth:`join_spot`."""
        hosted = self._live()
        target = None if entry_spot_id is None else _spot_id(entry_spot_id)
        if target is not None and not target.is_reserved_entry_shape:
            raise InvalidOperation(f"{target.value!r} is not an Entry Spot id: use join_spot()")
        return hosted.member_join(_actor_id(actor_id), target, entry=True, request=request)

    def _live(self) -> HostedSpot:
        if self._kind is not SpotKind.USER:
            raise InvalidOperation(
                "an Instance Spot has no members: its handlers cannot Defer a Join"
            )
        hosted = self._hosted
        if hosted is None:
            raise InvalidOperation("this Spot is not hosted")
        return hosted

    def close(self) -> None:
        """Close this Instance Spot incarnation (from one of its handlers or timers).

        Returns at once: the close runs after the current turn, in the order of a close
        (spec 06 §7: admission sealed, the turns accepted before it run, cleanup once,
        the authority released). Calling it again while that close runs does nothing.

        Raises:
            InvalidOperation: a User Spot (close it with ``server.spots.close(ref)``), or a
                Spot not Ready yet (from its factory or create callback).
        """
        if self._kind is not SpotKind.INSTANCE:
            raise InvalidOperation(
                "a User Spot is closed with server.spots.close(ref); only an Instance Spot "
                "closes itself"
            )
        self._close()

    def __repr__(self) -> str:
        return (
            f"<SpotContext {self._kind.value} {self._stable_type.value!r} "
            f"{self._spot_id.value!r} gen={self._generation.value}>"
        )


def _spot_id(value: object) -> SpotId:
    return value if isinstance(value, SpotId) else SpotId.parse(value)


def _actor_id(value: object) -> ActorId:
    return value if isinstance(value, ActorId) else ActorId.parse(value)
