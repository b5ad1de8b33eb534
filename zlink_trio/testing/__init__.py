"""Public test helpers for applications and for zlink_trio's own suites.

Only re-exports live here; the implementation is in the submodules.
"""

from .store import (
    STORE_READ_METHODS as STORE_READ_METHODS,
    STORE_WRITE_METHODS as STORE_WRITE_METHODS,
    CountingStore as CountingStore,
    advance_store_clock as advance_store_clock,
)
