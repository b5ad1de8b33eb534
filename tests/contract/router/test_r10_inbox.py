"""SessionInbox contract (spec 10 §3.4, §5.6, §7.5, §9.3): deliver anywhere, collect as one
atomic batch by tier, in stable (priority, deliveredAt) order."""

from __future__ import annotations

import trio
import trio.testing
from router_kit import OTHER_AGENT, S1, S2, Advance, Timing, message

from zlink_trio.router import (
    CompositeInput,
    IdempotencyKey,
    ImageInput,
    InboundMessage,
    Priority,
    SessionInbox,
    TextInput,
)


def _texts(batch: tuple[InboundMessage, ...]) -> list[str]:
    return [m.user_input.as_text() for m in batch]


async def test_r10_21_collect_is_one_atomic_batch(inbox: SessionInbox) -> None:
    """R10-21: concurrent collects of one session never return the same message, together
    return every delivered one, and each batch is in delivery order."""
    for i in range(20):
        await inbox.deliver(message(f"m{i:02}"))
    batches: list[tuple[InboundMessage, ...]] = []

    async def collect() -> None:
        batches.append(await inbox.collect(S1, Priority.LATER))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(collect)
    ids = [m.message_id for b in batches for m in b]
    assert len(ids) == len(set(ids)) == 20
    assert sorted(t for b in batches for t in _texts(b)) == [f"m{i:02}" for i in range(20)]
    for batch in batches:
        assert _texts(batch) == sorted(_texts(batch))
    assert await inbox.collect(S1, Priority.LATER) == ()


async def test_r10_128_stable_order_by_priority_then_delivery(
    inbox: SessionInbox,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-128: a mixed batch comes out by (priority ordinal, deliveredAt); ties keep their
    insertion order."""
    plan = [
        ("later-1", Priority.LATER),
        ("now-1", Priority.NOW),
        ("next-1", Priority.NEXT),
        ("later-2", Priority.LATER),
        ("next-2", Priority.NEXT),
        ("now-2", Priority.NOW),
    ]
    for i, (text, priority) in enumerate(plan):
        await inbox.deliver(message(text, priority=priority))
        if i % 2:
            # pairs share a deliveredAt (on an exact clock): the tie keeps insertion order
            await advance(timing.pick(1, 0.05))
    batch = await inbox.collect(S1, Priority.LATER)
    assert _texts(batch) == ["now-1", "now-2", "next-1", "next-2", "later-1", "later-2"]
    tie = [message(f"tie-{i}") for i in range(5)]
    for m in tie:
        await inbox.deliver(m)
    assert await inbox.collect(S1, Priority.LATER) == tuple(tie)


async def test_r10_100_inbox_order_holds_whoever_delivered(
    inbox: SessionInbox,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-100: who wins an election is not asserted anywhere; what holds is the inbox's
    priority-then-FIFO order for messages delivered from any node."""
    for i in range(6):
        await inbox.deliver(message(f"from-node-{i % 3}-{i}"))
        await advance(timing.pick(0.5, 0.05))
    assert _texts(await inbox.collect(S1, Priority.LATER)) == [
        f"from-node-{i % 3}-{i}" for i in range(6)
    ]


async def test_r10_125_the_envelope_carries_the_priority_unchanged(inbox: SessionInbox) -> None:
    """R10-125: the collected envelope has the submitted priority (and everything else)."""
    sent = [
        message("a", priority=Priority.LATER, key=IdempotencyKey("k1")),
        message("b", priority=Priority.NOW, agent=OTHER_AGENT),
        message("c", priority=Priority.NEXT),
    ]
    for m in sent:
        await inbox.deliver(m)
    got = await inbox.collect(S1, Priority.LATER)
    assert {m.message_id: m for m in got} == {m.message_id: m for m in sent}
    assert {m.user_input.as_text(): m.priority for m in got} == {
        "a": Priority.LATER,
        "b": Priority.NOW,
        "c": Priority.NEXT,
    }


async def test_r10_126_collect_now_takes_only_the_now_tier(inbox: SessionInbox) -> None:
    """R10-126 (inbox side): ``collect(id, NOW)`` cuts out only the NOW messages, for
    mid-turn injection; NEXT and LATER stay in the inbox for the turn boundary."""
    await inbox.deliver(message("next", priority=Priority.NEXT))
    await inbox.deliver(message("now", priority=Priority.NOW))
    await inbox.deliver(message("later", priority=Priority.LATER))
    assert _texts(await inbox.collect(S1, Priority.NOW)) == ["now"]
    assert await inbox.has_pending(S1)
    assert _texts(await inbox.collect(S1, Priority.NEXT)) == ["next"]
    assert _texts(await inbox.collect(S1, Priority.LATER)) == ["later"]
    assert not await inbox.has_pending(S1)


async def test_r10_19_any_node_delivers_one_collect_takes(inbox: SessionInbox) -> None:
    """R10-19 (inbox side): deliveries from several nodes land in one cross-node,
    multi-session mailbox; a collect takes them out, so a message is taken once."""
    await inbox.deliver(message("to-s1"))
    await inbox.deliver(message("to-s2", session=S2))
    assert _texts(await inbox.collect(S1, Priority.LATER)) == ["to-s1"]
    assert await inbox.collect(S1, Priority.LATER) == ()
    assert await inbox.has_pending(S2)
    assert await inbox.purge(S2) == 1
    assert not await inbox.has_pending(S2)
    assert await inbox.purge(S2) == 0


async def test_multimodal_input_survives_the_inbox(inbox: SessionInbox) -> None:
    """§5.6 (R10-22's last point, inbox half): non-text input crosses the inbox intact."""
    image = ImageInput("image/jpeg", bytes(range(256)), caption="photo")
    composite = CompositeInput((TextInput("look"), image))
    for value in (image, composite):
        await inbox.deliver(message("", user_input=value))
    assert [m.user_input for m in await inbox.collect(S1, Priority.LATER)] == [image, composite]
