"""The relocation participant protocol (zlink_trio/objects/relocation.py,
docs/relocation.md "Participants"), white-box: a recording participant on each node sees
its calls in the documented order, with the state its seal returned arriving at the
target's restore; a refusing restore makes the move abort (aborted at the source, discarded
at the target for what had restored)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from zlink_trio import ZLinkError
from zlink_trio.errors import Unavailable
from zlink_trio.objects.relocation import RelocationUnit
from zlink_trio.testing import open_cluster

sys.path.insert(0, str(Path(__file__).parents[2] / "contract" / "actors"))
from relocation_kit import RelocLog, create_on, make_reloc_app


class Recorder:
    def __init__(self, node: str, calls: list[tuple[str, str, object]], *, refuse: bool = False):
        self.node = node
        self.calls = calls
        self.refuse = refuse
        self.discarded_seen = trio.Event()

    @property
    def participant_name(self) -> str:
        return "recorder"  # one per node: the same name on source and target

    async def seal(self, unit: RelocationUnit) -> bytes:
        self.calls.append((self.node, "seal", unit.actor_id.value))
        await trio.lowlevel.checkpoint()
        return b"state-of-" + unit.actor_id.value.encode()

    async def restore(self, unit: RelocationUnit, state: bytes) -> None:
        self.calls.append((self.node, "restore", state))
        await trio.lowlevel.checkpoint()
        if self.refuse:
            raise Unavailable("refused by the participant")

    async def departed(self, unit: RelocationUnit) -> None:
        self.calls.append((self.node, "departed", unit.target_owner_generation.value))

    async def committed(self, unit: RelocationUnit) -> None:
        self.calls.append((self.node, "committed", unit.target_owner_generation.value))

    async def aborted(self, unit: RelocationUnit) -> None:
        self.calls.append((self.node, "aborted", unit.actor_id.value))

    async def discarded(self, unit: RelocationUnit) -> None:
        self.calls.append((self.node, "discarded", unit.actor_id.value))
        self.discarded_seen.set()


def _runtime(server: Any) -> Any:
    return server._runtime.actors


@pytest.mark.parametrize("refuse", [False, True])
async def test_participants_are_called_in_order(refuse: bool) -> None:
    log = RelocLog()
    calls: list[tuple[str, str, object]] = []
    async with open_cluster(2, app=lambda i: make_reloc_app(log, f"node{i}")) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        _runtime(a).relocation_participants.append(Recorder("node0", calls))
        # On the target, a participant that restores fine comes before the refusing one:
        # only it is discarded (the refusing one's restore never returned).
        first = Recorder("node1-first", calls)
        target = Recorder("node1", calls, refuse=refuse)
        if refuse:
            _runtime(b).relocation_participants.append(first)
        _runtime(b).relocation_participants.append(target)
        actor = await create_on(b, cluster.servers, 0, "part", "counter")
        if refuse:
            with pytest.raises(ZLinkError):
                await a.relocate(actor, to=b.identity.node_rid)
            with trio.fail_after(10):
                await first.discarded_seen.wait()
            state = b"state-of-" + actor.encode()
            assert calls[:3] == [
                ("node0", "seal", actor),
                ("node1-first", "restore", state),
                ("node1", "restore", state),
            ]
            assert sorted(calls[3:]) == [
                ("node0", "aborted", actor),
                ("node1-first", "discarded", actor),
            ]
            assert await b.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        else:
            result = await a.relocate(actor, to=b.identity.node_rid)
            assert result.committed
            assert calls == [
                ("node0", "seal", actor),
                ("node1", "restore", b"state-of-" + actor.encode()),
                ("node0", "departed", 2),
                ("node1", "committed", 2),
            ]
