"""Helpers of the router contract suite: ids, messages and a spy wrapper that records the
order of SPI calls across several backends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from zlink_trio.router import (
    AgentRef,
    IdempotencyKey,
    IdempotencyTtls,
    InboundMessage,
    InboundMessageId,
    NodeId,
    Priority,
    ReserverId,
    SessionId,
    TextInput,
    UserInput,
)

S1 = SessionId("s-1")
S2 = SessionId("s-2")
AGENT = AgentRef("agent-x")
OTHER_AGENT = AgentRef("agent-y")
NODE_A = NodeId("node-a")
NODE_B = NodeId("node-b")
NODE_C = NodeId("node-c")
KEY = IdempotencyKey("k-1")

Advance = Callable[[float], Awaitable[None]]
"""The ``advance`` fixture: move the backend's clock forward (defined here, not in
conftest, so ``conftest`` names no module a test imports: tests/contract/store has one too)."""

TTLS = IdempotencyTtls()  # the §11.2 defaults: 24 h / 30 s / 5 min


@attrs.frozen
class Timing:
    """How an SPI test moves time (the ``timing`` fixture).

    Exact (memory: MockClock; ``postgres-frozen``: the database's router clock stepped in
    lockstep): ``advance`` jumps, a reading is exact and :meth:`pick` gives the exact
    value, so those runs check what they always did. Real (``postgres``): ``advance``
    waits that long on the real clock; TTLs are short (:data:`REAL_TIMING`), an instant
    is checked with a bound of :attr:`slack` and :meth:`pick` gives the real-clock value.
    """

    exact: bool
    ttls: IdempotencyTtls
    lease_ttl: float
    slack: float
    """How far a real-clock reading (a statement's latency, a sleep's overshoot) may be off."""

    def pick(self, exact: float, real: float) -> float:
        """``exact`` on an exact clock, else ``real``."""
        return exact if self.exact else real

    def near(self, value: float, expected: float) -> bool:
        """``value == expected`` on an exact clock; within :attr:`slack` on the real one."""
        return value == expected if self.exact else abs(value - expected) <= self.slack


EXACT_TIMING = Timing(exact=True, ttls=TTLS, lease_ttl=30.0, slack=0.0)
REAL_TIMING = Timing(
    exact=False,
    ttls=IdempotencyTtls(primary=1.0, secondary=0.8, forward=1.6),
    lease_ttl=0.9,
    slack=0.25,
)
"""Short TTLs for the real database clock: each test waits about 2 s or less in all."""


def reserver(node: NodeId = NODE_A) -> ReserverId:
    return ReserverId.new(node)


def message(
    text: str,
    *,
    session: SessionId = S1,
    priority: Priority = Priority.NEXT,
    user_input: UserInput | None = None,
    agent: AgentRef = AGENT,
    key: IdempotencyKey | None = None,
) -> InboundMessage:
    return InboundMessage(
        message_id=InboundMessageId.new(),
        session_id=session,
        agent_ref=agent,
        user_input=user_input if user_input is not None else TextInput(text),
        priority=priority,
        delivered_at=trio.current_time(),
        idempotency_key=key,
    )


class CallLog:
    """One ordered log of ``"<name>.<method>"`` calls shared by several spies."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def spy(self, name: str, target: Any) -> Any:
        return _Spy(self, name, target)

    def of(self, name: str) -> list[str]:
        return [c for c in self.calls if c.startswith(name + ".")]


class _Spy:
    def __init__(self, log: CallLog, name: str, target: Any) -> None:
        self._log, self._name, self._target = log, name, target

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            kind = getattr(args[0], "kind", None) if args else None
            suffix = f":{kind.name}" if attr == "publish" and kind is not None else ""
            self._log.calls.append(f"{self._name}.{attr}{suffix}")
            return value(*args, **kwargs)

        return call


def raising(exc: BaseException) -> Callable[..., Any]:
    async def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise exc

    return fail


class DroppingBus:
    """A node's view of the bus that never hears the given kinds (it publishes normally)."""

    def __init__(self, target: Any, drop: set[str]) -> None:
        self._target, self._drop = target, drop
        self.dropped = 0

    async def publish(self, signal: Any) -> None:
        await self._target.publish(signal)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Any]:
        send, receive = trio.open_memory_channel[Any](1024)
        async with self._target.subscribe() as inner, trio.open_nursery() as nursery:

            async def pump() -> None:
                async with send:
                    async for signal in inner:
                        if signal.kind.name in self._drop:
                            self.dropped += 1
                        else:
                            await send.send(signal)

            nursery.start_soon(pump)
            try:
                yield receive
            finally:
                nursery.cancel_scope.cancel()
