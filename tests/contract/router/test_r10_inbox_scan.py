"""SessionInbox.pending_sessions (the orphan scan's read, §14 / R10-76): the sessions with a
message waiting that was delivered before a given time, each once, oldest first, at most
``limit``. Every backend runs this suite (the ``backend`` fixture)."""

from __future__ import annotations

import trio
import trio.testing
from router_kit import S1, S2, Advance, message

from zlink_trio.router import Priority, SessionId, SessionInbox

S3 = SessionId("s-3")


async def test_r10_76_pending_sessions_lists_sessions_with_old_messages(
    inbox: SessionInbox, advance: Advance, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-76 (the SPI read behind the fix): a session is listed when one of its waiting
    messages was delivered strictly before ``delivered_before``; each session once (however
    many messages it has), by its oldest message first; at most ``limit``; a collected or
    purged session is no longer listed."""
    assert await inbox.pending_sessions(trio.current_time() + 1) == ()
    await inbox.deliver(message("s2-old", session=S2))  # 0 s
    await advance(10)
    await inbox.deliver(message("s1-a", session=S1))  # 10 s
    await inbox.deliver(message("s1-b", session=S1, priority=Priority.NOW))
    await advance(10)
    await inbox.deliver(message("s3", session=S3))  # 20 s
    assert await inbox.pending_sessions(0.0) == ()
    assert await inbox.pending_sessions(10.0) == (S2,)
    assert await inbox.pending_sessions(10.5) == (S2, S1)
    assert await inbox.pending_sessions(100.0) == (S2, S1, S3)
    assert await inbox.pending_sessions(100.0, limit=2) == (S2, S1)
    await inbox.collect(S2, Priority.LATER)
    await inbox.purge(S3)
    assert await inbox.pending_sessions(100.0) == (S1,)
    await inbox.collect(S1, Priority.NOW)  # one of its two messages left
    assert await inbox.pending_sessions(100.0) == (S1,)
    await inbox.collect(S1, Priority.LATER)
    assert await inbox.pending_sessions(100.0) == ()
