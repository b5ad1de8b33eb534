"""SessionSignalBus contract (spec 10 §2, §3.3, §5.4, §10.1): seven kinds on two channels,
decoded plain primitives, unknown kinds dropped, the YIELD shim."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
import trio.testing
from router_kit import NODE_A, NODE_B, S1

from zlink_trio.router import (
    Channel,
    InterruptReason,
    SessionSignal,
    SessionSignalBus,
    SignalKind,
    channel_for,
    interrupt_signal,
    requests_hand_off,
    yield_signals,
)

NewBus = Callable[[], SessionSignalBus]
Settle = Callable[[SessionSignalBus], Awaitable[None]]


def _signal(kind: SignalKind, n: int = 0) -> SessionSignal:
    return SessionSignal(kind=kind, session_id=S1, origin=NODE_A, payload={"n": n})


def _drain(receive: trio.MemoryReceiveChannel[SessionSignal]) -> list[SessionSignal]:
    got: list[SessionSignal] = []
    while True:
        try:
            got.append(receive.receive_nowait())
        except trio.WouldBlock:
            return got


async def test_r10_09_exactly_seven_kinds(new_bus: NewBus, settle: Settle) -> None:
    """R10-09: the seven kinds, and every signal a subscriber receives is one of them."""
    assert [k.name for k in SignalKind] == [
        "INTERRUPT",
        "EVICT",
        "YIELD",
        "MESSAGE_ENQUEUED",
        "TURN_RESULT",
        "EVENT",
        "STATUS",
    ]
    bus = new_bus()
    async with bus.subscribe() as receive:
        for kind in SignalKind:
            await bus.publish(_signal(kind))
        await settle(bus)
        got = _drain(receive)
    assert [s.kind for s in got if s.kind in SignalKind] == list(SignalKind)


async def test_r10_18_channels_by_frequency_and_every_kind_is_heard(
    new_bus: NewBus, settle: Settle
) -> None:
    """R10-18: EVENT and STATUS on the events channel, the other five on control; a
    subscriber hears both channels, so every kind arrives at every subscriber."""
    assert {k for k in SignalKind if channel_for(k) is Channel.EVENTS} == {
        SignalKind.EVENT,
        SignalKind.STATUS,
    }
    assert all(
        channel_for(k) is Channel.CONTROL for k in SignalKind if k.name not in ("EVENT", "STATUS")
    )
    bus = new_bus()
    async with bus.subscribe() as first, bus.subscribe() as second:
        for kind in SignalKind:
            await bus.publish(_signal(kind))
        await settle(bus)
        for receive in (first, second):
            assert sorted(s.kind.name for s in _drain(receive)) == sorted(
                k.name for k in SignalKind
            )


async def test_r10_03_subscribers_receive_decoded_plain_values(
    new_bus: NewBus, settle: Settle
) -> None:
    """R10-03 (bus side): what arrives was serialized and decoded: an equal signal, never
    the published object, with payloads as plain dicts and lists."""
    bus = new_bus()
    sent = SessionSignal(
        kind=SignalKind.TURN_RESULT,
        session_id=S1,
        origin=NODE_B,
        payload={"result": {"text": "hi", "tags": ["a", "b"]}, "n": 3},
    )
    async with bus.subscribe() as receive:
        await bus.publish(sent)
        with trio.fail_after(10):
            got = await receive.receive()
    assert got == sent
    assert got is not sent
    assert got.payload is not sent.payload
    assert type(got.payload["result"]) is dict


async def test_r10_44_an_unknown_kind_drops_the_whole_signal(
    new_bus: NewBus,
    inject_raw: Callable[[SessionSignalBus, str], Awaitable[None]],
    settle: Settle,
) -> None:
    """R10-44: a signal of kind "FOO" reaches no subscriber and changes nothing; the
    subscription stays alive and handles later signals."""
    bus = new_bus()
    async with bus.subscribe() as receive:
        await inject_raw(bus, '{"kind":"FOO","sessionId":"s-1","origin":"node-a","payload":{}}')
        await inject_raw(bus, "not json at all")
        await bus.publish(_signal(SignalKind.EVICT, 7))
        await settle(bus)
        got = _drain(receive)
    assert got == [_signal(SignalKind.EVICT, 7)]


async def test_r10_17_yield_goes_out_with_the_legacy_interrupt(
    new_bus: NewBus, settle: Settle
) -> None:
    """R10-17 (signal side): a hand-off request is YIELD plus INTERRUPT(SESSION_RELEASED),
    both delivered; a receiver treats either one alone as the hand-off request, and no other
    INTERRUPT as one. (Making the pair one hand-off is the router's.)"""
    bus = new_bus()
    async with bus.subscribe() as receive:
        for signal in yield_signals(S1, NODE_B):
            await bus.publish(signal)
        await settle(bus)
        got = _drain(receive)
    assert [s.kind for s in got] == [SignalKind.YIELD, SignalKind.INTERRUPT]
    assert got[1].payload["reason"] == "SESSION_RELEASED"
    assert all(requests_hand_off(s) for s in got)
    assert all(s.origin == NODE_B for s in got)
    assert not requests_hand_off(interrupt_signal(S1, NODE_B, InterruptReason.USER))
    assert not requests_hand_off(_signal(SignalKind.EVICT))


async def test_signals_published_while_not_subscribed_are_not_delivered(
    new_bus: NewBus, settle: Settle
) -> None:
    """§10.1 row 3: signals sent while a node is not subscribed are lost; a new subscription
    hears only later ones."""
    bus = new_bus()
    await bus.publish(_signal(SignalKind.INTERRUPT, 1))
    async with bus.subscribe() as receive:
        await bus.publish(_signal(SignalKind.INTERRUPT, 2))
        await settle(bus)
        assert [s.payload["n"] for s in _drain(receive)] == [2]
    await bus.publish(_signal(SignalKind.INTERRUPT, 3))  # nobody listens: no error


async def test_a_signal_over_the_notify_limit_arrives_whole(
    new_bus: NewBus, settle: Settle
) -> None:
    """§5.4: a signal far over PostgreSQL's 8,000-byte NOTIFY payload (an EVENT carrying a
    long text delta) reaches every subscriber intact, between two small ones."""
    bus = new_bus()
    big = SessionSignal(
        kind=SignalKind.EVENT, session_id=S1, origin=NODE_A, payload={"text": "x" * 50_000}
    )
    async with bus.subscribe() as first, bus.subscribe() as second:
        await bus.publish(_signal(SignalKind.EVENT, 1))
        await bus.publish(big)
        await bus.publish(_signal(SignalKind.EVENT, 2))
        await settle(bus)
        for receive in (first, second):
            got = _drain(receive)
            assert len(got) == 3
            assert big in got
            assert _signal(SignalKind.EVENT, 1) in got and _signal(SignalKind.EVENT, 2) in got
