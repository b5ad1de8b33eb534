"""The one serial-execution engine (spec 02 §11): lane policy types, lanes, gates, runners.

Only re-exports live here; each concept has its own module:

- :mod:`.lanes` — lane policy types and their transitions (pure values).
- :mod:`.core` — the I/O-free lane core: bounded queues, admission, next-item selection.
- :mod:`.lane` — :class:`Lane`, the trio-facing handle of one lane.
- :mod:`.gate` — :class:`Gate`, a shared execution gate.
- :mod:`.engine` — :class:`Engine` and :func:`open_engine`: ready set and runners.
- :mod:`.oneshot` — :class:`OneShot`, the reply slot of a local ask.
- :mod:`.inline` — :class:`TurnHost`: a turn run in the task that brought its item.
"""

from .core import (
    Admission as Admission,
    Handover as Handover,
    LaneCore as LaneCore,
    LaneLimits as LaneLimits,
)
from .engine import (
    Engine as Engine,
    EngineStatistics as EngineStatistics,
    open_engine as open_engine,
)
from .gate import Gate as Gate
from .inline import TurnHost as TurnHost
from .lane import Lane as Lane, LaneStatistics as LaneStatistics
from .lanes import (
    OPEN as OPEN,
    ActorDeliveryLane as ActorDeliveryLane,
    AwaitingReturn as AwaitingReturn,
    ConnectionClosed as ConnectionClosed,
    LanePolicy as LanePolicy,
    Open as Open,
    RelocationSealed as RelocationSealed,
    SessionLane as SessionLane,
    SessionLaneState as SessionLaneState,
    SpotLane as SpotLane,
    SpotLaneState as SpotLaneState,
    close_connection as close_connection,
    lend_turn as lend_turn,
    return_turn as return_turn,
    seal as seal,
    unseal as unseal,
)
from .oneshot import OneShot as OneShot
