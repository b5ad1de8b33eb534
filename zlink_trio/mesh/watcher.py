"""The descriptor watcher: the logical owner of connection intents.

Every ``descriptor_poll_interval`` it reads ``store.list_nodes()`` and applies the
snapshot: a live descriptor of another node in a mesh this node is in gets an intent; an
intent whose descriptor is gone or whose lease expired loses it (only intents older than
the snapshot's start, so an admission that raced the read is not undone). ``refresh()``
asks for a poll now and waits for one that started after the call (concurrent callers
share it): the acceptor uses it before refusing an unknown hello, and a goodbye kicks it
so a peer that left is GONE at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final, final

import trio

from ..ids import MeshName, NodeRid
from ..store.api import LocationStore, NodeDescriptor

__all__ = ["DescriptorView", "DescriptorWatcher"]

logger = logging.getLogger("zlink_trio.mesh")

DescriptorView = Mapping[tuple[MeshName, NodeRid], NodeDescriptor]
Apply = Callable[[DescriptorView, int], None]
"""``apply(view, mark)``: ``mark`` is what ``marker()`` returned when the read started."""


@final
class DescriptorWatcher:
    __slots__ = (
        "_apply",
        "_closed",
        "_completed",
        "_done",
        "_interval",
        "_kick",
        "_marker",
        "_meshes",
        "_self_rid",
        "_started",
        "_store",
        "failures",
        "polls",
        "view",
    )

    def __init__(
        self,
        store: LocationStore,
        meshes: frozenset[MeshName],
        self_rid: NodeRid,
        interval: float,
        apply: Apply,
        marker: Callable[[], int],
    ) -> None:
        self._store: Final = store
        self._meshes: Final = meshes
        self._self_rid: Final = self_rid
        self._interval: Final = interval
        self._apply: Final = apply
        self._marker: Final = marker
        self.view: DescriptorView = {}
        """Live descriptors of other nodes in this node's meshes, as of the last poll."""
        self._started = 0  # polls started
        self._completed = 0  # polls finished (successfully or not)
        self._kick = trio.Event()
        self._done = trio.Event()
        self._closed = False  # run() ended: no poll will come
        self.polls = 0
        self.failures = 0

    def live(self, mesh: MeshName, rid: NodeRid) -> NodeDescriptor | None:
        return self.view.get((mesh, rid))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll once, report started, then poll every interval or when kicked."""
        try:
            await self._poll()
            task_status.started()
            while True:
                with trio.move_on_after(self._interval):
                    await self._kick.wait()
                await self._poll()
        finally:
            # Cancelled (lease lost, node closed): nobody may wait for a poll any more.
            self._closed = True
            self._done.set()

    def kick(self) -> None:
        """Ask for a poll soon (no waiting)."""
        self._kick.set()

    async def refresh(self) -> None:
        """Wait for a poll that starts after this call (returns at once once the
        watcher stopped)."""
        target = self._started + 1
        self._kick.set()
        while self._completed < target and not self._closed:
            await self._done.wait()
        if self._closed:
            await trio.lowlevel.checkpoint()

    async def _poll(self) -> None:
        self._started += 1
        self._kick = trio.Event()
        mark = self._marker()
        try:
            records = await self._store.list_nodes()
        except Exception:
            self.failures += 1
            logger.exception("descriptor poll failed; the previous view stays")
        else:
            self.polls += 1
            self.view = {
                (r.descriptor.mesh_name, r.descriptor.node_rid): r.descriptor
                for r in records
                if r.live
                and r.descriptor.mesh_name in self._meshes
                and r.descriptor.node_rid != self._self_rid
            }
            self._apply(self.view, mark)
        finally:
            self._completed += 1
            done, self._done = self._done, trio.Event()
            done.set()
