"""The ``instance-activation-recovery-v1`` root: a cold activation's complete envelope as
the Relocation Store keeps it (spec 06 §4.1, docs/decisions.md "Spot direct calls and
Instance Spot cold activation").

The root is the format name, a newline, then the exact command 39 body the target received
(route kind 2, :class:`~.tails.ColdActivation`). The record's own ``timeout_ms`` is the
recovery record's deadline, so the route-kind-2 deadline and the recovered one cannot
differ; its absolute value is fixed by the target on arrival (the Creating row's
``attempt_expires_at`` records it in Store time).
"""

from __future__ import annotations

from typing import Final

from ..errors import ProtocolError
from .codec import decode, encode
from .records import SpotDirectRoute
from .tails import ColdActivation

__all__ = ["ACTIVATION_RECOVERY_FORMAT", "decode_activation_root", "encode_activation_root"]

ACTIVATION_RECOVERY_FORMAT: Final = "instance-activation-recovery-v1"
"""The name of the recovery record format (spec 06 §4.1)."""

_PREFIX: Final = ACTIVATION_RECOVERY_FORMAT.encode("ascii") + b"\n"


def encode_activation_root(envelope: SpotDirectRoute) -> bytes:
    """The recovery root bytes of ``envelope`` (a route-kind-2 command 39).

    Raises:
        ProtocolError: ``envelope`` is not a cold activation, or does not encode.
    """
    if not isinstance(envelope.route, ColdActivation):
        raise ProtocolError("an activation recovery root holds a route-kind-2 command 39")
    return _PREFIX + encode(envelope)


def decode_activation_root(data: bytes) -> SpotDirectRoute:
    """The envelope an ``instance-activation-recovery-v1`` root holds.

    Raises:
        ProtocolError: another format, or not exactly one route-kind-2 command 39.
    """
    if not data.startswith(_PREFIX):
        raise ProtocolError(f"not an {ACTIVATION_RECOVERY_FORMAT} root")
    record = decode(data[len(_PREFIX) :])
    if not isinstance(record, SpotDirectRoute) or not isinstance(record.route, ColdActivation):
        raise ProtocolError(f"an {ACTIVATION_RECOVERY_FORMAT} root holds no cold activation")
    return record
