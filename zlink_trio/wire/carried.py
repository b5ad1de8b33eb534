"""The session-binding state a relocation carries from its source to its target (the
sessions participant's ``seal`` → ``restore`` bytes, docs/relocation.md "Participants").

One CBOR array ``[version, field1, ...]`` of :class:`CarriedSessionBinding`, decoded as
strictly as a wire record (:mod:`.codec`): anything else raises
:class:`~zlink_trio.errors.ProtocolError`.
"""

from __future__ import annotations

from typing import Final

import attrs
import cbor2

from ..errors import ProtocolError
from ..ids import MeshName, NodeGeneration, NodeRid, OwnerLeaseGeneration
from .codec import _NO_TAGS, MAX_DEPTH, _loads, _malformed, _reject_map
from .fields import (
    BOOL,
    MESH_NAME,
    NODE_GENERATION,
    OWNER_LEASE_GENERATION,
    RID,
    SESSION_RID,
    U64,
    WireValueError,
    wire,
)
from .nested import Nested

__all__ = ["CARRIED_VERSION", "CarriedSessionBinding", "decode_carried", "encode_carried"]

CARRIED_VERSION: Final = 1
_MAX_BYTES: Final = 1024


@attrs.frozen(slots=True, kw_only=True)
class CarriedSessionBinding:
    """The Actor's current binding (the physical session and its binding generation) and
    how the new owner reaches that session owner; ``sealed``: the source installed a
    seal (command 43 SEALED), so the target owes a 44 commit."""

    session_mesh: MeshName = attrs.field(metadata=wire(MESH_NAME))
    owner_rid: NodeRid = attrs.field(metadata=wire(RID))
    owner_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    owner_id: int = attrs.field(metadata=wire(U64))
    owner_lease_generation: OwnerLeaseGeneration = attrs.field(
        metadata=wire(OWNER_LEASE_GENERATION)
    )
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    binding_generation: int = attrs.field(metadata=wire(U64))
    sealed: bool = attrs.field(metadata=wire(BOOL))


_NESTED: Final = Nested(CarriedSessionBinding, prefix=CARRIED_VERSION)


def encode_carried(value: CarriedSessionBinding) -> bytes:
    try:
        return cbor2.dumps(_NESTED.encode_checked(value))
    except WireValueError as exc:
        raise ProtocolError(f"cannot encode a carried binding: {exc.message}") from None


def decode_carried(data: bytes) -> CarriedSessionBinding:
    """Raises ProtocolError for anything but one carried binding."""
    if len(data) > _MAX_BYTES:
        raise ProtocolError("a carried binding is too large")
    try:
        raw = _loads(
            data,
            semantic_decoders=_NO_TAGS,
            object_hook=_reject_map,
            allow_indefinite=False,
            max_depth=MAX_DEPTH,
        )
    except BaseException as exc:
        _malformed(exc)
    if type(raw) is not list or not raw or raw[0] != CARRIED_VERSION:
        raise ProtocolError("not a carried binding of a known version")
    if cbor2.dumps(raw) != data:
        raise ProtocolError("bytes after the carried binding, or not its shortest form")
    try:
        value = _NESTED.decode_checked(raw)
    except WireValueError as exc:
        raise ProtocolError(f"carried binding: {exc.message}") from None
    assert type(value) is CarriedSessionBinding
    return value
