"""Re-export of :mod:`zlink_trio.objects.durable` for the Actor message path (the
messenger imports ``remaining_ms`` from here); new code imports from ``objects``."""

from __future__ import annotations

from ..objects.durable import remaining_ms, run_durable

__all__ = ["remaining_ms", "run_durable"]
