"""Location Store contract: ``change_owners``, the multi-row aggregate owner change a
SpotWide User Spot relocation commits with (the Spot and its member Actors in ONE commit,
spec 06 §6.1). The same tests run on every store (the ``store`` fixture)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
from store_kit import (
    TTL,
    Node,
    actor,
    applied,
    conflict,
    ready,
    register,
    reserved,
    snapshot,
    spot,
    usage,
)

from zlink_trio.errors import CapacityExceeded, InvalidOperation, OwnerLeaseExpired
from zlink_trio.ids import OperationId, SpotId
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    CasResult,
    Conflict,
    LocationStore,
    ObjectKey,
    RelocationMark,
)
from zlink_trio.testing import CountingStore, RecordingStore, advance_store_clock


async def spot_with_members(
    store: LocationStore, node: Node, name: str = "room", members: int = 2
) -> list[AuthorityRow]:
    """A Ready User Spot ``name`` and ``members`` Ready Actors in it, all owned by
    ``node``: the Spot's row first."""
    rows = [await ready(store, spot(node, name))]
    rows.extend(
        [
            await ready(store, actor(node, f"{name}-m{i}", membership=SpotId(name)))
            for i in range(members)
        ]
    )
    return rows


def changes(rows: list[AuthorityRow]) -> list[tuple[ObjectKey, int]]:
    return [(row.key, row.store_version) for row in rows]


async def test_every_row_moves_in_one_commit(store: LocationStore) -> None:
    """S06-18: the SpotWide aggregate commit moves the Spot and its member Actors at once:
    each row as change_owner moves one (owner, AuthorityOwnerGeneration + 1, new store
    version, relocation mark cleared; ObjectGeneration, membership and state kept), the
    rows returned in the order given, and the active units follow."""
    a, b = await register(store), await register(store)
    room, m0, m1 = await spot_with_members(store, a)
    mark = RelocationMark(OperationId(7), b.fence(), sealed=True)
    room = applied(await store.set_relocation(room.key, room.store_version, mark))
    given = [m1, room, m0]  # any order: the result follows it
    moved = applied(await store.change_owners(changes(given), b.fence()))
    assert [row.key for row in moved] == [row.key for row in given]
    for before, after in zip(given, moved, strict=True):
        assert after.owner == b.fence()
        assert after.owner_generation == before.owner_generation.next()
        assert after.object_generation == before.object_generation
        assert after.store_version > before.store_version
        assert after.state is AuthorityState.READY
        assert after.membership == before.membership
        assert after.kind is before.kind and after.stable_type == before.stable_type
        assert after.relocation is None
        assert await store.read(after.key) == after
    assert len({row.store_version for row in moved}) == 3
    assert await usage(store, a) == (0, 0)
    assert await usage(store, b) == (3, 0)
    # and back again, with the versions just returned
    back = applied(await store.change_owners(changes(list(moved)), a.fence()))
    assert all(row.owner == a.fence() for row in back)
    assert [row.owner_generation.value for row in back] == [3, 3, 3]
    assert await usage(store, a) == (3, 0)
    assert await usage(store, b) == (0, 0)


async def test_a_version_conflict_on_the_second_row_changes_nothing(store: LocationStore) -> None:
    """S06-18: all or nothing: the second row's stale version is Conflict(its current
    row), and the first row (which matched) is not changed either."""
    a, b = await register(store), await register(store)
    room, m0, m1 = await spot_with_members(store, a)
    m0_now = applied(await store.set_membership(m0.key, m0.store_version, SpotId("room")))
    before = await snapshot(store)
    result = await store.change_owners(changes([room, m0, m1]), b.fence())
    assert conflict(result) == m0_now
    assert await snapshot(store) == before
    assert await store.read(room.key) == room


async def test_the_conflict_is_the_first_key_in_the_order_given(store: LocationStore) -> None:
    """S06-18: with several rows off their expected version, the Conflict carries the
    first of them in the order given; a Missing row is Conflict(None)."""
    a, b = await register(store), await register(store)
    room, m0, m1 = await spot_with_members(store, a)
    m0_now = applied(await store.set_membership(m0.key, m0.store_version, None))
    m1_now = applied(await store.set_membership(m1.key, m1.store_version, None))
    before = await snapshot(store)
    assert conflict(await store.change_owners(changes([room, m0, m1]), b.fence())) == m0_now
    assert conflict(await store.change_owners(changes([room, m1, m0]), b.fence())) == m1_now
    missing = (ObjectKey.actor("nobody"), 1)
    assert conflict(await store.change_owners([*changes([room]), missing], b.fence())) is None
    assert conflict(await store.change_owners([missing, *changes([m0])], b.fence())) is None
    assert await snapshot(store) == before


async def test_a_row_that_is_not_ready_is_a_conflict(store: LocationStore) -> None:
    """S06-18: like change_owner, only Ready rows move: a Creating or Closing row at its
    expected version is Conflict(that row) and nothing changes."""
    a, b = await register(store), await register(store)
    room, m0 = await spot_with_members(store, a, members=1)
    creating = await reserved(store, actor(a, "late", membership=SpotId("room")))
    before = await snapshot(store)
    assert conflict(await store.change_owners(changes([room, creating]), b.fence())) == creating
    assert await snapshot(store) == before
    closing = applied(await store.begin_closing(m0.key, m0.store_version))
    before = await snapshot(store)
    assert conflict(await store.change_owners(changes([room, closing]), b.fence())) == closing
    assert await snapshot(store) == before


async def test_an_entry_claim_among_the_rows_is_refused(store: LocationStore) -> None:
    """S06-18: Entry claims change only through registration: one among the rows raises
    InvalidOperation (when reached in order) and nothing changes."""
    a, b = await register(store), await register(store)
    (room,) = await spot_with_members(store, a, members=0)
    entry = await store.read(a.entry_key())
    assert entry is not None
    before = await snapshot(store)
    with pytest.raises(InvalidOperation):
        await store.change_owners(changes([room, entry]), b.fence())
    assert await snapshot(store) == before
    stale = (room.key, room.store_version + 1000)  # an earlier conflict wins
    assert conflict(await store.change_owners([stale, *changes([entry])], b.fence())) == room


async def test_the_new_owners_lease_must_be_current(store: LocationStore) -> None:
    """S06-18: an expired or superseded new owner raises OwnerLeaseExpired and changes
    nothing; the preconditions are checked first (a stale row is still a Conflict)."""
    a = await register(store, ttl=TTL * 10)
    b = await register(store)
    rows = await spot_with_members(store, a)
    await advance_store_clock(store, TTL + 1)  # b expired, a still live
    before = await snapshot(store)
    with pytest.raises(OwnerLeaseExpired):
        await store.change_owners(changes(rows), b.fence())
    stale = [(rows[0].key, rows[0].store_version + 1000), *changes(rows[1:])]
    assert conflict(await store.change_owners(stale, b.fence())) == rows[0]
    assert await snapshot(store) == before
    again = await register(store, rid=b.rid, generation=b.generation)  # b's fence superseded
    with pytest.raises(OwnerLeaseExpired):
        await store.change_owners(changes(rows), b.fence())
    assert [await store.read(row.key) for row in rows] == rows
    moved = applied(await store.change_owners(changes(rows), again.fence()))
    assert all(row.owner == again.fence() for row in moved)


async def test_capacity_is_counted_for_the_whole_batch(store: LocationStore) -> None:
    """S06-18: the new owner node must take every arriving row at once: active+pending +
    the rows coming from another NodeRid must not exceed its capacity
    (CapacityExceeded, nothing changed); exactly filling it is fine."""
    a = await register(store, ttl=TTL * 10)
    b = await register(store, capacity=4)
    await ready(store, actor(b, "resident"))
    await reserved(store, actor(b, "arriving-soon"))  # pending counts too
    rows = await spot_with_members(store, a)  # 3 rows, b has room for 2
    before = await snapshot(store)
    with pytest.raises(CapacityExceeded):
        await store.change_owners(changes(rows), b.fence())
    assert await snapshot(store) == before
    moved = applied(await store.change_owners(changes(rows[:2]), b.fence()))
    assert await usage(store, b) == (3, 1)
    assert await usage(store, a) == (1, 0)
    with pytest.raises(CapacityExceeded):  # full now: even one more row does not fit
        await store.change_owners(changes(rows[2:]), b.fence())
    # rows the new NodeRid owns already arrive from nowhere: a full node takes them back
    await advance_store_clock(store, TTL + 1)  # b's lifecycle expires, a lives on
    again = await register(store, rid=b.rid, capacity=4)
    back = applied(await store.change_owners(changes(list(moved)), again.fence()))
    assert all(row.owner == again.fence() for row in back)
    assert await usage(store, again) == (3, 1)


async def test_rows_of_different_owners_move_together(store: LocationStore) -> None:
    """S06-18: the rows need not share one owner: each old owner node gives back its own
    units (docs/decisions.md, "change_owners")."""
    a, b, c = await register(store), await register(store), await register(store)
    room = await ready(store, spot(a, "room"))
    here = await ready(store, actor(a, "here", membership=SpotId("room")))
    there = await ready(store, actor(c, "there", membership=SpotId("room")))
    moved = applied(await store.change_owners(changes([room, here, there]), b.fence()))
    assert [row.owner for row in moved] == [b.fence()] * 3
    assert await usage(store, a) == (0, 0)
    assert await usage(store, c) == (0, 0)
    assert await usage(store, b) == (3, 0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("empty", "at least one row"),
        ("duplicate", "twice"),
        ("bad-version", "expected_version"),
        ("not-a-pair", "pair"),
        ("not-a-key", "ObjectKey"),
        ("not-a-sequence", "sequence"),
    ],
)
async def test_empty_duplicate_or_malformed_changes_are_value_errors(
    store: LocationStore, bad: str, message: str
) -> None:
    """S06-18: malformed input is refused before any store access, nothing changed: no
    rows, one key twice, a bad expected version, an entry that is not a (key, version)
    pair or whose key is no ObjectKey, an iterator instead of a sequence."""
    a, b = await register(store), await register(store)
    room, m0 = await spot_with_members(store, a, members=1)
    arg: object = {
        "empty": [],
        "duplicate": [*changes([room, m0]), (room.key, room.store_version)],
        "bad-version": [*changes([room]), (m0.key, -1)],
        "not-a-pair": [*changes([room]), m0.key],
        "not-a-key": [*changes([room]), ("m0", m0.store_version)],
        "not-a-sequence": iter(changes([room, m0])),
    }[bad]
    before = await snapshot(store)
    with pytest.raises(ValueError, match=message):
        await store.change_owners(arg, b.fence())  # type: ignore[arg-type]
    assert await snapshot(store) == before


RACERS = ("change_owner", "set_membership", "set_relocation", "begin_closing", "release")


@pytest.mark.parametrize("racer", RACERS)
async def test_a_racing_single_row_cas_on_one_row_exactly_one_wins(
    store: LocationStore, racer: str
) -> None:
    """S06-18: change_owners against a concurrent single-row CAS of one of its rows
    (another owner change, a field CAS, a close, a release): exactly one of the two
    applies; when the single CAS wins, no other row of the batch changed; the counters
    always match the rows."""
    a, b, c = await register(store), await register(store), await register(store)
    wins = {"batch": 0, "single": 0}
    rounds = 8
    for round_ in range(rounds):
        rows = await spot_with_members(store, a, name=f"room{round_}")
        target = rows[1 + round_ % 2]
        results: dict[str, CasResult[object]] = {}
        single_calls: dict[str, Callable[[], Awaitable[CasResult[object]]]] = {
            "change_owner": lambda t=target: store.change_owner(t.key, t.store_version, c.fence()),
            "set_membership": lambda t=target: store.set_membership(t.key, t.store_version, None),
            "set_relocation": lambda t=target: store.set_relocation(
                t.key, t.store_version, RelocationMark(OperationId(1), c.fence(), sealed=False)
            ),
            "begin_closing": lambda t=target: store.begin_closing(t.key, t.store_version),
            "release": lambda t=target: store.release(t.key, t.store_version),
        }

        async def batch(
            rows: list[AuthorityRow] = rows, results: dict[str, CasResult[object]] = results
        ) -> None:
            results["batch"] = await store.change_owners(changes(rows), b.fence())

        async def single(
            call: Callable[[], Awaitable[CasResult[object]]] = single_calls[racer],
            results: dict[str, CasResult[object]] = results,
        ) -> None:
            results["single"] = await call()

        async with trio.open_nursery() as nursery:
            first, second = (batch, single) if round_ % 2 else (single, batch)
            nursery.start_soon(first)
            nursery.start_soon(second)
        won = [name for name, result in results.items() if isinstance(result, Applied)]
        assert len(won) == 1, results
        wins[won[0]] += 1
        now = [await store.read(row.key) for row in rows]
        if won == ["batch"]:
            assert all(row is not None and row.owner == b.fence() for row in now)
            assert conflict(results["single"]) == now[rows.index(target)]
        else:
            assert conflict(results["batch"]) == now[rows.index(target)]
            for before, row in zip(rows, now, strict=True):
                if before is not target:
                    assert row == before
    counts = [await usage(store, node) for node in (a, b, c)]
    gone = wins["single"] if racer == "release" else 0
    assert sum(active for active, _ in counts) == 3 * rounds - gone
    assert counts[1][0] == 3 * wins["batch"]
    assert counts[2][0] == (wins["single"] if racer == "change_owner" else 0)


async def test_two_overlapping_batches_exactly_one_wins(store: LocationStore) -> None:
    """S06-18: two aggregate moves of the same rows given in opposite orders, racing:
    exactly one applies and the other is a Conflict (never a deadlock error), every row
    ends at the winner's owner."""
    a, b, c = await register(store), await register(store), await register(store)
    for round_ in range(8):
        rows = await spot_with_members(store, a, name=f"room{round_}", members=3)
        results: dict[str, CasResult[tuple[AuthorityRow, ...]]] = {}

        async def move(
            name: str,
            given: list[AuthorityRow],
            to: Node,
            results: dict[str, CasResult[tuple[AuthorityRow, ...]]] = results,
        ) -> None:
            results[name] = await store.change_owners(changes(given), to.fence())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(move, "b", rows, b)
            nursery.start_soon(move, "c", rows[::-1], c)
        won = [name for name, result in results.items() if isinstance(result, Applied)]
        assert len(won) == 1, results
        owner = (b if won == ["b"] else c).fence()
        now = [await store.read(row.key) for row in rows]
        assert all(row is not None and row.owner == owner for row in now)
    counts = [await usage(store, node) for node in (a, b, c)]
    assert counts[0] == (0, 0)
    assert counts[1][0] + counts[2][0] == 4 * 8


async def test_counting_store_counts_one_write(store: LocationStore) -> None:
    """S06-18: the aggregate commit is ONE Store write (no read) whatever the number of
    rows, and a RecordingStore keeps one call per row, all at the same time."""
    a, b = await register(store), await register(store)
    rows = await spot_with_members(store, a, members=3)
    counting = CountingStore(store)
    recording = RecordingStore(counting)
    moved = applied(await recording.change_owners(changes(rows), b.fence()))
    assert counting.writes == 1 and counting.reads == 0
    assert counting.calls == {"change_owners": 1}
    history = recording.history
    assert [call.key for call in history] == [row.key for row in rows]
    assert {call.method for call in history} == {"change_owners"}
    assert all(call.applied for call in history)
    assert [call.row for call in history] == list(moved)
    assert len({call.at for call in history}) == 1
    counting.reset()
    lost = await recording.change_owners(changes(rows), a.fence())  # stale versions
    assert isinstance(lost, Conflict)
    assert counting.calls == {"change_owners": 1}
    assert [call.applied for call in recording.history[len(rows) :]] == [False] * len(rows)
    assert [call.owner for call in recording.history[len(rows) :]] == [b.fence()] * len(rows)
