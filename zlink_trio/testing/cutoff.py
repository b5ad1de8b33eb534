"""``CutOffStore``: a Location Store one node uses that can be cut off from the real one.

Give it to ONE node (its ``ServerConfig.location_store``) while the others use the inner
store directly: after :meth:`CutOffStore.cut` every call of that node fails with
``Unavailable`` before it reaches the Store, exactly like a network partition between
that node and the Store, while the node's process, its mesh links and its peers go on.
It is how a test makes a zombie: its lease renewals fail, its local admission deadline
passes and it fail-stops, while the Store's clock lets its lease expire for everyone else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, final

import trio

from ..errors import Unavailable
from ..store.api import LocationStore
from .wrapper import StoreWrapper

__all__ = ["CutOffStore"]

T = TypeVar("T")


@final
class CutOffStore(StoreWrapper):
    """Delegates to ``inner`` until :meth:`cut`; from then on (until :meth:`heal`) every
    call raises ``Unavailable`` at once and nothing reaches ``inner``. A call already
    in flight when it is cut finishes normally."""

    def __init__(self, inner: LocationStore) -> None:
        super().__init__(inner)
        self._cut = False
        self.cut_at: float | None = None
        """Trio time of the last :meth:`cut` (None: never cut)."""
        self.refused = 0
        """Calls refused while cut off."""

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Cut the node off from the Store (idempotent)."""
        if not self._cut:
            self._cut = True
            self.cut_at = trio.current_time()

    def heal(self) -> None:
        """Let calls through again."""
        self._cut = False

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        if self._cut:
            await trio.lowlevel.checkpoint()
            self.refused += 1
            raise Unavailable(f"test: this node is cut off from the Location Store ({method})")
        return await call()
