"""Server configuration: every tunable with the spec's default, validated on construction.

Durations are seconds (``float``), the way Trio counts time. ``0`` disables the features the
spec allows to be disabled (route cache, Message Follow). Invalid values raise
:class:`~zlink_trio.errors.ConfigurationError` when the config object is built, so a bad
config never reaches startup.
"""

from __future__ import annotations

import enum
import math
import re
from typing import TYPE_CHECKING, Any, Final

import attrs

from .errors import ConfigurationError
from .ids import MeshName

if TYPE_CHECKING:
    # Names the Store protocol for the type of ``location_store`` only: config sits at the
    # bottom of the layers and imports nothing from ``store`` at run time.
    from .store.api import LocationStore

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "MIB",
    "MemoryStoreConfig",
    "MeshConfig",
    "ObjectRole",
    "PostgresStoreConfig",
    "ServerConfig",
    "StreamConfig",
    "check_schema",
]

MIB: Final = 1024 * 1024
MAX_PAYLOAD_BYTES: Final = MIB
"""The largest application payload (request, reply, push, creation request and reply;
spec 04 §6.4, 06 §3.1): the wire's field bound and the ceiling of ``max_request_bytes`` and
``max_reply_bytes``."""

_SCHEMA: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

STORE_METHOD: Final = "register_node"
"""A method every Location Store has: the construction-time shape check of a store object
(the full protocol check is ``open_server``'s, which may import the store layer)."""


class ObjectRole(enum.Enum):
    """A node's Object role in one mesh. CLIENT may create and call Actors/Spots;
    SERVER may also host them."""

    NONE = "none"
    CLIENT = "client"
    SERVER = "server"

    @property
    def can_call(self) -> bool:
        return self is not ObjectRole.NONE

    @property
    def can_host(self) -> bool:
        return self is ObjectRole.SERVER


def _duration(*, allow_zero: bool) -> Any:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigurationError(f"{attr.name}: expected seconds, got {value!r}")
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigurationError(f"{attr.name}: must be finite and {bound}, got {value!r}")

    return check


def _positive_int(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{attr.name}: must be a positive int, got {value!r}")


def _positive(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{attr.name}: must be > 0, got {value!r}")
    if not math.isfinite(value):
        raise ConfigurationError(f"{attr.name}: must be finite, got {value!r}")


def _instance_of(*types: type, what: str) -> Any:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ConfigurationError(f"{attr.name}: expected {what}, got {value!r}")

    return check


def _object_role(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, ObjectRole):
        raise ConfigurationError(f"{attr.name}: expected an ObjectRole, got {value!r}")


def check_schema(schema: str) -> str:
    """A plain PostgreSQL identifier (letters, digits, ``_``; at most 63 bytes), else
    ConfigurationError. It is always quoted, so case is kept."""
    if not isinstance(schema, str) or _SCHEMA.fullmatch(schema) is None:
        raise ConfigurationError(
            f"PostgreSQL schema must match [A-Za-z_][A-Za-z0-9_]{{0,62}}, got {schema!r}"
        )
    return schema


def _postgres_schema(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    check_schema(value)  # type: ignore[arg-type]


def _mesh_name(value: object) -> MeshName:
    try:
        return MeshName.parse(value)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


@attrs.frozen(kw_only=True)
class MeshConfig:
    """One RouteMesh this node joins, with its Object role there."""

    name: MeshName = attrs.field(converter=_mesh_name)
    object_role: ObjectRole = attrs.field(default=ObjectRole.SERVER, validator=_object_role)


@attrs.frozen(kw_only=True)
class PostgresStoreConfig:
    """Ask ``open_server`` to open (and own) a PostgreSQL Location Store."""

    dsn: str = attrs.field(validator=_instance_of(str, what="a DSN string"))
    schema: str = attrs.field(default="zlink", validator=_postgres_schema)
    connections: int = attrs.field(default=8, validator=_positive_int)


@attrs.frozen
class MemoryStoreConfig:
    """Ask ``open_server`` to create (and own) an in-process ``MemoryLocationStore``: the
    embedded default, so the smallest program needs no store argument. Such a store lives
    and dies with its one server; several nodes in one process share a store through
    ``zlink_trio.testing.open_cluster`` or one ``MemoryLocationStore`` passed to each."""


@attrs.frozen(kw_only=True)
class StreamConfig:
    """The node's STREAM endpoint: a websocket listener for client sessions (spec 02).

    ``port`` 0 binds a free port (read it from ``server.stream.endpoint``).
    """

    host: str = attrs.field(default="127.0.0.1", validator=_instance_of(str, what="a host"))
    port: int = attrs.field(default=0, validator=_instance_of(int, what="a port number"))
    max_message_bytes: int = attrs.field(default=MAX_PAYLOAD_BYTES + 4096, validator=_positive_int)
    """The largest websocket message a client may send (a larger one closes the connection
    with code 1009); at least the largest frame (a 1 MiB payload plus its header)."""
    outbound_queue: int = attrs.field(default=1024, validator=_positive_int)
    """Frames waiting to be written to one client. A client that lets it overflow (it does
    not read) is closed as a slow consumer; no other session waits for it."""
    hello_timeout: float = attrs.field(default=10.0, validator=_duration(allow_zero=False))
    """A connection whose Hello (and its authentication callback) has not completed by
    then is closed."""
    bind_timeout: float = attrs.field(default=10.0, validator=_duration(allow_zero=False))
    """The deadline of a bind (a durable operation, replayed under one OperationId until
    its terminal or this deadline) when the caller's own scope sets none sooner."""
    disconnect_timeout: float = attrs.field(default=5.0, validator=_duration(allow_zero=False))
    """The lifecycle deadline of a disconnect notification: the bound Actor's Spot
    callback (OnDisconnectActor) terminal is awaited at most this long before the
    binding's cleanup goes on (spec 02 §7)."""
    close_timeout: float = attrs.field(default=2.0, validator=_duration(allow_zero=False))
    """How long a closing connection waits for the websocket close handshake (and its
    last frames to be written) before its socket is closed forcefully."""

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigurationError("stream port must be in 0..65535")
        if self.max_message_bytes < MAX_PAYLOAD_BYTES + 1024:
            raise ConfigurationError(
                f"stream max_message_bytes must be at least {MAX_PAYLOAD_BYTES + 1024}"
            )


@attrs.frozen(kw_only=True)
class ServerConfig:
    """Configuration of one MeshNode lifecycle (one ``open_server``).

    ``location_store`` is a store object the caller owns (e.g. one
    ``MemoryLocationStore`` shared by several in-process nodes), a
    :class:`PostgresStoreConfig` that the server opens and closes itself, or -- the
    default -- :class:`MemoryStoreConfig`: an in-process memory store the server creates.
    ``None`` means no Location Store at all (then meshes and Actor dispatch are startup
    configuration errors, spec 02 §3).
    """

    # --- identity and membership -------------------------------------------------------
    meshes: tuple[MeshConfig, ...] = attrs.field(default=(), converter=tuple)
    location_store: LocationStore | PostgresStoreConfig | MemoryStoreConfig | None = attrs.field(
        factory=MemoryStoreConfig
    )
    cluster_secret: bytes = attrs.field(default=b"", validator=_instance_of(bytes, what="bytes"))
    """Shared secret proving peers in the hello HMAC; at least 16 bytes when meshes are set."""
    node_name: str = attrs.field(default="node", validator=_instance_of(str, what="a string"))
    """Diagnostic prefix of this node's Entry Spot ids (never parsed)."""

    # --- transport ----------------------------------------------------------------------
    listen_host: str = attrs.field(default="127.0.0.1", validator=_instance_of(str, what="a host"))
    listen_port: int = attrs.field(default=0, validator=_instance_of(int, what="a port number"))
    advertise_host: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_instance_of(str, what="a host"))
    )
    max_frame_bytes: int = attrs.field(default=16 * MIB, validator=_positive_int)
    peer_send_queue: int = attrs.field(default=1024, validator=_positive_int)
    peer_send_timeout: float = attrs.field(default=5.0, validator=_duration(allow_zero=False))
    reconnect_backoff_initial: float = attrs.field(
        default=0.05, validator=_duration(allow_zero=False)
    )
    reconnect_backoff_max: float = attrs.field(default=2.0, validator=_duration(allow_zero=False))
    hello_timeout: float = attrs.field(default=5.0, validator=_duration(allow_zero=False))

    # --- capacity and placement ---------------------------------------------------------
    node_capacity: int = attrs.field(default=1_000_000, validator=_positive_int)
    placement_weight: float = attrs.field(default=1.0, validator=_positive)
    lane_capacity: int = attrs.field(default=10_000, validator=_positive_int)
    """Bound of each lane queue (application and lifecycle each)."""
    lifecycle_burst: int = attrs.field(default=8, validator=_positive_int)
    """Max consecutive lifecycle turns while application work waits (yield debt)."""

    # --- leases ---------------------------------------------------------------------------
    owner_lease_ttl: float = attrs.field(default=10.0, validator=_duration(allow_zero=False))
    owner_lease_renew_interval: float = attrs.field(
        default=3.0, validator=_duration(allow_zero=False)
    )
    descriptor_poll_interval: float = attrs.field(
        default=1.0, validator=_duration(allow_zero=False)
    )

    # --- spec timings (spec 02, 04, 06) ---------------------------------------------------
    session_relocation_seal_timeout: float = attrs.field(
        default=3.0, validator=_duration(allow_zero=False)
    )
    session_replacement_callback_timeout: float = attrs.field(
        default=30.0, validator=_duration(allow_zero=False)
    )
    replacement_close_delay: float = attrs.field(default=0.1, validator=_duration(allow_zero=True))
    cutover_fallback: float = attrs.field(default=1.0, validator=_duration(allow_zero=False))
    route_cache_max_age: float = attrs.field(default=15.0, validator=_duration(allow_zero=True))
    message_follow_duration: float = attrs.field(default=30.0, validator=_duration(allow_zero=True))
    message_follow_max_hops: int = attrs.field(default=8, validator=_positive_int)
    relocation_timeout: float = attrs.field(default=10.0, validator=_duration(allow_zero=False))
    """How long a relocation may take from its seal to the relay-ready reply (its abort
    deadline), and how long a target keeps a temporary queue without a commit."""
    join_timeout: float = attrs.field(default=5.0, validator=_duration(allow_zero=False))
    terminal_record_retention: float = attrs.field(
        default=300.0, validator=_duration(allow_zero=False)
    )
    """Terminal records of durable operations live until the original deadline + this."""
    default_create_timeout: float = attrs.field(default=30.0, validator=_duration(allow_zero=False))
    default_request_timeout: float = attrs.field(
        default=30.0, validator=_duration(allow_zero=False)
    )
    create_backoff_initial: float = attrs.field(default=0.01, validator=_duration(allow_zero=False))
    create_backoff_max: float = attrs.field(default=0.5, validator=_duration(allow_zero=False))
    drain_timeout: float = attrs.field(default=10.0, validator=_duration(allow_zero=False))
    """A clean stop lets accepted turns and creates/destroys in progress run this long
    (then cancels them); releasing the lifecycle's rows and removing its registration are
    each bounded by it too (docs/decisions.md, "Graceful drain on a clean stop")."""
    reservation_grace: float = attrs.field(default=5.0, validator=_duration(allow_zero=True))
    """A Creating reservation is reclaimable once store time passes its attempt deadline
    (recorded in the row) + this, whether or not its owner lives (docs/decisions.md)."""
    reclaim_sweep_interval: float = attrs.field(default=5.0, validator=_duration(allow_zero=False))
    """Seconds between two rounds of the background reclaim sweep of every node."""
    reclaim_sweep_batch: int = attrs.field(default=100, validator=_positive_int)
    """Rows one sweep round reclaims at most (the round's Store work is bounded)."""
    connect_timeout: float = attrs.field(default=2.0, validator=_duration(allow_zero=False))
    """A call whose owner has no admitted connection dials it at once and waits at most this
    for the connection (or less, if its own deadline is sooner); it ends Unavailable as
    soon as that dial fails, never later than this (docs/decisions.md, "Fast failure and
    lazy reclaim on the messaging path")."""

    # --- STREAM sessions (spec 02) ----------------------------------------------------------
    stream: StreamConfig | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(_instance_of(StreamConfig, what="a StreamConfig")),
    )
    """The STREAM websocket endpoint of this node (None: no STREAM sessions)."""

    # --- sizes ----------------------------------------------------------------------------
    max_request_bytes: int = attrs.field(default=1 * MIB, validator=_positive_int)
    max_reply_bytes: int = attrs.field(default=1 * MIB, validator=_positive_int)

    def __attrs_post_init__(self) -> None:
        for mesh in self.meshes:
            if not isinstance(mesh, MeshConfig):
                raise ConfigurationError(f"meshes: expected MeshConfig objects, got {mesh!r}")
        store = self.location_store
        if not (
            store is None
            or isinstance(store, PostgresStoreConfig | MemoryStoreConfig)
            or callable(getattr(store, STORE_METHOD, None))
        ):
            raise ConfigurationError(
                "location_store: expected a Location Store object or a PostgresStoreConfig, "
                f"got {store!r}"
            )
        names = [m.name for m in self.meshes]
        if len(set(names)) != len(names):
            raise ConfigurationError("the same mesh is configured twice")
        if self.meshes and len(self.cluster_secret) < 16:
            raise ConfigurationError("cluster_secret must be at least 16 bytes")
        cache, follow = self.route_cache_max_age, self.message_follow_duration
        if cache > 0 and follow > 0 and cache > follow - 5.0:
            raise ConfigurationError(
                "route_cache_max_age must be at least 5 s shorter than "
                f"message_follow_duration (got {cache} and {follow})"
            )
        if self.owner_lease_renew_interval >= self.owner_lease_ttl:
            raise ConfigurationError("owner_lease_renew_interval must be shorter than the TTL")
        if self.create_backoff_initial > self.create_backoff_max:
            raise ConfigurationError("create_backoff_initial exceeds create_backoff_max")
        if self.reconnect_backoff_initial > self.reconnect_backoff_max:
            raise ConfigurationError("reconnect_backoff_initial exceeds reconnect_backoff_max")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigurationError("listen_port must be in 0..65535")
        for name in ("max_request_bytes", "max_reply_bytes"):
            if getattr(self, name) > MAX_PAYLOAD_BYTES:
                # The wire carries at most this (the spec's limit): a higher limit would
                # let a local call do what a remote one cannot (docs/decisions.md).
                raise ConfigurationError(f"{name} must be at most {MAX_PAYLOAD_BYTES} bytes")
        if self.max_request_bytes > self.max_frame_bytes // 2:
            raise ConfigurationError("max_frame_bytes must be at least twice max_request_bytes")
        if self.max_reply_bytes > self.max_frame_bytes // 2:
            raise ConfigurationError("max_frame_bytes must be at least twice max_reply_bytes")

    def object_meshes(self) -> tuple[MeshConfig, ...]:
        """Meshes where this node has an Object Client or Server role."""
        return tuple(m for m in self.meshes if m.object_role.can_call)
