"""The one place that counts and logs flow-trace events (:class:`FlowEvent`).

One :class:`FlowTrace` per server lifecycle is handed to every role; a role calls
:meth:`FlowTrace.emit` where the outcome happens. ``emit`` counts the event and writes ONE
log line at the event's level on the ``zlink_trio.flow`` logger (no traceback: an event is
an expected outcome; unexpected failures are logged where they happen). Counting costs one
dict update; formatting happens only when the level is enabled.

Statistics records read the counts (:meth:`FlowTrace.count`, :meth:`FlowTrace.snapshot`);
tests observe them through ``zlink_trio.testing.flow_counts(server)``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, final

from .events import FlowEvent

__all__ = ["FLOW_LOGGER", "FlowTrace"]

FLOW_LOGGER: Final = "zlink_trio.flow"

_logger = logging.getLogger(FLOW_LOGGER)


@final
class FlowTrace:
    """Counts and logs flow-trace events of one server lifecycle."""

    __slots__ = ("_counts", "_logger")

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._counts: dict[FlowEvent, int] = dict.fromkeys(FlowEvent, 0)
        self._logger = _logger if logger is None else logger

    def emit(self, event: FlowEvent, detail: str = "", *args: object) -> None:
        """Count ``event`` and log one line: ``<name>: <detail % args>``."""
        self._counts[event] += 1
        logger = self._logger
        if logger.isEnabledFor(event.level):
            if detail:
                logger.log(event.level, "%s: " + detail, event.value, *args)
            else:
                logger.log(event.level, "%s", event.value)

    def count(self, event: FlowEvent) -> int:
        return self._counts[event]

    def snapshot(self) -> Mapping[FlowEvent, int]:
        """A read-only copy of every count (every member present, zero included)."""
        return MappingProxyType(dict(self._counts))
