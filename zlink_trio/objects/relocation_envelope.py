"""What a relocating Actor or Spot carries to its target besides its queued payloads (those travel
as the relay, 113/114): the application state (PreserveStateWith: the adapter's opaque
bytes), its framework timers (registrations, pending ticks, the lane's timer ticks) and
each participant's state. Stored in the Relocation Store (content-addressed); 121 names
it by SHA-256."""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import ProtocolError
from ..wire.codec import decode_value, encode_value
from .timers import (
    TimerKind,
    TimerRegistration,
    TimersSnapshot,
    TimerState,
    TimerTick,
)

__all__ = ["RelocationEnvelope"]

_VERSION = 1


def _tick(value: Any) -> TimerTick:
    name, serial = value
    if not isinstance(name, str) or type(serial) is not int:
        raise ProtocolError("a timer tick in the envelope is malformed")
    return TimerTick(name, serial)


def _state(value: Any) -> TimerState:
    name, kind, period, payload, serial, remaining, pending = value
    registration = TimerRegistration(
        name=str(name),
        kind=TimerKind(kind),
        period=None if period is None else float(period),
        payload=bytes(payload),
        serial=int(serial),
    )
    return TimerState(registration, float(remaining), bool(pending))


@attrs.frozen
class RelocationEnvelope:
    state: bytes | None
    """PreserveStateWith: what the adapter captured; None for RecreateOnRelocation."""
    timers: TimersSnapshot | None
    lane_ticks: tuple[TimerTick, ...]
    """Timer ticks that were in the source lane (they run first on the target)."""
    participants: tuple[tuple[str, bytes], ...]

    def encode(self) -> bytes:
        timers: list[Any] | None = None
        if self.timers is not None:
            snap = self.timers
            timers = [
                snap.next_serial,
                [
                    [
                        t.registration.name,
                        t.registration.kind.value,
                        t.registration.period,
                        t.registration.payload,
                        t.registration.serial,
                        t.remaining,
                        t.tick_pending,
                    ]
                    for t in snap.timers
                ],
                [[tick.name, tick.serial] for tick in snap.backlog],
            ]
        return encode_value(
            [
                _VERSION,
                self.state,
                timers,
                [[tick.name, tick.serial] for tick in self.lane_ticks],
                [[name, data] for name, data in self.participants],
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> RelocationEnvelope:
        """Raises ProtocolError for anything but an envelope this version wrote."""
        value = decode_value(data)
        try:
            version, state, timers, lane_ticks, participants = value
            if version != _VERSION or not (state is None or isinstance(state, bytes)):
                raise ProtocolError("unknown relocation envelope")
            snapshot = None
            if timers is not None:
                next_serial, states, backlog = timers
                snapshot = TimersSnapshot(
                    tuple(_state(s) for s in states),
                    tuple(_tick(t) for t in backlog),
                    int(next_serial),
                )
            return cls(
                state,
                snapshot,
                tuple(_tick(t) for t in lane_ticks),
                tuple((str(name), bytes(blob)) for name, blob in participants),
            )
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed relocation envelope: {exc}") from None
