"""Relocation policies: every stable type registration picks one, there is no default."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import attrs

__all__ = [
    "ActorRelocationAdapter",
    "DisableRelocation",
    "PreserveStateWith",
    "RecreateOnRelocation",
    "RelocationPolicy",
]

A_contra = TypeVar("A_contra", contravariant=True)


class ActorRelocationAdapter(Protocol[A_contra]):
    """Captures an Actor's application state as opaque bytes and restores it on the target.

    The framework never interprets the bytes and manages no state-contract id.
    """

    async def capture(self, actor: A_contra) -> bytes: ...

    async def restore(self, actor: A_contra, payload: bytes) -> None: ...


@attrs.frozen
class DisableRelocation:
    """The Actor never moves between nodes."""


@attrs.frozen
class RecreateOnRelocation:
    """The target re-creates the Actor with its factory; application state is not restored,
    framework-owned queued work and timers are."""


@attrs.frozen
class PreserveStateWith:
    """The source captures state with ``adapter`` after a normal handler end; the target
    restores it into a freshly built Actor."""

    adapter: ActorRelocationAdapter[Any]


RelocationPolicy = DisableRelocation | RecreateOnRelocation | PreserveStateWith
