"""A fake application for router contract tests: live sessions whose turns take scripted
(virtual) time, read the shared history at start and append to it at the end, and log every
turn's interval; an opener counting opens; a runtime registry counting lookups and closes."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs
import trio

from zlink_trio.router import (
    AgentExecutionEvent,
    AgentExecutionResult,
    AgentRef,
    AssistantTextDelta,
    DeploymentMode,
    EventListener,
    IdempotencyStore,
    LiveSession,
    NodeId,
    OpenRequest,
    QueuedInput,
    SessionId,
    SessionInbox,
    SessionLeaseStore,
    SessionMetrics,
    SessionRecordStore,
    SessionRouter,
    SessionRouterBuilder,
    SessionRouterConfig,
    SessionSignalBus,
    TranscriptEntry,
    TurnInput,
    open_session_router,
)


@attrs.define
class TurnLog:
    node: str
    text: str
    start: float
    end: float | None = None
    history_len: int = 0
    interrupted: bool = False


@attrs.define
class World:
    """Shared application-side observations across every node of a test."""

    turns: list[TurnLog] = attrs.field(factory=list)
    duration: Callable[[str], float] = lambda _text: 1.0
    """A turn's length in the memory run's (virtual) seconds; it lasts ``duration * scale``."""
    scale: float = 1.0
    """The case's time scale (:attr:`Shared.scale`): 1 except on a scaled PostgreSQL run."""
    opens: dict[str, int] = attrs.field(factory=dict)
    closes: dict[str, int] = attrs.field(factory=dict)
    closed: list[tuple[str, float]] = attrs.field(factory=list)
    """(session id, time) of every handle close, in call order."""
    injected: list[str] = attrs.field(factory=list)
    failing: set[str] = attrs.field(factory=set)
    """Texts whose turn raises at its end (after its duration)."""
    runtime_lookups: int = 0
    runtime_constructions: int = 0
    runtime_closes: int = 0
    open_attributes: list[dict[str, Any]] = attrs.field(factory=list)
    open_options: list[dict[str, Any]] = attrs.field(factory=list)
    turn_options: list[dict[str, Any]] = attrs.field(factory=list)


class FakeRuntime:
    def __init__(self, world: World, agent: AgentRef) -> None:
        world.runtime_constructions += 1
        self._world = world
        self._agent = agent

    @property
    def agent_ref(self) -> AgentRef:
        return self._agent

    def close(self) -> None:
        self._world.runtime_closes += 1


class Registry:
    """The bootstrap's runtimes, registered once."""

    def __init__(self, world: World, agents: list[AgentRef]) -> None:
        self._world = world
        self._runtimes = {a: FakeRuntime(world, a) for a in agents}
        world.runtime_constructions = 0  # count constructions after bootstrap only

    def lookup(self, agent_ref: AgentRef, context_discriminator: str | None) -> FakeRuntime:
        self._world.runtime_lookups += 1
        return self._runtimes[agent_ref]


class FakeSession:
    def __init__(
        self, world: World, node: str, session_id: SessionId, runtime: FakeRuntime
    ) -> None:
        self._world = world
        self._node = node
        self._session_id = session_id
        self.runtime = runtime

    @property
    def session_id(self) -> SessionId:
        return self._session_id

    async def run_turn(self, turn: TurnInput, listener: EventListener) -> AgentExecutionResult:
        text = turn.user_input.as_text()
        history = await turn.history.load()
        self._world.turn_options.append(turn.submit_options.as_dict())
        listener(AssistantTextDelta(f"thinking about {text}"))
        log = TurnLog(self._node, text, trio.current_time(), history_len=len(history))
        self._world.turns.append(log)
        try:
            await trio.sleep(scaled(self._world.duration(text), self._world.scale))
        except trio.Cancelled:
            log.interrupted = True
            log.end = trio.current_time()
            raise
        if text in self._world.failing:
            log.end = trio.current_time()
            raise RuntimeError(f"{text} failed")
        await turn.history.append(
            [
                TranscriptEntry("user", text, turn.turn_id),
                TranscriptEntry("assistant", f"re:{text}"),
            ]
        )
        log.end = trio.current_time()
        return AgentExecutionResult(f"{self._node}:{text}:{len(history)}")

    def inject(self, queued: QueuedInput) -> None:
        self._world.injected.append(queued.user_input.as_text())

    async def aclose(self) -> None:
        self._world.closes[self._node] = self._world.closes.get(self._node, 0) + 1
        self._world.closed.append((self._session_id.value, trio.current_time()))


class Opener:
    def __init__(self, world: World, node: str, registry: Registry) -> None:
        self._world, self._node, self._registry = world, node, registry

    async def open(self, request: OpenRequest) -> LiveSession:
        self._world.opens[self._node] = self._world.opens.get(self._node, 0) + 1
        self._world.open_attributes.append(request.open_attributes.as_dict())
        self._world.open_options.append(request.options.as_dict())
        runtime = self._registry.lookup(request.agent_ref, request.context_discriminator)
        return FakeSession(self._world, self._node, request.session_id, runtime)


PG_SLACK = 2.0
"""How late, on PostgreSQL's real clock, an instant a memory run checks exactly may be
(statement latency on a loaded machine): far less than any timeout or poll tick such a
check tells the instant apart from."""


@attrs.frozen
class Shared:
    records: SessionRecordStore
    leases: SessionLeaseStore
    inbox: SessionInbox
    bus: SessionSignalBus
    idempotency: IdempotencyStore
    config: SessionRouterConfig | None = None
    """The cluster's default config (None: the §11.2 defaults); the PostgreSQL backend's
    real-clock runs use short TTLs."""
    scale: float = 1.0
    """The factor every duration of the case is multiplied by: 1 in memory and for the
    :data:`ROUTER_PG_CASES`; below 1 for a scaled PostgreSQL case
    (``ROUTER_PG_SCALED``: its config, turn lengths, waits and instants all shrink alike)."""
    slack: float = PG_SLACK
    """How late (real seconds) an instant :func:`on_time` checks may be on PostgreSQL."""

    def s(self, seconds: float) -> float:
        """``seconds`` (the memory run's number) on this run's time scale: unchanged unless
        the case is scaled."""
        return scaled(seconds, self.scale)

    def by(self, seconds: float) -> float:
        """The latest a reading of the instant ``seconds`` (the memory run's number) may be:
        ``seconds`` in memory, ``s(seconds) + slack`` on PostgreSQL's real clock."""
        return seconds if self.config is None else self.s(seconds) + self.slack

    def router_config(self, **fields: Any) -> SessionRouterConfig:
        """``SessionRouterConfig(**fields)`` — what the memory run builds — with every
        duration (given or default) on this run's time scale."""
        return scaled_config(SessionRouterConfig(**fields), self.scale)


SCALED_FIELDS = (
    "idle_ttl",
    "lock_lease",
    "lock_extend_interval",
    "status_heartbeat_interval",
    "holder_loss_sweep_interval",
    "cache_sweep_interval",
    "idempotency_primary_ttl",
    "idempotency_secondary_ttl",
    "idempotency_forward_ttl",
    "release_interrupt_timeout",
    "handle_close_timeout",
)
"""The ``SessionRouterConfig`` durations on Trio's clock (so on the time scale of a case);
``metrics_drain_timeout`` and ``inject_timeout`` are wall-clock bounds of threads, on no
test's MockClock, and stay as they are."""


def scaled(seconds: float, scale: float) -> float:
    """``seconds * scale``; exactly ``seconds`` (the same object) when ``scale`` is 1."""
    return seconds if scale == 1.0 else seconds * scale


def scaled_config(config: SessionRouterConfig, scale: float) -> SessionRouterConfig:
    """``config`` with every field of :data:`SCALED_FIELDS` times ``scale`` (``config``
    itself when ``scale`` is 1)."""
    if scale == 1.0:
        return config
    return attrs.evolve(config, **{f: getattr(config, f) * scale for f in SCALED_FIELDS})


def builder(
    shared: Shared,
    world: World,
    registry: Registry,
    node: str,
    *,
    config: SessionRouterConfig | None = None,
    metrics: SessionMetrics | None = None,
    **overrides: Any,
) -> SessionRouterBuilder:
    fields: dict[str, Any] = {
        "mode": DeploymentMode.DISTRIBUTED,
        "node_id": NodeId(node),
        "record_store": shared.records,
        "lease_store": shared.leases,
        "inbox": shared.inbox,
        "signal_bus": shared.bus,
        "idempotency_store": shared.idempotency,
        "session_opener": Opener(world, node, registry),
        "config": config or shared.config or SessionRouterConfig(),
        "metrics": metrics or SessionMetrics(),
    }
    fields.update(overrides)
    return SessionRouterBuilder(**fields)


@asynccontextmanager
async def cluster(
    shared: Shared, world: World, registry: Registry, nodes: list[str], **kwargs: Any
) -> AsyncIterator[list[SessionRouter]]:
    async with AsyncExitStack() as stack:
        routers = [
            await stack.enter_async_context(
                open_session_router(builder(shared, world, registry, n, **kwargs))
            )
            for n in nodes
        ]
        yield routers


def on_time(shared: Shared, elapsed: float, expected: float) -> bool:
    """``elapsed == expected`` in memory (the MockClock is exact); on PostgreSQL (the real
    clock: ``shared.config`` is set) ``e <= elapsed <= e + shared.slack`` where ``e`` is
    ``expected`` on the case's time scale (``shared.s(expected)``; the slack is
    ``PG_SLACK`` for an unscaled case)."""
    if shared.config is None:
        return elapsed == expected
    target = shared.s(expected)
    return target - 0.01 <= elapsed <= target + shared.slack


def all_on_time(shared: Shared, readings: list[float], expected: list[float]) -> bool:
    """``readings == expected`` in memory; on PostgreSQL as many readings, each
    :func:`on_time`."""
    return len(readings) == len(expected) and all(
        on_time(shared, r, e) for r, e in zip(readings, expected, strict=True)
    )


def near(shared: Shared, value: float, expected: float) -> bool:
    """``value == expected`` in memory; on PostgreSQL ``|value - shared.s(expected)|`` within
    ``shared.slack`` (a time the database recorded, translated to Trio's clock by an offset
    measured once, may read a little early as well as late)."""
    if shared.config is None:
        return value == expected
    return abs(value - shared.s(expected)) <= shared.slack


def no_overlap(turns: list[TurnLog]) -> bool:
    spans = sorted((t.start, t.end if t.end is not None else float("inf")) for t in turns)
    return all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


def frames(_e: AgentExecutionEvent) -> None:
    return None


async def start_crashable(
    nursery: trio.Nursery, node_builder: SessionRouterBuilder
) -> SessionRouter:
    """Serve a router in a task of its own, so ``crash_session_router`` can tear it down
    without cancelling the test. Cancelling ``nursery`` closes it normally (if it never
    crashed)."""

    async def serve(task_status: trio.TaskStatus[SessionRouter] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_session_router(node_builder) as router:
            task_status.started(router)
            await trio.sleep_forever()

    router: SessionRouter = await nursery.start(serve)
    return router
