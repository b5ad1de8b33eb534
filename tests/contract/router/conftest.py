"""Fixtures of the router SPI contract suite.

Every SPI fixture is parametrized over ``backend`` and gives each test fresh, empty
instances that share one clock. Tests use only the SPI protocols plus ``advance`` (move
time forward) and ``timing`` (:class:`router_kit.Timing`: the TTLs and how exactly an
instant can be checked), so the PostgreSQL implementations run the same suite.

Backends of the SPI suites (``PG_SUITES``): ``memory`` (a ``MockClock(autojump_threshold=0)``;
``advance`` jumps it); ``postgres`` (the database's REAL clock and short TTLs,
:data:`router_kit.REAL_TIMING`: ``advance`` waits that long for real, then
:func:`zlink_trio.testing.settle`; an instant is checked within a slack); and, for the
cases that move time, ``postgres-frozen`` IN ADDITION (the database's router clock frozen
and stepped in lockstep with a non-jumping MockClock): only a frozen clock can check that
the database computes an expiry to the instant (``now >= expires_at``, "stale after 30 s,
not at exactly 30 s", equal deliveredAt ties), which a real clock can only bound. On
PostgreSQL each test has a schema of its own (parallel workers never collide) and needs
``pg_dsn`` (skipped without a server). pytest-trio installs a clock only when the test
function itself asks for it, so a test that moves time takes ``autojump_clock``.

The router-level cases of :data:`ROUTER_PG_CASES` also run on PostgreSQL (``shared``), on
the real clock with the short TTLs of :data:`PG_ROUTER_CONFIG`; those of
:data:`ROUTER_PG_SCALED` run there on the real clock with ALL their time scaled down by a
factor of their own (config, turn lengths, waits, instants: ``scale``); the others are
listed in :data:`ROUTER_MEMORY_ONLY` with their reasons.
"""

from __future__ import annotations

import inspect
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from router_kit import EXACT_TIMING, REAL_TIMING, TTLS, Advance, Timing

from zlink_trio.router import (
    IdempotencyStore,
    IdempotencyTtls,
    MemoryIdempotencyStore,
    MemorySessionInbox,
    MemorySessionLeaseStore,
    MemorySessionRecordStore,
    MemorySessionSignalBus,
    SessionInbox,
    SessionLeaseStore,
    SessionRecordStore,
    SessionRouterConfig,
    SessionSignalBus,
)
from zlink_trio.testing import settle as settle_all

PG_SUITES = frozenset(
    {
        "test_r10_session_store",
        "test_r10_inbox",
        "test_r10_inbox_scan",
        "test_r10_signal_bus",
        "test_r10_idempotency_store",
    }
)
"""The SPI contract suites that also run on PostgreSQL: on the real clock, and (the cases
that move time) on the frozen clock too (module docstring)."""

ROUTER_PG_CASES: dict[str, frozenset[str]] = {
    "test_r10_router_keyed": frozenset(
        {
            "test_r10_115_a_remote_attacher_gets_a_local_turn_s_failure",
        }
    ),
    "test_r10_event_relay": frozenset(
        {
            "test_r10_46_a_subscriber_without_demand_never_stalls_the_turn",
            "test_r10_48_under_a_blocked_publisher_the_remote_side_gets_every_grade_2_frame",
            "test_r10_50_drops_are_counted_and_reported_at_close",
            "test_r10_51_codecs_lose_exactly_what_they_say",
        }
    ),
    "test_r10_interrupts": frozenset(
        {
            "test_r10_105_an_interrupt_on_b_stops_the_turn_on_a",
            "test_r10_131_an_unknown_failure_code_still_completes_the_caller",
            "test_r10_106_a_node_without_turn_or_entry_ignores_an_interrupt",
            "test_r10_107_the_running_turn_s_session_wins_over_the_cache",
        }
    ),
    "test_r10_metrics_hooks": frozenset(
        {
            "test_r10_160_cache_hits_and_misses",
            "test_r10_165_a_rejected_takeover_is_counted_an_unknown_one_is_not",
        }
    ),
    "test_r10_router_builder": frozenset(
        {
            "test_r10_143_the_factory_never_sees_open_attributes_the_opener_does",
            "test_r10_158_no_metrics_needed_and_one_hook_is_enough",
        }
    ),
    "test_r10_router_do_not": frozenset(
        {
            "test_r10_169_a_status_snapshot_never_gates_a_submit",
            "test_r10_173_what_crosses_nodes_is_json_text",
        }
    ),
    "test_r10_router_events": frozenset(
        {
            "test_interrupted_turns_end_with_interrupted_at",
            "test_r10_11_evict_completes_the_peer_s_subscribers",
            "test_r10_15_frames_cross_nodes_as_event_signals",
            "test_r10_25_a_non_holder_subscriber_receives_the_holder_s_frames",
            "test_r10_45_one_relay_per_turn_stamps_its_own_turn_id",
            "test_r10_85_a_forwarded_turn_s_frames_reach_local_and_remote_subscribers",
        }
    ),
    "test_r10_router_failures": frozenset(
        {
            "test_r10_132_a_failed_claim_fails_the_submit_and_delivers_nothing",
            "test_r10_138_alternating_nodes_each_turn_starts_from_the_record",
        }
    ),
    "test_r10_router_lease": frozenset(
        {
            "test_r10_05_two_end_paths_racing_release_the_lease_once",
            "test_r10_08_a_first_turn_race_binds_one_agent",
            "test_r10_101_no_extra_lease_for_work_inside_a_turn",
            "test_r10_10_an_interrupt_stops_the_turn_and_keeps_the_session",
            "test_r10_12_yield_hands_the_session_over",
            "test_r10_17_yield_and_the_legacy_interrupt_make_one_hand_off",
        }
    ),
    "test_r10_router_lifecycle": frozenset(
        {
            "test_r10_11_evict_discards_the_session_s_approvals_on_every_node",
            "test_r10_28_release_keeps_the_history",
            "test_r10_29_only_the_holder_deletes_and_a_holder_is_asked_to_yield",
            "test_r10_56_release_of_a_running_session_keeps_the_order",
        }
    ),
    "test_r10_router_local_path": frozenset(
        {
            "test_r10_05_a_warm_local_submit_writes_no_record",
            "test_r10_84_a_submit_during_the_pass_tail_collect_runs_locally",
        }
    ),
    "test_r10_router_serialization": frozenset(
        {
            "test_r10_04_alternating_routers_share_history_and_each_opens_once",
            "test_r10_22_multimodal_input_survives_a_cross_node_forward",
        }
    ),
    "test_r10_router_signals": frozenset(
        {
            "test_r10_11_evict_fails_the_forwarded_results_of_the_session",
            "test_r10_14_one_turn_result_per_forwarded_turn_after_mark_done",
            "test_r10_43_an_empty_doorbell_is_a_no_op",
        }
    ),
    "test_r10_router_submit": frozenset(
        {
            "test_r10_113_keyless_submits_are_never_deduplicated",
            "test_r10_114_a_new_key_is_in_flight_during_and_done_after",
            "test_r10_115_a_retry_in_flight_attaches_to_the_running_turn",
            "test_r10_116_a_done_key_answers_at_once_from_the_cache",
            "test_r10_117_same_key_other_input_is_a_409_with_no_trace",
            "test_r10_24_submit_answers_a_disposition_or_raises_conflict",
            "test_r10_53_no_warm_up_lazy_record_one_open",
            "test_r10_60_a_closing_router_refuses_submits",
            "test_r10_78_f0_subscribed_first_and_a_synchronous_rail_is_not_missed",
            "test_r10_79_f1_a_conflict_touches_neither_lease_nor_idempotency",
            "test_r10_80_f2_losing_the_lease_forwards_through_the_inbox",
            "test_r10_81_the_lease_is_tried_before_a_session_is_opened",
        }
    ),
    "test_r10_router_takeover": frozenset(
        {
            "test_r10_68_a_collected_message_runs_whatever_its_takeover_answers",
            "test_r10_69_win_reject_unknown",
        }
    ),
    "test_r10_router_turns": frozenset(
        {
            "test_r10_07_the_first_turn_decides_the_agent",
            "test_r10_129_now_without_a_running_turn_means_first_in_the_next_pass",
            "test_r10_141_open_options_only_on_a_miss_submit_options_every_turn",
            "test_r10_26_interrupt_without_turn_id_is_session_scoped",
            "test_r10_31_closing_touches_only_node_local_resources",
            "test_r10_84_the_next_holder_collects_orphans_before_its_turn",
            "test_r10_90_hand_off_instead_of_not_holder",
            "test_r10_91_a_submit_from_inside_its_own_session_s_turn_is_refused",
        }
    ),
    "test_r10_termination": frozenset(
        {
            "test_r10_55_release_is_not_the_end_of_the_session",
        }
    ),
    "test_review_issue15": frozenset(
        {
            "test_a_keyed_message_purged_by_release_does_not_block_its_retry",
            "test_a_submit_that_straddles_close_does_not_run_on_the_closed_router",
            "test_a_submit_that_straddles_the_routers_exit_raises_a_typed_error",
            "test_events_on_a_closed_router_end_at_once",
            "test_run_turn_returning_none_fails_the_turn_and_keeps_the_router",
        }
    ),
    "test_review_issue16": frozenset(
        {
            "test_a_doorbell_heard_during_the_last_collect_of_a_pass_is_not_lost",
            "test_a_queued_own_turn_whose_hand_back_fails_settles_its_caller",
            "test_a_targeted_interrupt_during_the_session_s_open_stops_that_turn",
            "test_a_targeted_interrupt_right_after_submit_stops_that_turn",
            "test_release_session_on_a_non_holder_gives_the_holder_s_handle_back",
        }
    ),
    "test_router_hostile_hooks": frozenset(
        {
            "test_a_blocking_metrics_hook_delays_only_itself_and_never_holds_the_exit",
            "test_interrupt_after_close_is_a_no_op",
        }
    ),
}
"""The router-level cases (75) that also run on PostgreSQL, on the REAL clock (a MockClock at
rate 1 that never jumps; the database's router clock is not frozen) with the short TTLs of
:data:`PG_ROUTER_CONFIG`. They order their steps with :func:`zlink_trio.testing.settle`
(every task blocked AND no statement in flight on a bridge, and every served bus's
LISTEN/NOTIFY barrier passed), which is exactly ``wait_all_tasks_blocked`` in memory.
An instant a memory run checks exactly is checked on PostgreSQL with a bound
(:func:`router_app.on_time`: no earlier, at most ``PG_SLACK`` later). Every other
router-level case is in :data:`ROUTER_PG_SCALED` (run on PostgreSQL with its time scaled)
or in :data:`ROUTER_MEMORY_ONLY`, with its reason.

``ZLINK_ROUTER_PG_ALL=1`` runs every asynchronous router-level case on PostgreSQL as well
(to re-derive these lists: a case that waits only a few seconds and passes there belongs
here)."""

ROUTER_MEMORY_ONLY: dict[str, dict[str, str]] = {
    "test_r10_router_close_mid_collect": {
        "test_r10_84_a_close_waits_for_the_collect_in_flight_and_hands_back_first": (
            "gates a collect to hold a race of PostgreSQL's still, deterministically in memory"
        ),
        "test_r10_84_a_failed_hand_back_is_answered_and_frees_the_key": (
            "gates a collect to hold a race of PostgreSQL's still, deterministically in memory"
        ),
    },
    "test_r10_event_relay": {},
    "test_r10_metrics_hooks": {
        "test_r10_161_evictions_by_lru_and_by_idle": (
            "waits 720 s of (virtual) time; scaled to fit (÷120) its 30 s lease is 0.25 s,"
            " renewed every 83 ms: S2 was not idle-evicted in its first PostgreSQL run"
        ),
    },
    "test_r10_router_builder": {
        "test_r10_145_single_node_fills_missing_spis_in_memory": (
            "SINGLE_NODE without SPIs: the router fills every one in memory, so a"
            " PostgreSQL run would touch no database (it was listed among the real-clock"
            " cases and ran the same in-memory router there)"
        ),
    },
    "test_r10_router_default_timings": {
        "test_r10_153_a_done_answer_lives_the_default_24_h": (
            "checks the default 24 h primary TTL (a retry 60 s before and at 86,400 s after"
            " the turn): waits 86,402 s of (virtual) time; scaled to a few seconds (÷20,000)"
            " the 30 s lease would be 1.5 ms and the 60 s margin 3 ms, under a statement's"
            " latency (the SPI suites check the primary TTL on PostgreSQL, frozen and real)"
        ),
        "test_r10_54_idle_time_counts_from_the_last_activity": (
            "waits 1200 s of (virtual) time with the default 30 s lease held throughout:"
            " scaled to a few seconds (÷300) the lease is 0.1 s renewed every 33 ms, and a"
            " renewal held past it under CI's PostgreSQL load lost the lease, which closed"
            " the handle early (CI failed on it twice: a second open, a close at the 660 s"
            " sweep); at ÷100 (0.3 s) it still lost it under load. The idle clock is the"
            " router's cache, the same on both backends"
        ),
        "test_r10_154_the_default_secondary_ttl_and_poll_interval": (
            "checks the default 30 s secondary TTL by a tie (untouched since 0 s, read at"
            " exactly 30 s: not yet stale; at 30.5 s: stale): on the real clock the read"
            " comes a statement's latency after the instant, so the age is over the TTL and"
            " the entry is already stale (the frozen-clock SPI runs check the tie); waits 50 s"
        ),
    },
    "test_r10_router_do_not": {
        "test_r10_170_only_delete_session_removes_history": (
            "waits 65 s of (virtual) time; checks the idle eviction 1 s after the 60 s"
            " sweep: scaled to a few seconds, ~60 ms"
        ),
    },
    "test_r10_router_failures": {
        "test_r10_134_signals_sent_while_the_bus_is_down_are_lost_then_it_resubscribes": (
            "waits 40 s of (virtual) time; checks 1 s before the 30 s poll tick: scaled to"
            " a few seconds, ~0.1 s"
        ),
    },
    "test_r10_router_holder_loss": {
        "test_r10_123_three_sweepers_one_winner_one_frame_one_announcement": (
            "waits 170 s of (virtual) time; it needs the three sweeps at the same instant"
            " (each calls compareAndReset): on the real clock the first reset can precede"
            " another node's sweep (failed in the full PostgreSQL router suite at -n 2)"
        ),
        "test_r10_67_a_holder_crashed_mid_turn_fails_its_caller_within_lease_and_sweep": (
            "waits 2160 s of (virtual) time: its retry runs a 1000 s turn beside 15 s"
            " sweeps; scaled to a few seconds the sweep would be ~30 ms, under a statement's"
            " latency"
        ),
    },
    "test_r10_router_keyed": {
        "test_r10_87_a_remote_attacher_gets_a_local_turn_s_result_on_the_rail": "asserts no polling find during a 5 s turn; PG_ROUTER_CONFIG polls every 3 s",
    },
    "test_r10_router_known_gaps": {
        "test_r10_176_a_late_write_or_release_cannot_clobber_a_newer_reservation": (
            "waits 201 s of (virtual) time; it checks 0.5 s after the first attempt ends at"
            " 101 s: scaled to a few seconds, ~10 ms"
        ),
    },
    "test_r10_router_lifecycle": {
        "test_r10_11_evict_removes_the_status_projection": (
            "waits 10 s of (virtual) time and checks right at the first 10 s heartbeat,"
            " which on the real clock (counted from the lease, after the submit's"
            " statements) comes after the check"
        ),
        "test_r10_30_status_is_a_best_effort_observation": (
            "waits 60 s of (virtual) time and checks right at the first 10 s heartbeat,"
            " which on the real clock (counted from the lease, after the submit's"
            " statements) comes after the check"
        ),
    },
    "test_r10_interrupts": {
        "test_r10_108_interrupt_races_settle_safely": (
            "waits 20 s of (virtual) time; scaled (÷5) it passed 3 of 3 PostgreSQL runs alone"
            " twice, but failed in CI's full suite at -n 2 (a pass still active at the check)"
            " as it had once before under -n 2 load"
        ),
    },
    "test_r10_router_orphans": {
        "test_r10_75_a_recording_metrics_instance_counts_each_re_ring": (
            "waits 180 s of (virtual) time; scaled (÷12) it failed 1 of 4 PostgreSQL runs"
            " with another suite beside it (passed 3 of 3 alone twice since): kept in"
            " memory beside R10-108, whose scaled run failed in CI"
        ),
        "test_r10_178_a_forward_fails_at_its_deadline_while_the_store_is_down": (
            "waits 301 s of (virtual) time: scaled to a few seconds the 30 s lease would be"
            " 0.4 s and the 15 s poll 0.2 s"
        ),
        "test_r10_73_no_ring_for_an_empty_inbox_a_ring_when_it_cannot_be_read": (
            "waits 300 s of (virtual) time: 14 re-rings on the relative 15 s poll schedule;"
            " scaled to a few seconds each tick's statements add up past the slack"
        ),
        "test_r10_74_a_live_holder_costs_one_refused_acquire_per_poll": (
            "waits 101 s of (virtual) time: six refused acquires on the relative 15 s poll"
            " schedule; scaled (0.6 s polls) each tick's statements add up past the slack"
        ),
    },
    "test_r10_router_renewal": {
        "test_r10_97_every_touch_carries_one_reservation_s_own_pair": (
            "waits 80 s of (virtual) time; its point is a renewal tick and a turn switch at"
            " the same instant, which only an exact clock reproduces"
        ),
    },
    "test_r10_router_sweeps": {
        "test_r10_152_the_holder_loss_sweep_ticks_every_fifteen_seconds": (
            "relies on a tie (untouched since 0 s, swept at exactly 30 s = the secondary TTL:"
            " not yet stale); scaled on the real clock the age is a little over the TTL at"
            " that sweep, so it is reset 15 s early (the frozen-clock SPI runs check the tie)"
        ),
        "test_r10_148_the_1001st_open_evicts_the_least_recent_handle": "1001 opens: minutes of statements on PostgreSQL, over the time budget",
        "test_r10_23_three_schedules_and_none_delays_a_renewal": (
            "waits 130 s of (virtual) time; its point is that twelve renewals stay on their"
            " 10 s ticks while a handle close holds a cache sweep 5 s: scaled to a few"
            " seconds (÷30) a tick is 0.33 s and the 5 s hold 0.17 s, both inside the 0.5 s"
            " slack of a scaled instant, so a renewal delayed by the hold would still pass"
        ),
    },
    "test_r10_router_upkeep": {
        "test_r10_120_a_live_keyed_turn_stays_in_flight_past_ten_minutes": (
            "waits 660 s of (virtual) time; scaled to a few seconds the 30 s lease would be 0.18 s"
        ),
        "test_r10_12_after_a_hand_off_the_inbox_is_rung_for_at_once": "asserts no re-ring within 5 s; PG_ROUTER_CONFIG polls (and re-rings) every 3 s",
    },
    "test_r10_session_cache": {
        "test_r10_32_a_pinned_entry_is_not_idle_evicted": (
            "waits 701 s of (virtual) time; checks 5 s after the 660 s sweep: scaled to a"
            " few seconds, ~30 ms"
        ),
        "test_r10_35_reading_and_updating_a_pinned_entry_keeps_its_protection": (
            "waits 1561 s of (virtual) time; checks 1 s after a sweep: scaled to a few"
            " seconds, a few ms"
        ),
        "test_r10_38_the_cache_sweeper_closes_idle_handles_every_minute": (
            "waits 661 s of (virtual) time; checks 1 s before and after the 660 s sweep:"
            " scaled to a few seconds, ~6 ms"
        ),
        "test_r10_59_idle_timeout_is_strict_silent_and_returns_the_lease_after_the_close": (
            "waits 721 s of (virtual) time; checks 1 s after the 660 s and 720 s sweeps:"
            " scaled to a few seconds, ~6 ms"
        ),
    },
    "test_r10_termination": {
        "test_r10_61_graceful_shutdown_runs_its_steps_in_order": "asserts each shutdown step at its exact virtual instant, under the default timeouts",
        "test_r10_62_shutdown_releases_leases_and_swallows_a_failing_release": "asserts the exact instant the handle closes against the default timeouts",
    },
    "test_review_issue16": {
        "test_a_submit_during_an_idle_eviction_runs_when_the_eviction_ends": (
            "waits 65 s of (virtual) time; submits inside the 2 s handle close of the 60 s"
            " sweep: scaled to a few seconds, a 0.13 s window"
        ),
    },
    "test_review_issue15_round3": {
        "test_a_renew_answer_later_than_the_local_deadline_loses_the_lease_cleanly": (
            "waits 96 s of (virtual) time; the caller attached on b must hear a's loss at"
            " 30 s (TurnInterrupted) before b's holder-loss sweep at 32 s finds the untouched"
            " reservation stale: scaled to a few seconds (÷20) that is a 0.1 s window, and it"
            " got HolderLost instead in 1 of 3 PostgreSQL runs alone"
        ),
    },
    "test_router_bounded_exit": {
        "test_a_hand_off_whose_handle_close_hangs_still_returns_the_lease": (
            "checks the lease 0.1 s before (still held) and at (free) the default 5 s"
            " handle_close_timeout after the turn ended: scaled to a few seconds (÷2 to ÷4)"
            " that window is 25-50 ms, under a statement's latency (PG_ROUTER_CONFIG: 2 s"
            " timeout, the same 0.1 s window)"
        ),
    },
}
"""The router-level cases that stay in memory (35), each with its reason; every one was
examined. 27 wait more than 8 s of virtual time (or time a default) and either cannot be
scaled faithfully (an interval that would fall under a statement's latency or inside the
scaled slack, an instant 1 s from a sweep tick, an exact tie or simultaneity only a frozen
clock reproduces) or failed a scaled PostgreSQL run. The others check the exact instant of
each shutdown step, 1001 opens, a poll/re-ring that never happens under the defaults but
does under ``PG_ROUTER_CONFIG``'s 3 s poll interval, gate a collect to hold a PostgreSQL
race still, or build a SINGLE_NODE router whose SPIs are all in memory. A case moves to
:data:`ROUTER_PG_SCALED` only after it passed 3 of 3 PostgreSQL runs alone and one beside
the rest of the PostgreSQL router suite at ``-n 2``. The synchronous router-level tests
(builder validation) make no backend call and stay in memory too."""


PG_ROUTER_CONFIG = SessionRouterConfig(
    lock_lease=6.0,
    lock_extend_interval=2.0,
    status_heartbeat_interval=2.0,
    holder_loss_sweep_interval=3.0,
    idempotency_primary_ttl=600.0,
    idempotency_secondary_ttl=6.0,
    idempotency_forward_ttl=30.0,
    release_interrupt_timeout=2.0,
    handle_close_timeout=2.0,
)


ROUTER_PG_SCALED: dict[str, dict[str, int]] = {
    "test_r10_router_default_timings": {
        "test_r10_156_release_force_closes_at_the_default_5_s": 5,
        "test_r10_149_acquires_ask_for_the_default_30_s_lease": 5,
    },
    "test_r10_router_keyed": {
        "test_r10_126_a_keyed_now_message_injected_mid_turn_is_marked_done": 15,
    },
    "test_r10_router_builder": {
        "test_r10_167_hooks_that_raise_or_block_change_nothing": 15,
        "test_r10_01_the_router_never_creates_or_closes_the_agent_runtime": 20,
    },
    "test_r10_event_relay": {
        "test_r10_42_a_restarted_holder_s_status_is_accepted": 50,
        "test_r10_47_a_slow_publish_never_delays_the_turn": 10,
    },
    "test_router_bounded_exit": {
        "test_close_gracefully_is_bounded_by_its_timeout_for_a_stubborn_turn": 5,
        "test_a_handle_close_that_never_returns_is_abandoned_after_its_bound": 4,
    },
    "test_router_hostile_hooks": {
        "test_a_now_message_whose_inject_raises_runs_as_its_own_turn": 15,
    },
    "test_r10_router_do_not": {
        "test_r10_168_no_end_path_closes_the_agent_runtime": 10,
    },
    "test_r10_router_lease": {
        "test_r10_05_one_acquire_serves_many_turns_and_outlives_the_pass": 5,
        "test_r10_126_a_now_message_is_injected_into_the_running_turn": 3,
        "test_r10_27_a_targeted_interrupt_of_an_old_turn_is_a_no_op": 3,
        "test_r10_54_renewals_every_ten_seconds_during_a_long_turn": 20,
        "test_r10_77_a_lost_lease_interrupts_the_turn_once": 15,
        "test_r10_82_a_doorbell_starts_at_most_one_drain": 4,
        "test_r10_83_the_drain_orders_tiers_and_rechecks_the_binding": 6,
        "test_r10_88_the_drain_runs_follow_ups_and_keeps_the_lease": 11,
        "test_r10_92_losing_the_gate_never_touches_the_lease": 4,
    },
    "test_r10_router_holder_loss": {
        "test_r10_64_holder_loss_is_turn_scoped": 15,
        "test_r10_65_the_announcement_names_the_key_and_only_its_callers_fail": 40,
        "test_r10_63_a_killed_holder_s_turn_is_reported_once_by_three_sweepers": 15,
        "test_r10_66_detection_is_never_before_the_secondary_ttl": 12,
        "test_r10_136_a_dead_node_s_delivered_messages_are_drained_by_a_peer": 15,
        "test_a_crashed_router_keeps_its_lease_and_answers_nothing_more": 10,
    },
    "test_r10_session_cache": {
        "test_r10_36_a_pinned_evicted_session_closes_then_releases_its_lease": 3,
        "test_r10_34_the_lru_lease_is_returned_inside_the_turn_gate": 3,
        "test_r10_37_racing_pins_unpins_and_close_requests_close_each_handle_once": 16,
    },
    "test_r10_router_orphans": {
        "test_r10_72_each_poll_tick_rings_again_until_a_peer_runs_the_orphan": 15,
        "test_r10_72_a_message_the_dying_holder_collected_but_never_ran_is_run_by_a_peer": 15,
        "test_r10_76_an_orphan_whose_waiting_node_died_too_is_picked_up": 25,
        "test_r10_76_messages_left_for_a_deleted_session_are_purged_by_the_scan": 12,
    },
    "test_review_issue15": {
        "test_a_blocking_inject_does_not_stall_other_sessions": 15,
        "test_a_forwarded_caller_at_close_learns_its_outcome_is_unknown": 8,
        "test_a_hanging_renewal_does_not_let_two_nodes_run_the_session_at_once": 10,
        "test_a_keyed_forward_whose_turn_failed_learns_it_at_the_next_poll": 4,
        "test_a_turn_handed_back_at_close_is_not_reported_as_shut_down_when_it_runs": 12,
        "test_release_during_a_slow_open_leaves_no_open_handle": 7,
        "test_submit_options_reach_a_turn_queued_behind_a_running_one": 3,
    },
    "test_r10_metrics_hooks": {
        "test_r10_159_lock_latency_for_a_won_and_a_lost_election": 3,
        "test_r10_162_one_extend_failure_per_lost_lease": 15,
        "test_r10_163_one_submit_outcome_per_submit": 3,
        "test_r10_164_holder_loss_once_per_won_reset": 25,
        "test_r10_166_rerings_count_retries_and_stop_once_drained": 20,
    },
    "test_r10_router_turns": {
        "test_r10_02_an_interrupted_turn_commits_no_partial_state": 4,
        "test_r10_127_next_and_later_run_in_the_same_pass": 4,
        "test_r10_23_a_blocked_publish_does_not_delay_renewals": 10,
        "test_r10_93_the_renewer_keeps_a_blocked_turn_s_lease": 15,
        "test_r10_95_a_blocking_lease_loss_hook_costs_no_other_lease": 15,
    },
    "test_r10_termination": {
        "test_r10_104_delete_cleans_up_every_node": 4,
        "test_r10_57_a_release_force_closes_a_turn_that_ignores_its_interrupt": 8,
        "test_r10_58_ending_a_session_forgets_its_doorbell": 30,
    },
    "test_r10_router_renewal": {
        "test_r10_98_one_pass_keeps_two_reservations_alive": 6,
        "test_r10_99_touch_names_the_reservation_s_holder_not_the_lease_holder": 12,
    },
    "test_r10_router_signals": {
        "test_r10_13_one_doorbell_per_forwarded_delivery": 5,
        "test_r10_19_forwarded_submits_go_to_the_inbox_and_only_the_holder_collects": 4,
        "test_r10_41_duplicated_and_reordered_signals_change_nothing": 4,
    },
    "test_r10_router_submit": {
        "test_r10_110_an_unanswered_forward_fails_at_exactly_the_forward_ttl": 75,
        "test_r10_119_a_stale_reservation_is_reset_and_the_retry_runs": 8,
        "test_r10_86_mark_done_comes_before_the_turn_result_broadcast": 5,
        "test_r10_87_f7_rail_first_polling_when_the_rail_is_lost": 6,
    },
    "test_r10_router_lifecycle": {
        "test_r10_103_delete_gives_up_when_the_holder_never_yields": 2,
        "test_r10_16_status_is_published_every_heartbeat": 10,
    },
    "test_r10_interrupts": {
        "test_r10_130_a_forwarded_result_carries_no_artifacts": 3,
    },
    "test_r10_router_takeover": {
        "test_r10_70_a_takeover_applied_then_thrown_is_still_touched_and_never_swept": 25,
        "test_r10_121_the_holder_name_moves_from_the_submitter_to_the_collector": 30,
        "test_r10_70_a_takeover_thrown_before_its_write_has_no_touch_effect": 30,
        "test_r10_71_touch_failures_past_the_secondary_ttl_sweep_a_live_forwarded_turn": 15,
    },
    "test_r10_router_known_gaps": {
        "test_r10_175_a_late_subscriber_sees_only_later_frames": 3,
        "test_r10_177_a_failed_keyed_turn_s_key_is_free_when_its_failure_is_reported": 25,
        "test_r10_179_the_yield_shim_and_the_polling_period": 15,
    },
    "test_r10_router_upkeep": {
        "test_r10_72_a_lost_doorbell_is_rung_again_at_the_next_poll": 15,
        "test_r10_96_a_finished_turn_s_key_is_never_touched_again": 15,
    },
    "test_review_issue16": {
        "test_a_force_released_turn_cannot_write_under_the_node_s_next_lease": 5,
        "test_a_keyed_submit_whose_hand_over_fails_frees_its_key": 8,
    },
    "test_r10_router_sweeps": {
        "test_r10_33_an_lru_evicted_running_session_closes_after_its_turn": 3,
    },
    "test_r10_router_failures": {
        "test_r10_135_a_lease_backend_lost_for_good_ends_every_turn_history_stays": 8,
    },
    "test_r10_router_serialization": {
        "test_concurrent_submits_from_every_router_serialize": 20,
        "test_r10_06_the_same_scenario_answers_alike_from_any_router": 10,
    },
    "test_review_issue15_round3": {
        "test_a_lease_lost_locally_is_released_in_the_store_at_once": 20,
        "test_keyed_submits_from_three_routers_with_failures_and_interrupts_settle": 6,
    },
}
"""The router-level cases (83) that run on PostgreSQL's real clock with their time SCALED: each
maps to its divisor ``k``. Its PostgreSQL run (``scale`` fixture ``1/k``) builds every
router config from the §11.2 defaults (or the case's own fields) with every duration of
:data:`router_app.SCALED_FIELDS` divided by ``k`` (:meth:`router_app.Shared.router_config`;
the cluster default is the scaled defaults, and the idempotency store's TTLs are the
scaled defaults too), every turn lasts ``World.duration / k``, ``advance(s)`` waits
``s / k``, every other wait of the test goes through ``shared.s(...)``, and an instant
is checked with :func:`router_app.on_time` (``shared.s(expected)``, at most
:data:`SCALED_SLACK` later). The memory run keeps its numbers: with scale 1 every one of
those helpers returns its argument unchanged. ``k`` is chosen so the case waits about 5 s
or less on the real clock."""

SCALED_SLACK = 0.5
"""How late (real seconds) an instant of a scaled case may be on PostgreSQL."""


def _scale_of(module: str, function: str) -> float:
    divisor = ROUTER_PG_SCALED.get(module, {}).get(function)
    return 1.0 if divisor is None else 1.0 / divisor


def _module(node: Any) -> str:
    name: str = node.module.__name__
    return name.rsplit(".", 1)[-1]


def _router_pg_case(module: str, function: str) -> bool:
    if module in PG_SUITES:
        return False
    if os.environ.get("ZLINK_ROUTER_PG_ALL"):
        return True  # experiment only (the fixtures of a case PG_ALL enabled)
    return function in ROUTER_PG_CASES.get(module, frozenset()) or (
        function in ROUTER_PG_SCALED.get(module, {})
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    params = [pytest.param("memory", id="memory")]
    module = _module(metafunc)
    router_case = _router_pg_case(module, metafunc.function.__name__) and (
        inspect.iscoroutinefunction(metafunc.function)
    )
    if module in PG_SUITES or router_case:
        params.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
    if module in PG_SUITES and "advance" in metafunc.fixturenames:
        params.append(
            pytest.param("postgres-frozen", id="postgres-frozen", marks=pytest.mark.postgres)
        )
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """``memory`` (MockClock, autojump), ``postgres`` (the database's real clock, short
    TTLs) or ``postgres-frozen`` (the database's router clock frozen and stepped in lockstep
    with a non-jumping MockClock: every TTL is still computed by the database, to the
    instant). On PostgreSQL each test has a schema of its own."""
    name: str = request.param
    return name


@pytest.fixture
def scale(backend: str, request: pytest.FixtureRequest) -> float:
    """The case's time scale: ``1/k`` on PostgreSQL for a case of :data:`ROUTER_PG_SCALED`,
    else 1 (every memory run)."""
    if backend != "postgres":
        return 1.0
    return _scale_of(_module(request), request.function.__name__)


@pytest.fixture
def timing(backend: str) -> Timing:
    """How the SPI test moves time (:class:`router_kit.Timing`)."""
    return REAL_TIMING if backend == "postgres" else EXACT_TIMING


@pytest.fixture
def autojump_clock(backend: str) -> trio.testing.MockClock:
    """Overrides pytest-trio's: on PostgreSQL the clock must not jump while a statement is
    in flight. ``postgres``: it runs at the real rate and never jumps (the database's
    clock is the real one); ``postgres-frozen``: it stands still (rate 0) and moves only by
    ``advance``, with the database's router clock."""
    if backend == "postgres":
        return trio.testing.MockClock(rate=1.0)
    if backend == "postgres-frozen":
        return trio.testing.MockClock(rate=0.0)
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
async def pg_db(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The SPI test's own PostgreSQL schema (None on the memory backend and for the
    router-level cases, which use ``pg_router_spis``)."""
    if backend == "memory" or _module(request) not in PG_SUITES:
        yield None
        return
    from zlink_trio.router_pg import open_router_database
    from zlink_trio.store.postgres import drop_schema

    dsn: str = request.getfixturevalue("pg_dsn")
    schema = f"zlink_router_{uuid.uuid4().hex[:16]}"
    try:
        async with open_router_database(dsn, schema=schema, connections=4) as db:
            if backend == "postgres-frozen":
                await db.freeze_clock_for_tests()
            yield db
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)


@pytest.fixture
def advance(
    backend: str, autojump_clock: trio.testing.MockClock, pg_db: Any, scale: float
) -> Advance:
    async def advance(seconds: float) -> None:
        """Move time forward, then let every task woken by it run until all block (and,
        on PostgreSQL, no statement is in flight): memory jumps the MockClock;
        ``postgres-frozen`` steps the database's clock and the MockClock together;
        ``postgres`` waits that long on the real clock (times the case's ``scale``)."""
        if backend == "postgres":
            await trio.sleep(seconds if scale == 1.0 else seconds * scale)
            await settle_all()
            return
        if pg_db is not None:
            await pg_db.advance_clock_for_tests(seconds)
        autojump_clock.jump(seconds)
        await trio.testing.wait_all_tasks_blocked()

    return advance


@pytest.fixture
def lease_backend(pg_db: Any, autojump_clock: trio.testing.MockClock) -> SessionLeaseStore:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionLeaseStore

        return PostgresSessionLeaseStore(pg_db)
    return MemorySessionLeaseStore()


@pytest.fixture
def record_backend(pg_db: Any) -> SessionRecordStore:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionRecordStore

        return PostgresSessionRecordStore(pg_db)
    return MemorySessionRecordStore()


@pytest.fixture
def inbox(pg_db: Any) -> SessionInbox:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionInbox

        return PostgresSessionInbox(pg_db)
    return MemorySessionInbox()


@pytest.fixture
def new_bus(pg_db: Any, nursery: trio.Nursery) -> Callable[[], SessionSignalBus]:
    """A bus factory; routers of one cluster share one bus (on PostgreSQL: one database;
    each bus is served in the test's nursery, and ``subscribe`` waits until it listens)."""
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionSignalBus

        def new() -> SessionSignalBus:
            bus = PostgresSessionSignalBus(pg_db)
            nursery.start_soon(bus.serve)
            return bus

        return new
    return MemorySessionSignalBus


@pytest.fixture
def settle() -> Callable[[SessionSignalBus], Awaitable[None]]:
    """Wait until every signal published so far has reached the bus's subscribers."""

    async def settle(bus: SessionSignalBus) -> None:
        barrier = getattr(bus, "barrier", None)
        if barrier is not None:  # PostgreSQL: one LISTEN/NOTIFY round trip
            with trio.fail_after(10):
                await barrier()
        await trio.testing.wait_all_tasks_blocked()

    return settle


@pytest.fixture
def idempotency(
    pg_db: Any, timing: Timing, autojump_clock: trio.testing.MockClock
) -> IdempotencyStore:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresIdempotencyStore

        return PostgresIdempotencyStore(pg_db, ttls=timing.ttls)
    return MemoryIdempotencyStore(ttls=timing.ttls)


@pytest.fixture
def inject_raw(pg_db: Any) -> Callable[[SessionSignalBus, str], Awaitable[None]]:
    """Put raw signal text on a bus, as if it arrived from a node of another build."""

    async def inject(bus: SessionSignalBus, text: str) -> None:
        if pg_db is not None:
            from zlink_trio.router_pg import PostgresSessionSignalBus

            assert isinstance(bus, PostgresSessionSignalBus)
            await bus.publish_text(text)
            return
        assert isinstance(bus, MemorySessionSignalBus)
        bus.publish_text_nowait(text)

    return inject


@pytest.fixture
def shared(backend: str, pg_cluster: Any) -> Any:
    """One cluster's shared SPIs: in memory (MockClock, autojump), or — for the cases of
    :data:`ROUTER_PG_CASES` — the PostgreSQL backends of ``pg_cluster``. (A plain fixture:
    the router's synchronous tests, e.g. the builder's, use it too; only on PostgreSQL
    does it depend on a Trio fixture.)"""
    from router_app import Shared

    if pg_cluster is not None:
        return pg_cluster
    return Shared(
        MemorySessionRecordStore(),
        MemorySessionLeaseStore(),
        MemorySessionInbox(),
        MemorySessionSignalBus(),
        MemoryIdempotencyStore(ttls=TTLS),
    )


@pytest.fixture
def pg_cluster(backend: str, request: pytest.FixtureRequest) -> Any:
    """None in memory; on PostgreSQL, ``pg_router_spis`` (requested only then, so the
    in-memory synchronous tests never depend on a Trio fixture)."""
    if backend != "postgres":
        return None
    return request.getfixturevalue("pg_router_spis")


@pytest.fixture
async def pg_router_spis(request: pytest.FixtureRequest, scale: float) -> AsyncIterator[Any]:
    """The PostgreSQL backends of one cluster on a schema of the test's own, on the
    database's real clock, with the short TTLs of :data:`PG_ROUTER_CONFIG` (a scaled case:
    the §11.2 defaults on its time scale, :data:`ROUTER_PG_SCALED`)."""
    from router_app import Shared, scaled_config

    from zlink_trio.router_pg import open_postgres_spis
    from zlink_trio.store.postgres import drop_schema

    dsn: str = request.getfixturevalue("pg_dsn")
    schema = f"zlink_router_{uuid.uuid4().hex[:16]}"
    if scale == 1.0:
        config, slack = PG_ROUTER_CONFIG, None
    else:
        config, slack = scaled_config(SessionRouterConfig(), scale), SCALED_SLACK
    try:
        async with open_postgres_spis(dsn, schema=schema) as spis:
            yield Shared(
                spis.records,
                spis.leases,
                spis.inbox,
                spis.bus,
                spis.idempotency(
                    IdempotencyTtls(
                        primary=config.idempotency_primary_ttl,
                        secondary=config.idempotency_secondary_ttl,
                        forward=config.idempotency_forward_ttl,
                    )
                ),
                config,
                **({} if slack is None else {"scale": scale, "slack": slack}),
            )
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)


@pytest.fixture
def world(scale: float) -> Any:
    from router_app import World

    return World(scale=scale)


@pytest.fixture
def registry(world: Any) -> Any:
    from router_app import Registry
    from router_kit import AGENT, OTHER_AGENT

    return Registry(world, [AGENT, OTHER_AGENT])
