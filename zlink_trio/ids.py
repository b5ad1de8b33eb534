"""Identity values: ids, stable type names, node identities, generations, refs.

All are frozen attrs classes with a trivial ``__init__`` and a validator; build them from
untrusted input with the ``parse`` class methods, which also accept UTF-8 ``bytes``. The
private ``_trusted`` class methods skip the validator for a value that was already checked
(the wire decoder's fast path); they never replace validation.

Text ids (ActorId, SpotId, StableType, MeshName) are UTF-8 of 1..255 bytes, compared
case-sensitively as-is: no Unicode normalization, no case folding. Invalid UTF-8 (including
lone surrogates in a ``str``), empty and >= 256-byte values raise :class:`InvalidId` before
anything touches the Location Store.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import uuid
from typing import ClassVar, Final, Self, TypeVar

import attrs

from .errors import ConfigurationError

__all__ = [
    "MAX_ID_BYTES",
    "U63_MAX",
    "ActorId",
    "ActorRef",
    "AuthorityOwnerGeneration",
    "InvalidId",
    "MeshName",
    "NodeGeneration",
    "NodeRid",
    "ObjectGeneration",
    "OperationId",
    "OwnerLeaseGeneration",
    "SpotId",
    "SpotRef",
    "StableType",
    "is_reserved_entry_spot_id",
    "new_entry_spot_id",
    "new_user_spot_id",
    "user_spot_id_for_operation",
]

MAX_ID_BYTES: Final = 255
U63_MAX: Final = (1 << 63) - 1
U128_MAX: Final = (1 << 128) - 1
NODE_RID_BYTES: Final = 16


class InvalidId(ConfigurationError, ValueError):
    """A text id, type name or generation failed validation (before any Store access)."""


def utf8_length(value: str) -> int:
    """UTF-8 byte length of ``value``; raises InvalidId for lone surrogates."""
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidId("not valid UTF-8 (lone surrogate)") from None


def check_text_id(value: object, what: str) -> str:
    """Validate a text id and return it as ``str``.

    Accepts ``str`` or UTF-8 ``bytes``. The value is never normalized or case-folded.
    """
    if type(value) is str and value.isascii():
        # The common case, one call: an ASCII text's UTF-8 length is its length (and it
        # holds no surrogate); the same limits as below.
        n = len(value)
        if n == 0:
            raise InvalidId(f"{what}: empty")
        if n > MAX_ID_BYTES:
            raise InvalidId(f"{what}: {n} bytes, the limit is {MAX_ID_BYTES}")
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            raise InvalidId(f"{what}: not valid UTF-8") from None
    if not isinstance(value, str):
        raise InvalidId(f"{what}: expected str, got {type(value).__name__}")
    n = utf8_length(value)
    if n == 0:
        raise InvalidId(f"{what}: empty")
    if n > MAX_ID_BYTES:
        raise InvalidId(f"{what}: {n} bytes, the limit is {MAX_ID_BYTES}")
    return value


_T = TypeVar("_T")
_OBJECT_NEW: Final = object.__new__
_OBJECT_SETATTR: Final = object.__setattr__
_HASH_CACHE_SLOT: Final = "_attrs_cached_hash"
"""The slot in which attrs' ``cache_hash=True`` keeps the hash (None until computed)."""


def _trusted_value(cls: type[_T], value: object, *, cached_hash: bool) -> _T:
    """An instance of a one-field (``value``) frozen slots class built without running its
    ``__init__``: the same slot values the generated ``__init__`` sets, minus the
    validator. Only for values the caller has already validated (the wire decoder);
    ``tests/unit/wire/test_wire_trusted.py`` proves the result indistinguishable."""
    self = _OBJECT_NEW(cls)
    _OBJECT_SETATTR(self, "value", value)
    if cached_hash:
        _OBJECT_SETATTR(self, _HASH_CACHE_SLOT, None)
    return self


def _check_text_field(inst: _TextId, _attr: object, value: str) -> None:
    check_text_id(value, inst._WHAT)


@attrs.frozen(slots=True, order=True)
class _TextId:
    """Base of the text ids: one ``value: str`` validated by :func:`check_text_id`, built
    from untrusted input with :meth:`parse`, printed as the bare text, ordered and equal
    only within one concrete class (attrs compares ``__class__`` first, so an ActorId
    never equals a SpotId of the same text). Each subclass names itself in ``_WHAT``
    (the prefix of its :class:`InvalidId` messages) and is decorated again with
    ``cache_hash=True``."""

    _WHAT: ClassVar[str] = "text id"
    value: str = attrs.field(validator=_check_text_field)

    @classmethod
    def _trusted(cls, value: str) -> Self:
        """``value`` already validated by the caller (see ``_trusted_value``)."""
        return _trusted_value(cls, value, cached_hash=True)

    @classmethod
    def parse(cls, value: object) -> Self:
        if isinstance(value, cls):
            return value
        return cls._trusted(check_text_id(value, cls._WHAT))  # checked once, not twice

    def __str__(self) -> str:
        return self.value


@attrs.frozen(slots=True, cache_hash=True, order=True)
class ActorId(_TextId):
    """Global logical Actor identity (the only Actor message target)."""

    _WHAT: ClassVar[str] = "ActorId"


@attrs.frozen(slots=True, cache_hash=True, order=True)
class SpotId(_TextId):
    """Global Spot identity (Entry, User or Instance Spot)."""

    _WHAT: ClassVar[str] = "SpotId"

    @property
    def is_reserved_entry_shape(self) -> bool:
        """True when the id has the framework-reserved Entry Spot shape."""
        return is_reserved_entry_spot_id(self.value)


@attrs.frozen(slots=True, cache_hash=True, order=True)
class StableType(_TextId):
    """Stable Actor/Spot type name chosen by the application (never a class name)."""

    _WHAT: ClassVar[str] = "stable type"


@attrs.frozen(slots=True, cache_hash=True, order=True)
class MeshName(_TextId):
    """Name of one RouteMesh (a physical connection group). Placement only, not identity."""

    _WHAT: ClassVar[str] = "MeshName"


_UUID4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
_ENTRY_SHAPE: Final = re.compile(r".+-entry-" + _UUID4, re.DOTALL)
USER_SPOT_ID_SHAPE: Final = re.compile(_UUID4)


def is_reserved_entry_spot_id(value: str) -> bool:
    """``<prefix>-entry-<lowercase canonical uuid4>`` with a non-empty prefix.

    Only an exact match is reserved: an uppercase or non-v4 UUID is an ordinary id.
    """
    return _ENTRY_SHAPE.fullmatch(value) is not None


def new_entry_spot_id(prefix: str) -> SpotId:
    """Issue a fresh Entry Spot id. The UUID is new (never derived from the node RID)."""
    tail = f"-entry-{uuid.uuid4()}"
    room = MAX_ID_BYTES - len(tail)
    raw = prefix.encode("utf-8")[:room].decode("utf-8", errors="ignore") or "node"
    return SpotId(raw + tail)


def new_user_spot_id() -> SpotId:
    """Issue an automatic User Spot id: a lowercase canonical UUID v4 string."""
    return SpotId(str(uuid.uuid4()))


def user_spot_id_for_operation(node_rid: bytes, node_generation: int, operation: int) -> SpotId:
    """The automatic User Spot id of the durable operation ``(node_rid, node_generation,
    operation)`` (its OperationKey): a UUID v4-shaped id from a SHA-256 of the key, so a
    re-submission of ``create(type).operation_id(op)`` names the same Spot as the
    original. Different operations collide with UUID v4 odds (122 bits)."""
    digest = hashlib.sha256(
        b"zlink-user-spot-id\0"
        + node_rid
        + node_generation.to_bytes(8, "big")
        + operation.to_bytes(16, "big")
    ).digest()
    return SpotId(str(uuid.UUID(bytes=digest[:16], version=4)))


@attrs.frozen(slots=True, cache_hash=True, order=True)
class NodeRid:
    """Routing id of one MeshNode process lifecycle: 16 random bytes."""

    value: bytes = attrs.field()

    @classmethod
    def _trusted(cls, value: bytes) -> Self:
        """``value`` already validated by the caller (see ``_trusted_value``)."""
        return _trusted_value(cls, value, cached_hash=True)

    @value.validator
    def _check(self, _attr: object, value: object) -> None:
        if not isinstance(value, bytes) or len(value) != NODE_RID_BYTES:
            raise InvalidId(f"NodeRid must be {NODE_RID_BYTES} bytes")

    @classmethod
    def new(cls) -> Self:
        return cls(secrets.token_bytes(NODE_RID_BYTES))

    @classmethod
    def from_hex(cls, text: str) -> Self:
        try:
            return cls(bytes.fromhex(text))
        except ValueError:
            raise InvalidId("NodeRid: not hex") from None

    @property
    def hex(self) -> str:
        return self.value.hex()

    def __str__(self) -> str:
        return self.value.hex()


def _check_u63_field(inst: _U63, _attr: object, value: int) -> None:
    if type(value) is not int or not 1 <= value <= U63_MAX:
        raise InvalidId(f"{inst._WHAT} must be an int in 1..2**63-1, got {value!r}")


@attrs.frozen(slots=True, order=True)
class _U63:
    """Base of the generations: one ``value: int`` in 1..2**63-1, ordered and equal only
    within one concrete class. Each subclass names itself in ``_WHAT``."""

    _WHAT: ClassVar[str] = "generation"
    value: int = attrs.field(validator=_check_u63_field)

    @classmethod
    def _trusted(cls, value: int) -> Self:
        """``value`` already validated by the caller (see ``_trusted_value``)."""
        return _trusted_value(cls, value, cached_hash=False)


@attrs.frozen(slots=True, order=True)
class ObjectGeneration(_U63):
    """Logical incarnation of an ActorId/SpotId. Issued by the Store at reservation from
    one global sequence; unchanged by relocation. JSON renders it as a decimal string."""

    _WHAT: ClassVar[str] = "ObjectGeneration"

    def to_json(self) -> str:
        return str(self.value)

    @classmethod
    def from_json(cls, text: object) -> Self:
        if not isinstance(text, str) or not text.isdigit() or not text.isascii():
            raise InvalidId("ObjectGeneration JSON must be a decimal string")
        return cls(int(text))

    def __str__(self) -> str:
        return str(self.value)


@attrs.frozen(slots=True, order=True)
class AuthorityOwnerGeneration(_U63):
    """Counts owner changes of one incarnation; starts at 1, +1 on every owner CAS."""

    _WHAT: ClassVar[str] = "AuthorityOwnerGeneration"

    def next(self) -> AuthorityOwnerGeneration:
        return AuthorityOwnerGeneration(self.value + 1)


@attrs.frozen(slots=True, order=True)
class NodeGeneration(_U63):
    """Identifies one node process lifecycle (fresh per process start)."""

    _WHAT: ClassVar[str] = "NodeGeneration"

    @classmethod
    def new(cls) -> Self:
        return cls(secrets.randbelow(U63_MAX) + 1)


@attrs.frozen(slots=True, order=True)
class OwnerLeaseGeneration(_U63):
    """Identifies one owner-lease lifecycle of a host; issued by the Store."""

    _WHAT: ClassVar[str] = "OwnerLeaseGeneration"


@attrs.frozen(slots=True, cache_hash=True, order=True)
class OperationId:
    """Non-zero 128-bit id of a durable operation (create, join, bind)."""

    value: int = attrs.field()

    @classmethod
    def _trusted(cls, value: int) -> Self:
        """``value`` already validated by the caller (see ``_trusted_value``)."""
        return _trusted_value(cls, value, cached_hash=True)

    @value.validator
    def _check(self, _attr: object, value: object) -> None:
        if type(value) is not int or not 1 <= value <= U128_MAX:
            raise InvalidId("OperationId must be a non-zero 128-bit int")

    @classmethod
    def new(cls) -> Self:
        value = 0
        while not value:  # uniform over 1..U128_MAX (0 comes up once in 2**128)
            value = int.from_bytes(os.urandom(16), "big")
        return cls._trusted(value)

    def to_bytes(self) -> bytes:
        return self.value.to_bytes(16, "big")

    @classmethod
    def from_bytes(cls, raw: bytes) -> Self:
        if len(raw) != 16:
            raise InvalidId("OperationId must be 16 bytes")
        return cls(int.from_bytes(raw, "big"))


@attrs.frozen(slots=True)
class ActorRef:
    """Immutable snapshot of where an Actor incarnation was. Never a message target."""

    actor_id: ActorId
    object_generation: ObjectGeneration
    mesh_name: MeshName
    node_rid: NodeRid

    def to_json(self) -> dict[str, str]:
        return {
            "actorId": self.actor_id.value,
            "objectGeneration": self.object_generation.to_json(),
            "meshName": self.mesh_name.value,
            "nodeRid": self.node_rid.hex,
        }


@attrs.frozen(slots=True)
class SpotRef:
    """Immutable snapshot of where a Spot incarnation was. Never a message target."""

    spot_id: SpotId
    object_generation: ObjectGeneration
    mesh_name: MeshName
    node_rid: NodeRid

    def to_json(self) -> dict[str, str]:
        return {
            "spotId": self.spot_id.value,
            "objectGeneration": self.object_generation.to_json(),
            "meshName": self.mesh_name.value,
            "nodeRid": self.node_rid.hex,
        }
