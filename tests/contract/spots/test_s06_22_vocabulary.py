"""S06-22: one terminal-result vocabulary (spec 06 §3.2, §10 "언어 사이 정합"): the same
golden scenario run against Actors and against User Spots gives the same sequence of
terminal results -- Existing / Created / Rejected (the shared result shapes) or the same
typed error kinds -- on three nodes, through both stores."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
from spot_kit import SpotRecorder, make_spot_class

from zlink_trio import (
    ActorCreateEvent,
    App,
    Approve,
    Created,
    CreateDecision,
    DisableRelocation,
    Existing,
    RecreateOnRelocation,
    Reject,
    Rejected,
    SpotCreated,
    SpotExisting,
    SpotWide,
    ZLinkError,
)
from zlink_trio.testing import CountingStore, open_cluster

GOLDEN = [
    "Created",  # get_or_create of a new id
    "Existing",  # the same again, from another node
    "AlreadyExists",  # exclusive create of a taken id
    "TypeMismatch",  # the same id, another type
    "Rejected",  # the create callback refuses
    "Created",  # the refused id is free: a new attempt with its own request
    "Created+Existing",  # a race of two: one Created, one Existing
]


def _name(result: object) -> str:
    if isinstance(result, Created | SpotCreated):
        return "Created"
    if isinstance(result, Existing | SpotExisting):
        return "Existing"
    if isinstance(result, Rejected):  # SpotRejected is a Rejected
        return "Rejected"
    raise AssertionError(f"not a create result: {result!r}")


async def _scenario(
    call: Callable[[int, str, str, bytes | None, bool], Awaitable[Any]],
) -> list[str]:
    """The golden scenario; ``call(node, id, type, request, exclusive)`` runs one create."""
    outcomes: list[str] = []

    async def one(*args: Any) -> str:
        try:
            return _name(await call(*args))
        except ZLinkError as exc:
            return exc.kind.name.title().replace("_", "")

    outcomes.append(await one(0, "x", "t", None, False))
    outcomes.append(await one(1, "x", "t", None, False))
    outcomes.append(await one(2, "x", "t", None, True))
    outcomes.append(await one(1, "x", "u", None, False))
    outcomes.append(await one(2, "y", "t", b"reject", False))
    outcomes.append(await one(0, "y", "t", b"ok", False))
    race: list[str] = []

    async def racer(node: int) -> None:
        race.append(await one(node, "z", "t", None, False))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(racer, 1)
        nursery.start_soon(racer, 2)
    outcomes.append("+".join(sorted(race)))
    return outcomes


def _actor_app() -> App:
    app = App()
    app.enable_actor_dispatch()

    class Thing:
        def __init__(self, context: Any) -> None:
            self.context = context

    app.register_actor("t", Thing, relocation=RecreateOnRelocation())
    app.register_actor("u", Thing, relocation=RecreateOnRelocation())

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        return Reject(b"no") if event.request == b"reject" else Approve()

    app.on_create_actor(on_create)
    return app


def _spot_app() -> App:
    app = App()
    cls = make_spot_class(SpotRecorder())
    app.register_spot("t", cls, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot("u", cls, execution=SpotWide(), relocation=DisableRelocation())
    return app


async def test_s06_22_actors_and_spots_share_one_terminal_vocabulary(
    clock: object, store: CountingStore
) -> None:
    """S06-22: the golden scenario gives the golden terminal results for Actors and for
    User Spots alike; Spot results are the shared shapes (a SpotCreated is a Created
    shape, a SpotRejected a ``zlink_trio.Rejected``) carrying a SpotRef."""
    async with open_cluster(3, store=store, app=lambda i: _actor_app()) as cluster:
        await cluster.wait_all_admitted()

        async def actor_call(node: int, oid: str, st: str, req: bytes | None, ex: bool) -> Any:
            actors = cluster.servers[node].actors
            call = actors.create(oid, st) if ex else actors.get_or_create(oid, st)
            if req is not None:
                call = call.request(req)
            return await call.timeout(10)

        assert await _scenario(actor_call) == GOLDEN

    async with open_cluster(3, store=store, app=lambda i: _spot_app()) as cluster:
        await cluster.wait_all_admitted()
        seen: list[object] = []

        async def spot_call(node: int, oid: str, st: str, req: bytes | None, ex: bool) -> Any:
            spots = cluster.servers[node].spots
            if ex:
                # create(type) issues its own id: make it draw the taken one.
                from zlink_trio import SpotId
                from zlink_trio.testing import set_spot_id_source

                set_spot_id_source(cluster.servers[node], lambda: SpotId(oid))
                call = spots.create(st)
            else:
                call = spots.get_or_create(oid, st)
            if req is not None:
                call = call.request(req)
            result = await call.timeout(10)
            seen.append(result)
            return result

        assert await _scenario(spot_call) == GOLDEN
        assert any(isinstance(r, SpotCreated) for r in seen)
        assert any(isinstance(r, SpotExisting) for r in seen)
        assert any(isinstance(r, Rejected) for r in seen)
        assert not any(isinstance(r, Created | Existing) for r in seen)  # Actor refs only
    # One shape per state: the Spot and Actor classes of a state share their base.
    assert (set(SpotCreated.__mro__) & set(Created.__mro__)) - {object}
    assert (set(SpotExisting.__mro__) & set(Existing.__mro__)) - {object}
