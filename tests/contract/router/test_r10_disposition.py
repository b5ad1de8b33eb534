"""SubmitDisposition (spec 10 §9.1) and its result handle."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from zlink_trio.router import (
    AgentExecutionResult,
    DispositionKind,
    ExecutedLocally,
    Forwarded,
    InboundMessageId,
    SubmitDisposition,
    TurnFuture,
    TurnId,
)
from zlink_trio.testing import settle

RESULT = AgentExecutionResult("done")


def test_r10_109_both_kinds_carry_a_turn_id_and_a_future() -> None:
    """R10-109: EXECUTED_LOCALLY and FORWARDED both carry a TurnId and a completing result;
    only FORWARDED has an inbound message id, and it may be empty."""
    assert [k.name for k in DispositionKind] == ["EXECUTED_LOCALLY", "FORWARDED"]
    turn = TurnId.new()
    local = ExecutedLocally(turn, TurnFuture())
    forwarded = Forwarded(turn, TurnFuture(), InboundMessageId.new())
    attached = Forwarded(turn, TurnFuture())
    for d in (local, forwarded, attached):
        assert d.turn_id == turn
        assert isinstance(d.result, TurnFuture)
    assert (local.kind, forwarded.kind) == (
        DispositionKind.EXECUTED_LOCALLY,
        DispositionKind.FORWARDED,
    )
    assert forwarded.inbound_message_id is not None
    assert attached.inbound_message_id is None
    assert "inbound_message_id" not in attrs.fields_dict(ExecutedLocally)


def test_r10_111_the_disposition_names_a_node_not_immediacy() -> None:
    """R10-111: the disposition is its own type, on the cluster axis (which node runs the
    turn): exactly the two kinds, no EXECUTED/QUEUED of a session's own submit outcome."""
    names = {k.name for k in DispositionKind}
    assert names == {"EXECUTED_LOCALLY", "FORWARDED"}
    assert not names & {"EXECUTED", "QUEUED"}
    d: SubmitDisposition = ExecutedLocally(TurnId.new(), TurnFuture.completed(RESULT))
    assert isinstance(d, ExecutedLocally | Forwarded)


async def test_turn_future_completes_exactly_once() -> None:
    """§5.4: at-least-once signals may complete a result twice; the first one wins."""
    future = TurnFuture()
    got: list[AgentExecutionResult] = []

    async def waiter() -> None:
        got.append(await future)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await settle()
        assert not future.done()
        assert future.set_result(RESULT)
        assert not future.set_result(AgentExecutionResult("second"))
        assert not future.set_exception(RuntimeError("late"))
    assert got == [RESULT, RESULT]
    assert await future.wait() == RESULT


async def test_turn_future_raises_its_exception_to_every_waiter() -> None:
    future = TurnFuture()
    assert future.set_exception(KeyError("gone"))
    for _ in range(2):
        with pytest.raises(KeyError):
            await future
    assert TurnFuture.completed(RESULT).done()
