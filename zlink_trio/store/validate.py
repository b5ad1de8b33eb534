"""Argument checks every Location Store makes before it touches its state.

One set, called by :mod:`zlink_trio.store.memory` and :mod:`zlink_trio.store.postgres`
alike, so both stores refuse the same arguments with the same error and message (the
Store contract suite runs the same misuse against both). Each check raises before any
state changes and returns the value normalised for the implementation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ..errors import DescriptorConflict
from ..ids import U63_MAX, NodeGeneration, NodeRid

if TYPE_CHECKING:
    from .api import NodeDescriptor, ObjectKey

__all__ = [
    "MAX_LIST_LIMIT",
    "check_capacity",
    "check_clock_advance",
    "check_expected_version",
    "check_list_limit",
    "check_owner_changes",
    "check_registration",
    "check_replay_cursor",
    "check_retention",
    "check_ttl",
]

MAX_LIST_LIMIT: Final = 1000
"""The largest page ``list_rows`` returns."""


def _is_u63(value: object) -> bool:
    return type(value) is int and 0 <= value <= U63_MAX


def check_expected_version(expected_version: object) -> int:
    """The ``expected_version`` of a CAS: an int in 0..2**63-1 (store versions are
    positive int8 values), else ``ValueError``."""
    if not _is_u63(expected_version):
        raise ValueError(f"expected_version must be an int in 0..2**63-1, got {expected_version!r}")
    return expected_version  # type: ignore[return-value]


def check_owner_changes(changes: object) -> tuple[tuple[ObjectKey, int], ...]:
    """The ``changes`` of ``change_owners``: a non-empty sequence of ``(ObjectKey,
    expected_version)`` pairs naming each key once, else ``ValueError`` (the versions as
    :func:`check_expected_version`)."""
    from .api import ObjectKey  # api imports this module

    if not isinstance(changes, Sequence) or isinstance(changes, str | bytes):
        raise ValueError(f"changes must be a sequence of (key, version), got {changes!r}")
    checked: list[tuple[ObjectKey, int]] = []
    seen: set[ObjectKey] = set()
    for change in changes:
        if not isinstance(change, tuple) or len(change) != 2:
            raise ValueError(f"each change must be a (key, expected_version) pair, got {change!r}")
        key, version = change
        if not isinstance(key, ObjectKey):
            raise ValueError(f"a change's key must be an ObjectKey, got {key!r}")
        if key in seen:
            raise ValueError(f"changes name {key!r} twice")
        seen.add(key)
        checked.append((key, check_expected_version(version)))
    if not checked:
        raise ValueError("changes must name at least one row")
    return tuple(checked)


def check_replay_cursor(value: object) -> int:
    """A ``RecoveryPointer.replay_cursor``: an int in 0..2**63-1, else ``ValueError``."""
    if not _is_u63(value):
        raise ValueError(f"replay_cursor must be an int in 0..2**63-1, got {value!r}")
    return value  # type: ignore[return-value]


def check_retention(retain_for: float | None) -> float:
    """A retention in seconds (``None``: forever, returned as ``math.inf``); >= 0."""
    if retain_for is None:
        return math.inf
    if not retain_for >= 0:
        raise ValueError(f"retain_for must be >= 0, got {retain_for!r}")
    return float(retain_for)


def check_attempt_ttl(value: object) -> float | None:
    """A reservation's ``attempt_ttl``: None, or a finite float >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"attempt_ttl must be a number or None, got {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"attempt_ttl must be finite and >= 0, got {value!r}")
    return float(value)


def check_grace(value: object) -> float:
    """A reclaim ``grace``: a finite float >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"grace must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"grace must be finite and >= 0, got {value!r}")
    return float(value)


def check_ttl(lease_ttl: float) -> float:
    """A lease time-to-live in seconds: finite and > 0."""
    if not (lease_ttl > 0 and math.isfinite(lease_ttl)):
        raise ValueError(f"lease_ttl must be finite and > 0, got {lease_ttl!r}")
    return float(lease_ttl)


def check_list_limit(limit: object) -> int:
    """The page size of ``list_rows``: an int in 1..:data:`MAX_LIST_LIMIT`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise ValueError(f"limit must be in 1..{MAX_LIST_LIMIT}, got {limit!r}")
    return limit


def check_capacity(capacity: object) -> int:
    """A node's Actor/Spot capacity: an int >= 0."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
    return capacity


def check_clock_advance(seconds: float) -> float:
    """A store-clock step of the test hook: finite and >= 0 (store time never goes back)."""
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise ValueError(f"store time only moves forward, got {seconds!r}")
    return float(seconds)


def check_registration(
    node_rid: NodeRid,
    node_generation: NodeGeneration,
    descriptors: Sequence[NodeDescriptor],
    *,
    capacity: object,
    lease_ttl: float,
) -> tuple[NodeDescriptor, ...]:
    """The arguments of ``register_node``; returns the descriptors as a tuple.

    Raises:
        ValueError: a bad ``lease_ttl`` or ``capacity``, or a descriptor naming another
            node lifecycle.
        DescriptorConflict: one mesh published, or one Entry Spot id claimed, twice.
    """
    batch = tuple(descriptors)
    check_ttl(lease_ttl)
    check_capacity(capacity)
    for descriptor in batch:
        if descriptor.node_rid != node_rid or descriptor.node_generation != node_generation:
            raise ValueError("every descriptor must name the registering node lifecycle")
    meshes = [d.mesh_name for d in batch]
    if len(set(meshes)) != len(meshes):
        raise DescriptorConflict("a mesh is published twice in one registration")
    entries = [d.entry_spot_id for d in batch]
    if len(set(entries)) != len(entries):
        raise DescriptorConflict("an Entry Spot id is claimed twice in one registration")
    return batch
