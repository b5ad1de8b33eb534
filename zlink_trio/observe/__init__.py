"""Observability: the closed vocabulary of flow-trace events and the one place that counts
and logs them (DESIGN.md §3 ``observe/``)."""

from .events import FlowEvent as FlowEvent
from .trace import FlowTrace as FlowTrace
