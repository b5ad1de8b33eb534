"""Relocation policies of Actor types: the shared values of :mod:`zlink_trio.objects.policy`
(every stable type registration, Actor or Spot, picks one; there is no default)."""

from __future__ import annotations

from ..objects.policy import (
    ActorRelocationAdapter,
    DisableRelocation,
    PreserveStateWith,
    RecreateOnRelocation,
    RelocationPolicy,
)

__all__ = [
    "ActorRelocationAdapter",
    "DisableRelocation",
    "PreserveStateWith",
    "RecreateOnRelocation",
    "RelocationPolicy",
]
