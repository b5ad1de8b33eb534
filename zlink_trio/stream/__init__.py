"""STREAM sessions over websocket and their Actor bindings (spec 02): the session owner
role of a node.

Only re-exports live here; each concept has its own module:

- :mod:`.server` — :class:`StreamServer`: the websocket listener, the connections, the
  inbound Actor→session commands (36, 51, 140) and the session owner's bind/relay paths.
- :mod:`.connection` — one connection: handshake, reader, session lane, writer, close.
- :mod:`.session` — the public :class:`Session` and :class:`Packet`, and the request
  correlation completed exactly once.
- :mod:`.actors` — ``session.actors`` (:class:`SessionActors`, :class:`SessionActor`):
  bind, bind_or_get, find, bound, relay, notify_disconnected.
- :mod:`.binding` — :class:`SessionBindingAggregate`, the one place of Session-side
  binding validation (identity, generations, relocation seal and route).
- :mod:`.outbound` — the per-connection outbound queues and writer.
- :mod:`.values` — AuthRequest, Authenticated, AutoBind, SessionReplaced.

The client protocol is docs/stream-protocol.md; its frames are :mod:`zlink_trio.wire.stream`.
"""

from .actors import SessionActor as SessionActor, SessionActors as SessionActors
from .binding import SessionBindingAggregate as SessionBindingAggregate
from .server import (
    StreamCallbacks as StreamCallbacks,
    StreamServer as StreamServer,
    StreamStatistics as StreamStatistics,
)
from .session import Packet as Packet, Session as Session
from .values import (
    Authenticated as Authenticated,
    AuthRequest as AuthRequest,
    AutoBind as AutoBind,
    SessionReplaced as SessionReplaced,
)
