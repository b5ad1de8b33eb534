"""Public values of STREAM sessions: what the authentication callback sees and decides,
and what the duplicate-connection callback is told."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ..ids import ActorId, ActorRef, StableType

__all__ = ["AuthRequest", "Authenticated", "AutoBind", "SessionReplaced"]


@attrs.frozen
class AuthRequest:
    """A new connection asks to be a session: its Hello credentials and where it came
    from. Given to ``App.authenticate``'s callback."""

    credentials: bytes
    path: str
    """The websocket request path (e.g. ``/``)."""
    headers: tuple[tuple[bytes, bytes], ...]
    """The websocket handshake request headers."""
    remote: str
    """The client's address as text (diagnostics only)."""


class AutoBind(enum.Enum):
    """What the framework does with the identity an authentication decided, before the
    session's first packet is handled (the application may bind more itself)."""

    NONE = "none"
    """Nothing: the application binds (``session.actors.bind``) where it wants to."""
    FIND = "find"
    """Bind the Ready Actor of that id when one exists (``actors.find``), else nothing."""
    GET_OR_CREATE = "get_or_create"
    """``actors.get_or_create(actor_id, actor_type)`` then bind it (the default). A
    creation the Entry Spot rejects, or any error, refuses the session."""


def _actor_id(value: object) -> ActorId:
    return ActorId.parse(value)


def _stable_type(value: object) -> StableType:
    return StableType.parse(value)


@attrs.frozen
class Authenticated:
    """The domain Actor identity and type an authentication decided (spec 02 §1 step 1).
    An invalid id or type raises ``InvalidId`` when it is built."""

    actor_id: ActorId = attrs.field(converter=_actor_id)
    actor_type: StableType = attrs.field(converter=_stable_type)
    bind: AutoBind = attrs.field(default=AutoBind.GET_OR_CREATE)
    claims: Any = None
    """Anything the application wants the session to carry (``session.identity.claims``)."""


@attrs.frozen
class SessionReplaced:
    """What the duplicate-connection callback (``App.on_session_replaced``) is told: the
    binding of ``actor`` moved to another connection, so this one is closing. The
    callback may still send to the client (``session.send``); the framework closes the
    connection 100 ms after the callback's terminal (spec 02 §6)."""

    actor: ActorRef
