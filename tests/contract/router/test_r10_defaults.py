"""The defaults table of spec 10 §11.2 (and §4.1, §6.3 D, §9.2), one test per item."""

from __future__ import annotations

from zlink_trio.router import IdempotencyTtls, SessionRouterConfig

D = SessionRouterConfig()


def test_r10_124_operating_defaults() -> None:
    """R10-124: lease 30 s, secondary 30 s, sweep 15 s: detection within 30 + 15 = 45 s."""
    assert (D.lock_lease, D.idempotency_secondary_ttl, D.holder_loss_sweep_interval) == (
        30.0,
        30.0,
        15.0,
    )
    assert max(D.lock_lease, D.idempotency_secondary_ttl) + D.holder_loss_sweep_interval == 45.0


def test_r10_147_idle_ttl_default() -> None:
    """R10-147: idleTtl = 10 min."""
    assert D.idle_ttl == 600.0


def test_r10_148_max_cached_sessions_default() -> None:
    """R10-148: maxCachedSessions = 1000."""
    assert D.max_cached_sessions == 1000


def test_r10_149_lock_lease_default() -> None:
    """R10-149: lockLease = 30 s."""
    assert D.lock_lease == 30.0


def test_r10_150_lock_extend_interval_default() -> None:
    """R10-150: lockExtendInterval = 10 s, exactly two ticks of margin in the lease."""
    assert D.lock_extend_interval == 10.0
    assert D.lock_lease / D.lock_extend_interval == 3


def test_r10_151_status_heartbeat_default() -> None:
    """R10-151: statusHeartbeatInterval = 10 s, an independent field from the extend interval."""
    assert D.status_heartbeat_interval == 10.0
    changed = SessionRouterConfig(status_heartbeat_interval=3.0)
    assert changed.lock_extend_interval == 10.0


def test_r10_152_holder_loss_sweep_default() -> None:
    """R10-152: holderLossSweepInterval = 15 s."""
    assert D.holder_loss_sweep_interval == 15.0


def test_r10_153_primary_ttl_default() -> None:
    """R10-153: idempotencyPrimaryTtl = 24 h (the config and the store's default agree)."""
    assert D.idempotency_primary_ttl == 86_400.0 == IdempotencyTtls().primary


def test_r10_154_secondary_ttl_and_poll_interval_default() -> None:
    """R10-154: secondaryTtl = 30 s; the pollForward interval is secondary / 2 = 15 s."""
    assert D.idempotency_secondary_ttl == 30.0 == IdempotencyTtls().secondary
    assert D.forward_poll_interval == 15.0


def test_r10_155_forward_ttl_default() -> None:
    """R10-155: idempotencyForwardTtl = 5 min."""
    assert D.idempotency_forward_ttl == 300.0 == IdempotencyTtls().forward


def test_r10_156_release_interrupt_timeout_default() -> None:
    """R10-156: releaseInterruptTimeout = 5 s."""
    assert D.release_interrupt_timeout == 5.0


def test_cache_sweep_interval_default() -> None:
    """§4.1: the cache sweeper runs every minute."""
    assert D.cache_sweep_interval == 60.0
