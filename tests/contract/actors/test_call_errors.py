"""One call convention (issue 9 §5): every error a manager call (create, get_or_create,
find, destroy, send, request) can give its caller is exported from ``zlink_trio`` under
its own name -- no mesh-internal class (``PeerNotAdmitted``, ``LinkLost``, ...) escapes,
even as a subclass of an exported one -- and a timeout that is not a finite number of
seconds > 0 is ``InvalidArgument`` (a ValueError) with a message, on every call that
takes one.

Public surface only; two nodes over real TCP, the memory store on a MockClock.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import zlink_trio
from zlink_trio import (
    ActorCreateEvent,
    AlreadyExists,
    App,
    ApplicationError,
    Approve,
    CapacityExceeded,
    Created,
    CreateDecision,
    DeadlineExceeded,
    InvalidArgument,
    InvalidId,
    InvalidOperation,
    NotConfigured,
    NotFound,
    RecreateOnRelocation,
    ServerConfig,
    ShuttingDown,
    TypeMismatch,
    Unavailable,
    ZLinkError,
    on_request,
    on_send,
)
from zlink_trio.testing import CountingStore, FaultPlan, open_cluster

pytestmark = pytest.mark.parametrize("backend", ["memory"])

MIB = 1024 * 1024


class Seen:
    """Every exception a call raised in this test, with the call that raised it."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, BaseException]] = []

    async def error(
        self,
        label: str,
        expected: type[BaseException] | tuple[type[BaseException], ...],
        run: Callable[[], Awaitable[object]],
    ) -> BaseException:
        try:
            await run()
        except Exception as exc:
            self.errors.append((label, exc))
            assert isinstance(exc, expected), f"{label}: {exc!r}"
            return exc
        raise AssertionError(f"{label}: no error")

    def sync_error(
        self,
        label: str,
        expected: type[BaseException],
        run: Callable[[], object],
    ) -> BaseException:
        try:
            run()
        except Exception as exc:
            self.errors.append((label, exc))
            assert isinstance(exc, expected), f"{label}: {exc!r}"
            return exc
        raise AssertionError(f"{label}: no error")

    def assert_all_exported(self) -> None:
        for label, exc in self.errors:
            name = type(exc).__name__
            assert name in zlink_trio.__all__, f"{label}: {exc!r} is not exported"
            assert getattr(zlink_trio, name) is type(exc), f"{label}: {exc!r}"
            assert isinstance(exc, ZLinkError), f"{label}: {exc!r}"


class Gates:
    def __init__(self) -> None:
        self.gate = trio.Event()
        self.busy = trio.Event()
        self.approval = trio.Event()


def host_app(gates: Gates) -> App:
    app = App()
    app.enable_actor_dispatch()

    class Player:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_send("hold")
        async def hold(self, payload: bytes) -> None:
            gates.busy.set()
            await gates.gate.wait()

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            return payload

        @on_request("fail")
        async def fail(self, payload: bytes) -> bytes:
            raise RuntimeError("handler failed on purpose")

    app.register_actor("player", Player, relocation=RecreateOnRelocation())
    app.register_actor("other", Player, relocation=RecreateOnRelocation())

    async def approve(event: ActorCreateEvent) -> CreateDecision:
        if event.actor_id.value == "boom":
            raise RuntimeError("OnCreateActor failed on purpose")
        if event.actor_id.value == "slow":
            await gates.approval.wait()
        return Approve()

    app.on_create_actor(approve)
    return app


def caller_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    return app


def two_nodes(gates: Gates) -> Any:
    apps = [caller_app(), host_app(gates)]
    return lambda i: apps[i]


BAD_TIMEOUTS: list[tuple[object, str]] = [
    (0, "timeout must be > 0 seconds, got 0"),
    (-1, "timeout must be > 0 seconds, got -1"),
    (0.0, "timeout must be > 0 seconds, got 0.0"),
    (math.nan, "timeout must be > 0 seconds, got nan"),
    (-math.inf, "timeout must be > 0 seconds, got -inf"),
    (math.inf, "timeout must be a finite number of seconds, got inf"),
    (True, "timeout must be a number of seconds, got True"),
    ("5", "timeout must be a number of seconds, got '5'"),
    (None, "timeout must be a number of seconds, got None"),
]


async def test_a_bad_timeout_is_invalid_argument_on_every_call_that_takes_one(
    clock: object, store: CountingStore
) -> None:
    """create, get_or_create, send and request: ``.timeout(x)`` for x not a finite number
    > 0 raises InvalidArgument (a ValueError, not InvalidId) with a message, sets nothing
    (a valid timeout is accepted afterwards) and touches no Store."""
    gates = Gates()
    async with open_cluster(1, store=store, app=host_app(gates)) as cluster:
        actors = cluster.servers[0].actors
        store.reset()
        makers: list[Callable[[], Any]] = [
            lambda: actors.create("a", "player"),
            lambda: actors.get_or_create("a", "player"),
            lambda: actors.send("a", "hold"),
            lambda: actors.request("a", "echo"),
        ]
        for make in makers:
            for value, message in BAD_TIMEOUTS:
                call = make()
                with pytest.raises(InvalidArgument) as info:
                    call.timeout(value)
                assert isinstance(info.value, ValueError)
                assert not isinstance(info.value, InvalidId)
                assert info.value.message == message
                assert str(info.value) == message
                call.timeout(1)  # the refused value set nothing
        assert store.reads == 0 and store.writes == 0


async def _create_errors(seen: Seen, name: str, make: Callable[..., Any]) -> None:
    """The failure paths of create or get_or_create (``make``) on the two-node cluster."""
    seen.sync_error(f"{name} timeout(0)", InvalidArgument, lambda: make("x", "player").timeout(0))
    seen.sync_error(f"{name} bad id", InvalidId, lambda: make("", "player"))
    twice = make("x", "player").timeout(1)
    seen.sync_error(f"{name} option twice", InvalidOperation, lambda: twice.timeout(2))
    seen.sync_error(f"{name} bad mesh", InvalidId, lambda: make("x", "player").in_mesh(""))
    seen.sync_error(
        f"{name} request not bytes",
        InvalidOperation,
        lambda: make("x", "player").request("s"),
    )
    await seen.error(
        f"{name} request too big",
        InvalidOperation,
        lambda: make("x", "player").request(b"r" * (MIB + 1)).timeout(5),
    )
    await seen.error(
        f"{name} unknown mesh", NotFound, lambda: make("x", "player").in_mesh("nowhere")
    )
    await seen.error(f"{name} unknown type", NotFound, lambda: make("x", "ghost").timeout(5))
    await seen.error(f"{name} other type", TypeMismatch, lambda: make("p", "other").timeout(5))
    await seen.error(
        f"{name} OnCreateActor raised",
        ApplicationError,
        lambda: make("boom", "player").timeout(5),
    )
    await seen.error(
        f"{name} approval too slow",
        DeadlineExceeded,
        lambda: make("slow", "player").timeout(0.5),
    )
    submitted = make(f"{name}-once", "player").timeout(5)
    await submitted
    await seen.error(f"{name} submitted twice", InvalidOperation, submitted.submit)


async def _message_errors(seen: Seen, name: str, make_message: Callable[..., Any]) -> None:
    """The failure paths of send or request (``make_message``) that need no fault."""
    seen.sync_error(f"{name} bad id", InvalidId, lambda: make_message("", "echo"))
    seen.sync_error(f"{name} bad packet", InvalidId, lambda: make_message("p", ""))
    seen.sync_error(
        f"{name} payload too big",
        InvalidOperation,
        lambda: make_message("p", "echo", b"x" * (MIB + 1)),
    )
    seen.sync_error(
        f"{name} payload not bytes",
        InvalidOperation,
        lambda: make_message("p", "echo", "s"),
    )
    await seen.error(
        f"{name} no such actor", NotFound, lambda: make_message("nobody", "echo").timeout(5)
    )


async def test_every_error_a_manager_call_raises_is_exported(
    clock: object, store: CountingStore
) -> None:
    """Drive create, get_or_create, find, destroy, send and request through every
    failure path a caller can reach here; each raised exception's own class is one of
    ``zlink_trio.__all__`` (so a caller can catch it by an exported name)."""
    gates = Gates()
    seen = Seen()
    plan = FaultPlan(seed=9)

    def config(index: int) -> ServerConfig:
        return ServerConfig(node_capacity=4) if index == 1 else ServerConfig()

    async with open_cluster(
        2, store=store, app=two_nodes(gates), config=config, fault_plan=plan
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers
        actors = caller.actors

        # --- create / get_or_create --------------------------------------------------
        created = await actors.create("p", "player").timeout(5)
        assert isinstance(created, Created)
        for name, make in (("create", actors.create), ("get_or_create", actors.get_or_create)):
            await _create_errors(seen, name, make)
        await seen.error(
            "create existing", AlreadyExists, lambda: actors.create("p", "player").timeout(5)
        )
        fill = await actors.create("fill", "player").timeout(5)  # the host's 4th and last
        assert isinstance(fill, Created)
        await seen.error(
            "create with no capacity",
            CapacityExceeded,
            lambda: actors.create("full", "player").timeout(5),
        )
        assert await actors.destroy(fill.actor) is True
        gates.approval.set()

        # --- find -------------------------------------------------------------------------
        await seen.error("find bad id", InvalidId, lambda: actors.find(""))

        # --- send / request ------------------------------------------------------------------
        for name, make_message in (("send", actors.send), ("request", actors.request)):
            await _message_errors(seen, name, make_message)
        await seen.error(
            "request no handler", NotFound, lambda: actors.request("p", "nothing").timeout(5)
        )
        await seen.error(
            "request handler raised",
            ApplicationError,
            lambda: actors.request("p", "fail").timeout(5),
        )
        await actors.send("p", "hold")
        await gates.busy.wait()
        await seen.error(
            "request too slow", DeadlineExceeded, lambda: actors.request("p", "echo").timeout(0.5)
        )
        gates.gate.set()

        # --- destroy ----------------------------------------------------------------------
        await seen.error("destroy not a ref", InvalidOperation, lambda: actors.destroy("p"))  # type: ignore[arg-type]
        old = await actors.create("gen", "player").timeout(5)
        assert isinstance(old, Created)
        assert await actors.destroy(old.actor) is True
        assert isinstance(await actors.create("gen", "player").timeout(5), Created)
        await seen.error(
            "destroy another generation", InvalidOperation, lambda: actors.destroy(old.actor)
        )

        current = await actors.find("gen")
        assert current is not None and await actors.destroy(current) is True  # capacity

        # --- the owner unreachable (partitioned: its link is cut, never re-admitted) ----------
        target = await actors.find("p")
        assert target is not None
        plan.partition(caller.identity.node_rid, host.identity.node_rid)
        await seen.error(
            "destroy, link cut on the way", Unavailable, lambda: actors.destroy(target)
        )
        await seen.error(
            "destroy, owner not connected", Unavailable, lambda: actors.destroy(target)
        )
        await seen.error(
            "request, owner not connected",
            Unavailable,
            lambda: actors.request("p", "echo").timeout(0.5),
        )
        await seen.error(
            "send, owner not connected", Unavailable, lambda: actors.send("p", "hold").timeout(0.5)
        )
        await seen.error(
            "create, owner not connected",
            Unavailable,
            lambda: actors.create("far", "player").timeout(0.5),
        )
        plan.clear()

        # --- this node stopped --------------------------------------------------------------
        await cluster.stop(0)
        await seen.error(
            "create after stop", ShuttingDown, lambda: actors.create("z", "player").timeout(5)
        )
        await seen.error(
            "get_or_create after stop",
            ShuttingDown,
            lambda: actors.get_or_create("z", "player").timeout(5),
        )
        await seen.error("find after stop", ShuttingDown, lambda: actors.find("p"))
        await seen.error("destroy after stop", ShuttingDown, lambda: actors.destroy(target))
        await seen.error(
            "send after stop", ShuttingDown, lambda: actors.send("p", "echo").timeout(5)
        )
        await seen.error(
            "request after stop", ShuttingDown, lambda: actors.request("p", "echo").timeout(5)
        )

    # --- no Actor dispatch: no Object candidate ---------------------------------------------
    async with open_cluster(1, store=CountingStore(store.inner)) as plain:
        await seen.error(
            "create without dispatch",
            NotConfigured,
            lambda: plain.servers[0].actors.create("n", "player").timeout(5),
        )

    assert len(seen.errors) >= 50
    seen.assert_all_exported()
