"""A fault-injecting transport for tests: per peer and per command, drop, delay,
duplicate, reorder and cut outbound frames, deterministically from a seed.

Install a :class:`FaultPlan` on nodes (``zlink_trio.testing.open_cluster(fault_plan=...)``
or ``zlink_trio.testing.instrument``); add and remove rules at any time. The plan acts
on each instrumented connection's writer (:mod:`.instrumented`, installed from outside the
connection), after the writer lane and before sequence numbers and the stream (see
docs/decisions.md, "Fault plan semantics"):

* **drop**: the frame takes its sequence number but is never written: a frame lost on
  the wire. The receiver sees the gap at the next frame on that connection (a keepalive
  ping at the latest) and closes the connection: requests in flight on it get
  ``LinkLost``, the dialer reconnects.
* **delay(seconds)**: the frame is held back and written ``seconds`` later; frames sent
  meanwhile overtake it. Lost if the connection breaks first.
* **duplicate**: the frame is written twice (the receiver gets the record twice).
* **reorder**: the frame is held until the next frame on the connection was written,
  then written right after it (the two swap).
* **cut**: the connection is closed at this frame; ``deliver=True`` writes the frame
  first (the peer gets it, the link breaks right after), else it is lost with the link.
* **stall**: the writer stops at this frame (written nothing more, it takes nothing more
  from the writer lane) until :meth:`FaultRule.release`: a peer that stopped reading.
  The lane fills (``peer_send_queue``) and later sends wait ``peer_send_timeout``.

Matching: ``command`` (a number or a collection), ``to`` (the receiving NodeRid),
``sender`` (the sending NodeRid), ``mesh``; None matches anything. A rule lets its first
``after`` matching frames pass, then fires at most ``count`` times (None: unlimited), each
time with ``probability`` (drawn from the rule's own ``random.Random`` seeded from the
plan's seed and the rule's number, so a given sequence of matching frames always gets
the same decisions). Rules are tried in the order they were added; the first that fires
decides. Every firing is counted on the rule and logged in :attr:`FaultPlan.events`.
"""

from __future__ import annotations

import enum
import random
from collections import Counter, deque
from collections.abc import Collection
from typing import Final, final

import attrs
import trio

from ..ids import MeshName, NodeRid
from .api import PeerIdentity

__all__ = ["FaultEvent", "FaultKind", "FaultPlan", "FaultRule"]

EVENT_LOG_LIMIT: Final = 100_000


class FaultKind(enum.Enum):
    DROP = "drop"
    DELAY = "delay"
    DUPLICATE = "duplicate"
    REORDER = "reorder"
    CUT = "cut"
    STALL = "stall"
    PARTITION = "partition"
    """A connection refused or cut because its two nodes are partitioned."""


@attrs.frozen(slots=True)
class FaultEvent:
    """One firing of a rule."""

    kind: FaultKind
    rule: int
    """The rule's number (order of creation in its plan, from 1)."""
    sender: NodeRid
    to: PeerIdentity
    command: int
    time: float


def _commands(command: int | Collection[int] | None) -> frozenset[int] | None:
    if command is None:
        return None
    if isinstance(command, int):
        return frozenset({int(command)})
    return frozenset(int(c) for c in command)


@final
class FaultRule:
    """One rule of a plan (made by the plan's builder methods)."""

    __slots__ = (
        "_changed",
        "_commands",
        "_plan",
        "_random",
        "after",
        "count",
        "deliver",
        "fired",
        "kind",
        "matched",
        "mesh",
        "number",
        "probability",
        "released",
        "removed",
        "seconds",
        "sender",
        "to",
    )

    def __init__(
        self,
        plan: FaultPlan,
        number: int,
        kind: FaultKind,
        *,
        command: int | Collection[int] | None,
        to: NodeRid | None,
        sender: NodeRid | None,
        mesh: MeshName | None,
        after: int,
        count: int | None,
        probability: float,
        seconds: float = 0.0,
        deliver: bool = False,
    ) -> None:
        if after < 0 or (count is not None and count < 0):
            raise ValueError("after and count must be >= 0")
        if not 0.0 <= probability <= 1.0:
            raise ValueError("probability must be in 0..1")
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        self._plan = plan
        self.number = number
        self.kind = kind
        self._commands = _commands(command)
        self.to = to
        self.sender = sender
        self.mesh = mesh
        self.after = after
        self.count = count
        self.probability = probability
        self.seconds = seconds
        self.deliver = deliver
        self._random = random.Random(f"{plan.seed}/{number}")
        self.matched = 0
        """Frames that matched the filters while the rule was active (fired or not)."""
        self.fired = 0
        """Times the rule acted."""
        self.removed = False
        self._changed: trio.Event | None = None
        self.released = trio.Event()
        """A stall ends (:meth:`release`)."""

    @property
    def command(self) -> frozenset[int] | None:
        return self._commands

    @property
    def active(self) -> bool:
        return not self.removed and (self.count is None or self.fired < self.count)

    def remove(self) -> None:
        self._plan.remove(self)

    def release(self) -> None:
        """A stall rule: the stalled writer goes on (and the rule stops firing)."""
        self._plan.remove(self)
        self.released.set()

    async def wait_fired(self, times: int = 1) -> None:
        """Wait until the rule has fired at least ``times`` times in total."""
        while self.fired < times:
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    def _matches(self, sender: NodeRid, peer: PeerIdentity, command: int) -> bool:
        return (
            (self._commands is None or command in self._commands)
            and (self.to is None or self.to == peer.node_rid)
            and (self.sender is None or self.sender == sender)
            and (self.mesh is None or self.mesh == peer.mesh_name)
        )

    def _try(self) -> bool:
        """A matching frame: does the rule fire on it?"""
        self.matched += 1
        if self.matched <= self.after:
            return False
        if self.probability < 1.0 and self._random.random() >= self.probability:
            return False
        self.fired += 1
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        return True

    def __repr__(self) -> str:
        return (
            f"<FaultRule #{self.number} {self.kind.value} command={sorted(self._commands or ())}"
            f" fired={self.fired}/{self.count}>"
        )


@final
class FaultPlan:
    """Rules that act on outbound frames of every node the plan is installed on."""

    def __init__(self, seed: int = 0) -> None:
        self.seed: Final = seed
        self._rules: list[FaultRule] = []
        self._numbers = 0
        self._events: deque[FaultEvent] = deque(maxlen=EVENT_LOG_LIMIT)
        self._fired: Counter[FaultKind] = Counter()
        self._partitions: set[frozenset[NodeRid]] = set()

    # --- building ------------------------------------------------------------------------
    def _add(self, kind: FaultKind, **options: object) -> FaultRule:
        self._numbers += 1
        rule = FaultRule(self, self._numbers, kind, **options)  # type: ignore[arg-type]
        self._rules.append(rule)
        return rule

    def drop(
        self,
        *,
        command: int | Collection[int] | None = None,
        to: NodeRid | None = None,
        sender: NodeRid | None = None,
        mesh: MeshName | None = None,
        after: int = 0,
        count: int | None = None,
        probability: float = 1.0,
    ) -> FaultRule:
        """Lose matching frames (detected by the receiver: the link breaks)."""
        return self._add(
            FaultKind.DROP, command=command, to=to, sender=sender, mesh=mesh, after=after,
            count=count, probability=probability,
        )  # fmt: skip

    def delay(
        self,
        seconds: float,
        *,
        command: int | Collection[int] | None = None,
        to: NodeRid | None = None,
        sender: NodeRid | None = None,
        mesh: MeshName | None = None,
        after: int = 0,
        count: int | None = None,
        probability: float = 1.0,
    ) -> FaultRule:
        """Hold matching frames back for ``seconds`` (later frames overtake them)."""
        return self._add(
            FaultKind.DELAY, command=command, to=to, sender=sender, mesh=mesh, after=after,
            count=count, probability=probability, seconds=seconds,
        )  # fmt: skip

    def duplicate(
        self,
        *,
        command: int | Collection[int] | None = None,
        to: NodeRid | None = None,
        sender: NodeRid | None = None,
        mesh: MeshName | None = None,
        after: int = 0,
        count: int | None = None,
        probability: float = 1.0,
    ) -> FaultRule:
        """Write matching frames twice."""
        return self._add(
            FaultKind.DUPLICATE, command=command, to=to, sender=sender, mesh=mesh,
            after=after, count=count, probability=probability,
        )  # fmt: skip

    def reorder(
        self,
        *,
        command: int | Collection[int] | None = None,
        to: NodeRid | None = None,
        sender: NodeRid | None = None,
        mesh: MeshName | None = None,
        after: int = 0,
        count: int | None = None,
        probability: float = 1.0,
    ) -> FaultRule:
        """Swap each matching frame with the frame written after it."""
        return self._add(
            FaultKind.REORDER, command=command, to=to, sender=sender, mesh=mesh,
            after=after, count=count, probability=probability,
        )  # fmt: skip

    def cut(
        self,
        *,
        command: int | Collection[int] | None = None,
        to: NodeRid | None = None,
        sender: NodeRid | None = None,
        mesh: MeshName | None = None,
        after: int = 0,
        count: int | None = 1,
        probability: float = 1.0,
        deliver: bool = False,
    ) -> FaultRule:
        """Close the connection at the (``after`` + 1)-th matching frame (once by
        default); ``deliver=True`` writes that frame before closing."""
        return self._add(
            FaultKind.CUT, command=command, to=to, sender=sender, mesh=mesh, after=after,
            count=count, probability=probability, deliver=deliver,
        )  # fmt: skip

    def stall(
        self,
        *,
        command: int | Collection[int] | None = None,
        to: NodeRid | None = None,
        sender: NodeRid | None = None,
        mesh: MeshName | None = None,
        after: int = 0,
    ) -> FaultRule:
        """Stop the writer of the connection at the (``after`` + 1)-th matching frame
        until :meth:`FaultRule.release` (then that frame and the rest are written)."""
        return self._add(
            FaultKind.STALL, command=command, to=to, sender=sender, mesh=mesh, after=after,
            count=1, probability=1.0,
        )  # fmt: skip

    def partition(self, a: NodeRid, b: NodeRid) -> None:
        """Partition nodes ``a`` and ``b``: no connection between them is admitted (the
        handshake completes but the connection is closed before it is attached, so each
        side sees the peer CONNECTING), and a live connection between them is cut at its
        next frame. Lasts until :meth:`heal` or :meth:`clear`."""
        self._partitions.add(frozenset((a, b)))

    def heal(self, a: NodeRid, b: NodeRid) -> None:
        """End the partition between ``a`` and ``b`` (idempotent)."""
        self._partitions.discard(frozenset((a, b)))

    def remove(self, rule: FaultRule) -> None:
        """Stop a rule (idempotent); its counters stay readable."""
        rule.removed = True
        if rule in self._rules:
            self._rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule and heal every partition (counters and events stay)."""
        for rule in self._rules:
            rule.removed = True
        self._rules.clear()
        self._partitions.clear()

    # --- reporting -----------------------------------------------------------------------
    @property
    def rules(self) -> tuple[FaultRule, ...]:
        return tuple(self._rules)

    @property
    def events(self) -> tuple[FaultEvent, ...]:
        """Every firing so far (the last 100,000), oldest first."""
        return tuple(self._events)

    def fired(self, kind: FaultKind | None = None) -> int:
        """Firings of every rule (or of one kind), removed rules included."""
        if kind is None:
            return sum(self._fired.values())
        return self._fired[kind]

    # --- used by the transport -------------------------------------------------------------
    def _partitioned(self, sender: NodeRid, peer: PeerIdentity) -> bool:
        """True (and counted as a PARTITION firing) when ``sender`` and ``peer`` are
        partitioned."""
        if not self._partitions or frozenset((sender, peer.node_rid)) not in self._partitions:
            return False
        self._fired[FaultKind.PARTITION] += 1
        self._events.append(
            FaultEvent(FaultKind.PARTITION, 0, sender, peer, 0, trio.current_time())
        )
        return True

    def _decide(self, sender: NodeRid, peer: PeerIdentity, command: int) -> FaultRule | None:
        for rule in self._rules:
            if rule.active and rule._matches(sender, peer, command) and rule._try():
                self._fired[rule.kind] += 1
                self._events.append(
                    FaultEvent(rule.kind, rule.number, sender, peer, command, trio.current_time())
                )
                return rule
        return None
