"""What ``submit`` answers (spec 10 §9.1): a :data:`SubmitDisposition` naming where the turn
runs, always with its TurnId and a :class:`TurnFuture` that completes.

The disposition axis is the cluster (which node runs the turn), not immediacy inside one
live session: it is deliberately a different type from a session's own submit outcome.
"""

from __future__ import annotations

import enum
from collections.abc import Generator
from typing import Any, ClassVar, Literal, TypeAlias, final

import attrs
import trio

from .events import AgentExecutionResult
from .ids import InboundMessageId, TurnId

__all__ = ["DispositionKind", "ExecutedLocally", "Forwarded", "SubmitDisposition", "TurnFuture"]


class DispositionKind(enum.Enum):
    EXECUTED_LOCALLY = "EXECUTED_LOCALLY"
    FORWARDED = "FORWARDED"


@attrs.frozen
class _Value:
    value: AgentExecutionResult


@attrs.frozen(eq=False)
class _Error:
    error: BaseException


@final
class TurnFuture:
    """The awaitable result of one turn: ``result = await future``.

    Completes exactly once, with a result or an exception; later completions are refused
    (``False``), so duplicated signals (at-least-once, §5.4) cannot complete it twice. Any
    number of tasks may await it.
    """

    __slots__ = ("_done", "_outcome")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._outcome: _Value | _Error | None = None

    @classmethod
    def completed(cls, result: AgentExecutionResult) -> TurnFuture:
        """An already-completed future (§9.2 row 4: a cached result)."""
        f = cls()
        f.set_result(result)
        return f

    def done(self) -> bool:
        return self._outcome is not None

    def set_result(self, result: AgentExecutionResult) -> bool:
        return self._complete(_Value(result))

    def set_exception(self, error: BaseException) -> bool:
        return self._complete(_Error(error))

    def _complete(self, value: _Value | _Error) -> bool:
        if self._outcome is not None:
            return False
        self._outcome = value
        self._done.set()
        return True

    async def wait(self) -> AgentExecutionResult:
        await self._done.wait()
        settled = self._outcome
        assert settled is not None
        if isinstance(settled, _Error):
            raise settled.error
        return settled.value

    def __await__(self) -> Generator[Any, None, AgentExecutionResult]:
        return self.wait().__await__()

    def __repr__(self) -> str:
        state = "pending" if self._outcome is None else "done"
        return f"<TurnFuture {state}>"


@attrs.frozen(eq=False)
class ExecutedLocally:
    """This node runs (or ran) the turn."""

    turn_id: TurnId
    result: TurnFuture
    kind: ClassVar[Literal[DispositionKind.EXECUTED_LOCALLY]] = DispositionKind.EXECUTED_LOCALLY


@attrs.frozen(eq=False)
class Forwarded:
    """Another node runs the turn; ``result`` still completes (through the TURN_RESULT rail
    or the idempotency-store poll, §7.1 F7). ``inbound_message_id`` is None when the call
    attached to a turn already in flight (§9.2 row 3)."""

    turn_id: TurnId
    result: TurnFuture
    inbound_message_id: InboundMessageId | None = None
    kind: ClassVar[Literal[DispositionKind.FORWARDED]] = DispositionKind.FORWARDED


SubmitDisposition: TypeAlias = ExecutedLocally | Forwarded
