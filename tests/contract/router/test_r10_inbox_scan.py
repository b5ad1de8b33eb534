"""SessionInbox.pending_sessions (the orphan scan's read, §14 / R10-76): the sessions with a
message waiting that was delivered before a given time, each once, oldest first, at most
``limit``. Every backend runs this suite (the ``backend`` fixture)."""

from __future__ import annotations

import trio
import trio.testing
from router_kit import S1, S2, Advance, Timing, message

from zlink_trio.router import Priority, SessionId, SessionInbox

S3 = SessionId("s-3")


async def test_r10_76_pending_sessions_lists_sessions_with_old_messages(
    inbox: SessionInbox,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-76 (the SPI read behind the fix): a session is listed when one of its waiting
    messages was delivered strictly before ``delivered_before``; each session once (however
    many messages it has), by its oldest message first; at most ``limit``; a collected or
    purged session is no longer listed."""
    t0 = trio.current_time()  # 0 on an exact clock

    def at(exact: float, real: float) -> float:
        """An instant: exact (the boundary itself) or, on the real clock, one safely
        between deliveries 0.3 s apart."""
        return t0 + timing.pick(exact, real)

    assert await inbox.pending_sessions(trio.current_time() + 1) == ()
    await inbox.deliver(message("s2-old", session=S2))  # 0 s
    await advance(timing.pick(10, 0.3))
    await inbox.deliver(message("s1-a", session=S1))  # 10 s
    await inbox.deliver(message("s1-b", session=S1, priority=Priority.NOW))
    await advance(timing.pick(10, 0.3))
    await inbox.deliver(message("s3", session=S3))  # 20 s
    late = at(100.0, 10.0)
    assert await inbox.pending_sessions(at(0.0, -0.15)) == ()
    assert await inbox.pending_sessions(at(10.0, 0.15)) == (S2,)
    assert await inbox.pending_sessions(at(10.5, 0.45)) == (S2, S1)
    assert await inbox.pending_sessions(late) == (S2, S1, S3)
    assert await inbox.pending_sessions(late, limit=2) == (S2, S1)
    await inbox.collect(S2, Priority.LATER)
    await inbox.purge(S3)
    assert await inbox.pending_sessions(late) == (S1,)
    await inbox.collect(S1, Priority.NOW)  # one of its two messages left
    assert await inbox.pending_sessions(late) == (S1,)
    await inbox.collect(S1, Priority.LATER)
    assert await inbox.pending_sessions(late) == ()
