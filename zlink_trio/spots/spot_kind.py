"""The two caller-addressed Spot kinds (spec 06 §1, §2.3): User and Instance Spots.

Entry Spots are a third kind that only the framework issues (one per node and mesh); they
are never registered by an application, so they are not a value of :class:`SpotKind`.
"""

from __future__ import annotations

import enum

from ..store.api import ObjectKind

__all__ = ["SpotKind"]


class SpotKind(enum.Enum):
    """What a registered Spot type is."""

    USER = "user"
    """Created explicitly (``server.spots.create`` / ``get_or_create``); supports Actor
    membership (join, leave) and closes through ``server.spots.close``."""
    INSTANCE = "instance"
    """No Actor membership; created only by cold activation (a direct call with Instance
    intent) and closes itself (``SpotContext.close``) from a handler or timer."""

    @property
    def object_kind(self) -> ObjectKind:
        """Its kind in the Location Store."""
        return ObjectKind.USER_SPOT if self is SpotKind.USER else ObjectKind.INSTANCE_SPOT

    @classmethod
    def of(cls, kind: ObjectKind) -> SpotKind | None:
        """The SpotKind of a Store kind (None: an Actor or an Entry Spot)."""
        if kind is ObjectKind.USER_SPOT:
            return cls.USER
        if kind is ObjectKind.INSTANCE_SPOT:
            return cls.INSTANCE
        return None
