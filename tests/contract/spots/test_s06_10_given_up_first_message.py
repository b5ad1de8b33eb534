"""S06-10: the first message of a given-up cold activation never runs later (spec 06 §5),
on two nodes, both stores.

A cold activation whose factory outlives the request's deadline is given up (its
reservation given back, the caller answered DeadlineExceeded). While that attempt is still
ending (here: its root's deletion is held in the Store), the next request of the id
activates a new incarnation: only its own first message runs there, never the given-up
one ("nothing is resubmitted automatically after a timeout"; a request completes exactly
once, within one deadline).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import trio
from call_kit import Recorder, client_app, client_config, server_config, spot_app

from zlink_trio import DeadlineExceeded
from zlink_trio.testing import CountingStore, StoreWrapper, open_cluster

T = TypeVar("T")


class HeldRootDeletion(StoreWrapper):
    """Holds the FIRST ``delete_root`` call until :attr:`let_go` is set (the others pass)."""

    def __init__(self, inner: CountingStore) -> None:
        super().__init__(inner)
        self.holding = trio.Event()
        self.let_go = trio.Event()

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        if method == "delete_root" and not self.holding.is_set():
            self.holding.set()
            await self.let_go.wait()
        return await call()


async def test_s06_10_a_given_up_activations_first_message_never_runs_on_the_next(
    clock: object, store: CountingStore
) -> None:
    """S06-10: request "add a" cold-activates "cart" on node 1; its factory blocks past
    the 2 s deadline: DeadlineExceeded, the activation given up (``find`` is None). While
    that attempt still ends (its root deletion held), "add b" activates a new incarnation
    and answers 1; "add c" answers 2: "a" never ran (not on the given-up incarnation, not
    on the new one after "b"), and only one handler ran per request."""
    rec = Recorder(factory_gate=trio.Event())
    held = HeldRootDeletion(store)
    async with open_cluster(
        2,
        store=held,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1", slow_factory=True),
        config=lambda i: client_config() if i == 0 else server_config(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with pytest.raises(DeadlineExceeded):
            await caller.spots.request("c1", "add", b"a").instance("cart").timeout(2)
        with trio.fail_after(10):
            await held.holding.wait()  # the given-up attempt is ending: its root deletion
        assert await caller.spots.find("c1") is None
        assert rec.factory_gate is not None
        rec.factory_gate.set()
        assert await caller.spots.request("c1", "add", b"b").instance("cart").timeout(10) == b"1"
        held.let_go.set()
        assert await caller.spots.request("c1", "add", b"c").timeout(10) == b"2"
        assert rec.of("c1") == [("add", b"b"), ("add", b"c")]
        assert rec.runs("c1") == 2  # the given-up factory run and the new incarnation's
