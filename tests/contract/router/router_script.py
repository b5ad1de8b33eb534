"""Scripted live sessions for the router's lifecycle and relay tests (spec 10 §5.2, §5.5,
§6.3): each handle has a serial number, every open, turn and close goes to one ordered event
log, and a turn follows a script — frames to emit, virtual seconds to take, whether to
ignore its interrupt, history writes along the way."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs
import trio
from router_app import scaled

from zlink_trio.router import (
    AgentExecutionEvent,
    AgentExecutionResult,
    EventListener,
    LiveSession,
    OpenRequest,
    QueuedInput,
    SessionId,
    SessionRouter,
    TranscriptEntry,
    TurnInput,
    open_session_router,
)


@attrs.define
class Script:
    """What a turn with a given text does."""

    duration: float = 1.0
    frames: Sequence[AgentExecutionEvent] = ()
    """Emitted at the turn's start, all at once (the producer never waits)."""
    late_frames: Sequence[AgentExecutionEvent] = ()
    """Emitted after ``duration`` (a stubborn turn's frames after it was given up on)."""
    stubborn: bool = False
    """Shield the turn from its interrupt."""
    writes: int = 1
    """History appends: one per equal slice of the duration (0: none)."""
    fail: BaseException | None = None
    result: AgentExecutionResult | None = None


@attrs.define
class Stage:
    """The shared application side of a test: scripts, handles, and one event log."""

    scripts: dict[str, Script] = attrs.field(factory=dict)
    log: list[tuple[Any, ...]] = attrs.field(factory=list)
    """(what, session, handle serial, time) in call order; extra kinds append themselves."""
    serials: Any = attrs.field(factory=lambda: itertools.count(1))
    open_handles: dict[int, str] = attrs.field(factory=dict)
    """Serial → session of every handle opened and not closed yet."""
    closes: dict[int, int] = attrs.field(factory=dict)
    running: dict[str, set[int]] = attrs.field(factory=dict)
    """Session → serials of the handles running a turn right now."""
    overlaps: int = 0
    """Times a turn started while another handle of its session ran one (on any node)."""
    on_write: Callable[[str], None] | None = None
    scale: float = 1.0
    """The case's time scale (``Shared.scale``; set by :func:`scripted_cluster`): a script's
    ``duration`` is in the memory run's seconds and lasts ``duration * scale``."""

    def script(self, text: str) -> Script:
        return self.scripts.get(text, Script())

    def record(self, what: str, session: SessionId, serial: int) -> None:
        self.log.append((what, session.value, serial, trio.current_time()))

    def kinds(self, session: SessionId | None = None) -> list[str]:
        return [e[0] for e in self.log if session is None or e[1] == session.value]


class ScriptedSession:
    def __init__(self, stage: Stage, session_id: SessionId) -> None:
        self._stage = stage
        self._session_id = session_id
        self.serial = next(stage.serials)
        stage.open_handles[self.serial] = session_id.value
        stage.record("open", session_id, self.serial)

    @property
    def session_id(self) -> SessionId:
        return self._session_id

    async def run_turn(self, turn: TurnInput, listener: EventListener) -> AgentExecutionResult:
        stage, sid = self._stage, self._session_id
        text = turn.user_input.as_text()
        script = stage.script(text)
        busy = stage.running.setdefault(sid.value, set())
        if busy:
            stage.overlaps += 1
        busy.add(self.serial)
        stage.record("turn start", sid, self.serial)
        try:
            for frame in script.frames:
                listener(frame)
            with trio.CancelScope(shield=script.stubborn):
                slices = max(script.writes, 1)
                for i in range(slices):
                    await trio.sleep(scaled(script.duration, stage.scale) / slices)
                    if i < script.writes:
                        await turn.history.append([TranscriptEntry("user", f"{text}#{i}")])
                        stage.record("write", sid, self.serial)
            for frame in script.late_frames:
                listener(frame)
            if script.fail is not None:
                raise script.fail
            stage.record("turn end", sid, self.serial)
            return script.result or AgentExecutionResult(f"{text}:{self.serial}")
        except trio.Cancelled:
            stage.record("turn interrupted", sid, self.serial)
            raise
        finally:
            busy.discard(self.serial)

    def inject(self, queued: QueuedInput) -> None:
        self._stage.record("inject", self._session_id, self.serial)

    async def aclose(self) -> None:
        stage = self._stage
        stage.closes[self.serial] = stage.closes.get(self.serial, 0) + 1
        stage.open_handles.pop(self.serial, None)
        stage.record("close", self._session_id, self.serial)


class ScriptedOpener:
    def __init__(self, stage: Stage) -> None:
        self._stage = stage
        self.opens = 0

    async def open(self, request: OpenRequest) -> LiveSession:
        self.opens += 1
        return ScriptedSession(self._stage, request.session_id)


class Spied:
    """Wrap an SPI so the named async methods append ``(name, session, None, time)`` to the
    stage's log before they run (and ``fail`` makes one raise instead)."""

    def __init__(
        self, stage: Stage, target: Any, methods: dict[str, str], fail: set[str] | None = None
    ) -> None:
        self._stage, self._target, self._methods = stage, target, methods
        self._fail = fail or set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        label = self._methods.get(name)
        if label is None:
            return value

        async def call(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else None
            session = getattr(first, "session_id", first)
            kind = getattr(first, "kind", None)
            tag = label if kind is None else f"{label}:{kind.name}"
            self._stage.log.append(
                (tag, getattr(session, "value", None), None, trio.current_time())
            )
            if name in self._fail:
                raise RuntimeError(f"{name} failed (injected)")
            return await value(*args, **kwargs)

        return call

    def subscribe(self) -> Any:
        return self._target.subscribe()


@asynccontextmanager
async def scripted_cluster(
    shared: Any, world: Any, registry: Any, stage: Stage, names: list[str], **kwargs: Any
) -> AsyncIterator[list[SessionRouter]]:
    """Routers on the shared SPIs whose handles are :class:`ScriptedSession`\\ s (on the
    time scale of ``shared``)."""
    from router_app import builder

    stage.scale = shared.scale

    async with AsyncExitStack() as stack:
        routers = [
            await stack.enter_async_context(
                open_session_router(
                    builder(
                        shared, world, registry, n, session_opener=ScriptedOpener(stage), **kwargs
                    )
                )
            )
            for n in names
        ]
        yield routers
