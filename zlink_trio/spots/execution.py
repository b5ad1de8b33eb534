"""Execution modes of a User Spot (spec 04 §3, spec 06 §6.1, §8), as types.

* :class:`PerActor` — every member Actor keeps its own gate: member turns run concurrently
  with each other and with the Spot's own turns; Spot state is reached only through
  explicit Spot calls. Its relocation policy is RecreateOnRelocation, nothing else.
* :class:`SpotWide` — the Spot and its member Actors share ONE engine gate (the Spot's):
  at most one of them runs a turn at a time, so member handlers may use the Spot's state
  inside that gate.

An Instance Spot has no members and takes no execution mode.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

__all__ = ["ExecutionMode", "PerActor", "SpotWide"]


@attrs.frozen
class PerActor:
    """Each member Actor keeps its own gate."""


@attrs.frozen
class SpotWide:
    """Members share the Spot's gate."""


ExecutionMode: TypeAlias = PerActor | SpotWide
