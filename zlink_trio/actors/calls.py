"""Submit-once fluent calls: the shared base of :mod:`zlink_trio.objects.calls` (used by
Actor and Spot calls alike)."""

from __future__ import annotations

from ..objects.calls import FluentCall, call_deadline, check_timeout, yield_to_caller

__all__ = ["FluentCall", "call_deadline", "check_timeout", "yield_to_caller"]
