"""One transient Store failure anywhere in a create never leaves a reservation behind
(issue 10, "Every Creating reservation has a bounded life").

For each shape of create (approved or rejected, with or without a creation request and an
explicit OperationId), the Store calls of one undisturbed create are listed; then, one
call index at a time and for each way that call can fail (``Unavailable`` without running
it; for a mutation also ``StoreOutcomeUnknown`` after running it or without running it),
a create of a fresh id runs with exactly that call failing once. Afterwards the id can be
created at once, no Creating row and no pending unit remains, and nothing was left for the
backstop (reclaim after deadline + grace) to clean up. The rounds run in an order shuffled
by a fixed seed, on one cluster per test, local target (the caller hosts the type) and
remote target (it cannot).
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from actor_kit import FAULTS, Recorder, StoreFaults, about_id, client_app, make_app

from zlink_trio import Created, Existing, OperationId, ServerConfig, ZLinkError
from zlink_trio.actors.results import Rejected
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision, Reject
from zlink_trio.store.api import AuthorityState, ObjectKey
from zlink_trio.testing import CountingStore, FlowEvent, flow_count, open_cluster

SEED = 1010

MUTATIONS = frozenset({"reserve", "commit_ready", "abort_creation", "put_root", "reclaim"})

CREATE_TIMEOUT = 10.0
GRACE = 5.0
CONFIG = ServerConfig(reservation_grace=GRACE)


@attrs.frozen
class Shape:
    """One shape of create: its creation request (b"reject" makes the approval refuse)
    and whether it runs under an explicit OperationId."""

    name: str
    request: bytes | None
    explicit: bool


SHAPES = (
    Shape("approve", None, explicit=False),
    Shape("reject-explicit", b"reject", explicit=True),
    Shape("approve-explicit", b"approve", explicit=True),
    Shape("reject", b"reject", explicit=False),
)


async def _verdict(event: ActorCreateEvent) -> CreateDecision:
    return Reject(b"no") if event.request == b"reject" else Approve(b"yes")


async def _create(caller: Any, actor_id: str, shape: Shape) -> object:
    call = caller.create(actor_id, "player")
    if shape.request is not None:
        call = call.request(shape.request)
    if shape.explicit:
        call = call.operation_id(OperationId.new())
    try:
        return await call.timeout(CREATE_TIMEOUT)
    except ZLinkError as exc:  # a typed failure is a fine outcome; a wedge is not
        return exc


@pytest.mark.parametrize("locality", ["local", "remote"])
async def test_one_transient_store_failure_anywhere_in_a_create_leaves_nothing_behind(
    clock: trio.testing.MockClock | None, store: CountingStore, locality: str
) -> None:
    rec = Recorder()
    faults = StoreFaults(store)
    apps = [make_app(rec, on_create=_verdict)]
    if locality == "remote":
        apps = [client_app(), *apps]
    async with open_cluster(len(apps), store=faults, app=lambda i: apps[i], config=CONFIG) as c:
        await c.wait_all_admitted()
        caller = c.servers[0].actors
        rounds: list[tuple[Shape, int, str, str]] = []
        for shape in SHAPES:
            dry = f"dry-{shape.name}"
            faults.watch(about_id(dry))
            undisturbed = await _create(caller, dry, shape)
            faults.stop()
            if shape.request == b"reject":
                assert undisturbed == Rejected(b"no"), undisturbed
            else:
                assert isinstance(undisturbed, Created), undisturbed
            path = list(faults.calls)
            # A local target is handed the source's fresh reservation: it reads neither
            # the terminal record nor the row (docs/decisions.md, "Creation cost"); only
            # an explicit OperationId's source reads the terminal on that path.
            local_fresh = locality == "local" and not shape.explicit
            expected = {"reserve"} if local_fresh else {"reserve", "read_terminal"}
            assert expected <= set(path), path
            rounds.extend(
                (shape, index, method, fault)
                for index, method in enumerate(path)
                for fault in (FAULTS if method in MUTATIONS else FAULTS[:1])
            )
        random.Random(SEED).shuffle(rounds)
        for n, (shape, index, method, fault) in enumerate(rounds):
            actor_id = f"r{n}"
            faults.watch(about_id(actor_id), fail_at=index, fault=fault)
            started = trio.current_time()
            outcome = await _create(caller, actor_id, shape)
            took = trio.current_time() - started
            faults.stop()
            context = (
                f"seed {SEED}, round {n}: {shape.name}, call {index} ({method}) {fault} "
                f"-> {outcome!r}"
            )
            assert faults.fired == f"{method}#{index}:{fault}", context
            if clock is not None:
                assert took < CREATE_TIMEOUT, context  # a typed end, not the deadline
            # Afterwards (well before the first attempt's deadline + grace, so the
            # backstop cannot be what frees it): the id is created at once ...
            try:
                after: object = await caller.get_or_create(actor_id, "player").timeout(3)
            except ZLinkError as exc:
                after = exc
            assert isinstance(after, Created | Existing), f"{context}; then {after!r}"
            # ... and no Creating row, no pending unit is left anywhere.
            row = await store.read(ObjectKey.actor(actor_id))
            assert row is not None and row.state is AuthorityState.READY, context
            assert sum(r.pending for r in await store.list_nodes()) == 0, context
        assert all(flow_count(s, FlowEvent.RECLAIMED) == 0 for s in c.servers)
        assert len(rounds) >= 30
