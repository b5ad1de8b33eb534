"""The one place that counts and logs flow-trace events (:class:`FlowEvent`).

One :class:`FlowTrace` per server lifecycle is handed to every role; a role calls
:meth:`FlowTrace.emit` where the outcome happens. ``emit`` counts the event and writes ONE
log line at the event's level on the event's logger (:attr:`FlowEvent.logger_name`, the
role's own logger), without a traceback unless the caller asks for one (an unexpected
failure's first occurrence). Counting costs one dict update; formatting happens only when
the level is enabled.

Statistics records read the counts (:meth:`FlowTrace.count`, :meth:`FlowTrace.snapshot`);
tests observe them through ``zlink_trio.testing.flow_counts(server)``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import final

from .events import FlowEvent

__all__ = ["FlowTrace"]


@final
class FlowTrace:
    """Counts and logs flow-trace events of one server lifecycle."""

    __slots__ = ("_counts", "_loggers")

    def __init__(self) -> None:
        self._counts: dict[FlowEvent, int] = dict.fromkeys(FlowEvent, 0)
        self._loggers = {event: logging.getLogger(event.logger_name) for event in FlowEvent}

    def emit(
        self, event: FlowEvent, detail: str = "", *args: object, traceback: bool = False
    ) -> None:
        """Count ``event`` and log one line: ``<name>: <detail % args>`` (with the
        exception being handled when ``traceback``)."""
        self._counts[event] += 1
        logger = self._loggers[event]
        if logger.isEnabledFor(event.level):
            if detail:
                logger.log(
                    event.level, "%s: " + detail, event.value, *args, exc_info=traceback or None
                )
            else:
                logger.log(event.level, "%s", event.value, exc_info=traceback or None)

    def count(self, event: FlowEvent) -> int:
        return self._counts[event]

    def snapshot(self) -> Mapping[FlowEvent, int]:
        """A read-only copy of every count (every member present, zero included)."""
        return MappingProxyType(dict(self._counts))
