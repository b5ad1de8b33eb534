"""Location Store test helpers: a call-counting wrapper and the store clock hook.

``CountingStore`` is how contract tests observe "Store reads counted" and "Store mutation
count stays 0": wrap the store a node uses, ``reset()``, act, then read ``reads`` and
``writes``. ``advance_store_clock`` moves *store* time (leases, terminal and root
retention) on any store implementing the ``_advance_clock_for_tests`` hook.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Final, TypeVar, final

from ..store.api import LocationStore
from .wrapper import StoreWrapper, advance_store_clock

__all__ = [
    "STORE_READ_METHODS",
    "STORE_WRITE_METHODS",
    "CountingStore",
    "advance_store_clock",
]

T = TypeVar("T")

STORE_READ_METHODS: Final = frozenset(
    {
        "now",
        "read",
        "scan_owned",
        "list_rows",
        "list_nodes",
        "owner_live",
        "list_reclaimable",
        "read_terminal",
        "read_root",
    }
)
"""Protocol methods counted as reads (each is one Store round trip)."""

STORE_WRITE_METHODS: Final = frozenset(
    {
        "reserve",
        "commit_ready",
        "abort_creation",
        "change_owner",
        "change_owners",
        "set_membership",
        "set_recovery",
        "set_relocation",
        "begin_closing",
        "release",
        "reclaim",
        "register_node",
        "renew_lease",
        "remove_node",
        "record_terminal",
        "put_root",
        "delete_root",
    }
)
"""Protocol methods counted as writes (mutation attempts, won, lost or raised)."""


@final
class CountingStore(StoreWrapper):
    """A :class:`~zlink_trio.store.api.LocationStore` that delegates every call to
    ``inner`` and counts it per method, before the call runs (failed calls count too).
    ``recovery_epoch`` is local state, not a call, and is not counted."""

    def __init__(self, inner: LocationStore) -> None:
        super().__init__(inner)
        self._calls: Counter[str] = Counter()

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        self._calls[method] += 1
        return await call()

    @property
    def calls(self) -> Mapping[str, int]:
        """A read-only snapshot of the per-method counts (methods never called absent)."""
        return MappingProxyType(dict(self._calls))

    def count(self, method: str) -> int:
        return self._calls[method]

    @property
    def reads(self) -> int:
        return sum(n for name, n in self._calls.items() if name in STORE_READ_METHODS)

    @property
    def writes(self) -> int:
        return sum(n for name, n in self._calls.items() if name in STORE_WRITE_METHODS)

    def reset(self) -> None:
        self._calls.clear()
