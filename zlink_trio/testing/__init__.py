"""Public test helpers for applications and for zlink_trio's own suites.

Only re-exports live here; the implementation is in the submodules.
"""

from ..mesh.faults import (
    FaultEvent as FaultEvent,
    FaultKind as FaultKind,
    FaultPlan as FaultPlan,
    FaultRule as FaultRule,
)
from ..mesh.tap import (
    TapDirection as TapDirection,
    TapEvent as TapEvent,
    WireTap as WireTap,
)
from ..observe import FlowEvent as FlowEvent
from .actors import (
    entry_spot_statistics as entry_spot_statistics,
    hosted_actors as hosted_actors,
)
from .cluster import (
    Cluster as Cluster,
    instrument as instrument,
    node_of as node_of,
    open_cluster as open_cluster,
    server_app as server_app,
    server_engine as server_engine,
    server_store as server_store,
)
from .cutoff import CutOffStore as CutOffStore
from .descriptors import published_descriptors as published_descriptors
from .flow import flow_count as flow_count, flow_counts as flow_counts
from .history import RecordingStore as RecordingStore, StoreCall as StoreCall
from .postgres import open_private_postgres as open_private_postgres
from .router import crash_session_router as crash_session_router
from .settle import settle as settle
from .spots import (
    forget_spot_member as forget_spot_member,
    hosted_spots as hosted_spots,
    record_spot_member as record_spot_member,
    set_spot_id_source as set_spot_id_source,
    spot_members as spot_members,
    spot_statistics as spot_statistics,
)
from .store import (
    STORE_READ_METHODS as STORE_READ_METHODS,
    STORE_WRITE_METHODS as STORE_WRITE_METHODS,
    CountingStore as CountingStore,
    advance_store_clock as advance_store_clock,
)
from .wrapper import StoreWrapper as StoreWrapper
