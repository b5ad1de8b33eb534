"""Spot lifecycle callbacks: what they are, how a Spot class declares them.

Every callback runs in one turn of the Spot's LIFECYCLE queue (spec 04 §4): never on an
Actor payload path, never beside another turn of the Spot. A class factory declares them
with ``@on_lifecycle(SpotCallback.X)`` on ``async def`` methods; ``App.register_spot_callback``
registers a function ``async def fn(spot, arg)`` instead.

========================  ===================================  ===========================
callback                  argument                             result (None = the default)
========================  ===================================  ===========================
``CREATE``                the creation request (bytes | None)  ``Approve`` / ``Reject``
``CREATE_ACTOR``          ``ActorCreateEvent``                 ``Approve`` / ``Reject``
``JOIN``                  the Join's event                     ``Approve`` / ``Reject``
``JOINED``, ``LEAVE``,    the membership event                 ignored
``DISCONNECT_ACTOR``
``CLOSE``                 None                                 ignored (runs once, at close)
========================  ===================================  ===========================

Membership callbacks (``CREATE_ACTOR``, ``JOIN``, ``JOINED``, ``LEAVE``,
``DISCONNECT_ACTOR``) exist only for User Spots.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

__all__ = [
    "LIFECYCLE_MARK",
    "MEMBERSHIP_CALLBACKS",
    "SpotCallback",
    "SpotCallbackFn",
    "declared_callbacks",
    "on_lifecycle",
]

LIFECYCLE_MARK: Final = "__zlink_spot_lifecycle__"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

SpotCallbackFn = Callable[[Any, Any], Awaitable[Any]]
"""``async def callback(spot, argument) -> result`` (bound methods drop ``spot``)."""


class SpotCallback(enum.Enum):
    CREATE = "create"
    """The Spot's create callback: after the factory, before the Ready commit."""
    CREATE_ACTOR = "create_actor"
    """OnCreateActor: approve an Actor being created into this User Spot."""
    JOIN = "join"
    """Approve an Actor's Join (run by the membership transaction)."""
    JOINED = "joined"
    """An Actor's Join committed."""
    LEAVE = "leave"
    """An Actor left."""
    DISCONNECT_ACTOR = "disconnect_actor"
    """OnDisconnectActor: a member Actor's bound session disconnected."""
    CLOSE = "close"
    """The Spot is closing (close step 3, once): release what the application holds."""


MEMBERSHIP_CALLBACKS: Final = frozenset(
    {
        SpotCallback.CREATE_ACTOR,
        SpotCallback.JOIN,
        SpotCallback.JOINED,
        SpotCallback.LEAVE,
        SpotCallback.DISCONNECT_ACTOR,
    }
)
"""Callbacks only a User Spot has (an Instance Spot has no Actor membership)."""


def on_lifecycle(callback: SpotCallback) -> Callable[[F], F]:
    """Mark an ``async def`` method of a Spot class as its ``callback``."""
    if not isinstance(callback, SpotCallback):
        raise TypeError(f"on_lifecycle takes a SpotCallback, got {callback!r}")

    def decorate(fn: F) -> F:
        marks: tuple[SpotCallback, ...] = getattr(fn, LIFECYCLE_MARK, ())
        setattr(fn, LIFECYCLE_MARK, (*marks, callback))
        return fn

    return decorate


def declared_callbacks(cls: type) -> list[tuple[SpotCallback, str]]:
    """(callback, attribute name) of every marked method of ``cls`` (MRO order, the
    most derived definition of a name wins)."""
    found: list[tuple[SpotCallback, str]] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            found.extend((callback, name) for callback in getattr(value, LIFECYCLE_MARK, ()))
    return found
