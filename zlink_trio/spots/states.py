"""The states of a hosted User or Instance Spot (a tagged union of frozen values)."""

from __future__ import annotations

from typing import Final, TypeAlias

import attrs

from ..errors import Unavailable

__all__ = [
    "SPOT_CLOSED",
    "SPOT_CLOSING",
    "SPOT_FENCED",
    "SPOT_READY",
    "SPOT_RELOCATING",
    "SPOT_STAGING",
    "SpotClosed",
    "SpotClosing",
    "SpotFenced",
    "SpotReady",
    "SpotRelocating",
    "SpotStaging",
    "SpotState",
    "spot_lease_lost",
]


@attrs.frozen
class SpotStaging:
    """Reserved and being built (factory, create callback): not reachable yet."""


@attrs.frozen
class SpotReady:
    """Published: admits application messages."""


@attrs.frozen
class SpotRelocating:
    """Sealed for a move (its relocation's seal turn ran): application ingress is HELD in
    the lane (never run here, never refused) until the move aborts (back to Ready, the
    held work in arrival order) or its relay-ready reply is accepted (then it is
    unpublished here and the held work relayed to the target)."""


@attrs.frozen
class SpotClosing:
    """Its authority is Closing: admission is sealed; what was accepted before still runs
    (spec 06 §7 step 2)."""


@attrs.frozen
class SpotClosed:
    """Cleaned up and unpublished (or never published): nothing runs any more."""


@attrs.frozen
class SpotFenced:
    """This node's owner lease was lost: nothing runs and nothing is admitted again."""


SpotState: TypeAlias = (
    SpotStaging | SpotReady | SpotRelocating | SpotClosing | SpotClosed | SpotFenced
)
SPOT_STAGING: Final = SpotStaging()
SPOT_READY: Final = SpotReady()
SPOT_RELOCATING: Final = SpotRelocating()
SPOT_CLOSING: Final = SpotClosing()
SPOT_CLOSED: Final = SpotClosed()
SPOT_FENCED: Final = SpotFenced()


def spot_lease_lost() -> Unavailable:
    return Unavailable("this node's owner lease was lost: the Spot no longer runs here")
