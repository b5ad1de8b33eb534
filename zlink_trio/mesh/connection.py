"""One admitted peer connection: a reader (this task), a writer lane drained by one
writer task, and a keepalive task, all in one nursery that lives exactly as long as the
connection.

Writer lane: a bounded FIFO (:class:`~.writelane.WriterLane`, ``peer_send_queue`` items)
of ``(record, body)`` items. The writer takes everything queued (up to
:data:`BATCH_BYTES`), stamps sequence numbers and writes the batch with ONE ``send_all``.
An idle writer parks on its own (it never waits inside the lane, which would hand it the
first item at once and leave the rest behind it), so the lane's items stay in the lane, in
order, until somebody takes them: the writer, or a sender that drains them itself (below).

The connection knows only its :class:`~.state.TransportState` and its :class:`~.frameio.PeerIO`
(any ``trio.abc.Stream``). Test instrumentation (fault plan, wire tap: :mod:`.instrumented`)
replaces the three hooks :attr:`Connection.write_direct`, :attr:`Connection.write_batch`
and :attr:`Connection.deliver` from outside, and may set :attr:`Connection.wake_at` (the
writer then also wakes at that time); the production path has no branch for it.

Corking: while a reader handles several frames that arrived in one read, sends made by
the handlers (on any connection) are queued without yielding, so a burst of replies
leaves in one write per connection. Coalescing: the answers to such a burst are mostly
sent by the tasks it woke (callers given their replies send their next requests; turns
on runners send their replies), one scheduler pass later; until the writer's next write,
this connection queues every frame (no direct write, no yield), so the writer — woken by
the first of them, it runs after them — sends them all in one write.

Self-drain: on a connection without instrumentation whose peer runs in another process
(``FrameIO.peer_in_this_process``: a peer sharing this thread cannot overlap), the sender that queues the frame
that makes the lane hold :meth:`Connection.drain_at` frames while nobody is writing takes
the whole lane and writes it at once itself, without waiting (what the kernel does not
take stays first, for the writer). A burst thus leaves in a few writes as it is produced
instead of one write after the last: the peer starts on the first frames while this side
still produces the rest, so two nodes exchanging bursts overlap their work instead of
taking turns. The group is half of what is in flight, so that two groups are: half the
requests this node has waiting for replies on the connection (the callers' side), or,
with none, half the frames of the last burst read (the answering side answers a burst in
two halves); :data:`DRAIN_FRAMES` before any burst. (With 16 callers on one connection
across two processes: ~0.6× a raw one-connection-per-caller ping-pong without it, ~1.0×
with it; docs/performance-history.md.)

Direct write: when nothing is queued, nobody is writing and the node is not corked,
:meth:`Connection.send` writes the frame itself if the kernel takes it at once, without
waiting: if the kernel takes nothing the frame goes to the lane, and the rest of a
partial write is kept as the connection's unwritten rest, which the writer writes before
anything in the lane, so the caller never waits on the socket and never leaves half a
frame behind. Order is kept: a direct write happens
only while the lane and the writer are empty. This saves the writer's task switch on
every frame of a request/reply exchange; under load the lane batches as described.

Reader: decodes each frame once; replies go to their waiter (a reply read alone that wakes
the only request in flight on a self-draining connection steps the reader aside until
that caller has run: its next request leaves before the reader registers for the socket
again, ``ReplyRegistry.deliver_aside``), pings are answered, the rest
goes through admission (node admitting, stamped source identity) to the command's
handler, awaited here (backpressure on this connection only). The reader is a task of the
node's network nursery (``TransportState.readers``; the connection's own nursery without
one), made by the connection and stopped by it: closing the connection cancels it, unless
it is running an inline turn (a lane's turn for a lone frame, run by the reader itself:
``Lane.run_here``; the reader is then its :class:`~zlink_trio.engine.TurnHost`), which
finishes first. A turn that waits hands the reading to a new reader task (so a reply it
waits for can still arrive on this connection) and keeps its task, outside the
connection's lifetime, until it ends (:class:`_Reader`).

Keepalive: a ping every ``keepalive_interval``; no inbound data at all for
``keepalive_timeout`` closes the connection (a silently dead peer). Time the reader
spends in handlers does not count as silence (it reads nothing meanwhile).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio

from ..errors import DeadlineExceeded, ErrorKind, ProtocolError
from ..wire import (
    ActorSend,
    GoodbyeReason,
    PeerGoodbye,
    PeerPing,
    PeerPong,
    TerminalReply,
    decode,
    encode,
)
from .api import PeerIdentity, PeerNotAdmitted
from .frameio import YIELD_EVERY, FrameIO, PeerClosed, PeerIO, close_io
from .frames import SEQ_BYTES, SequenceGap, pack_header
from .ingress import ANSWERED_BY_20, HANDSHAKE_TYPES, REPLY_TYPES, SOURCE_OF
from .reasons import CloseReason, DropReason
from .replies import Pending, step_aside
from .stats import NodePhase
from .writelane import WriterLane

if TYPE_CHECKING:
    from .state import TransportState

__all__ = ["BATCH_BYTES", "DRAIN_FRAMES", "ENCODED", "Connection"]

logger = logging.getLogger("zlink_trio.mesh")

BATCH_BYTES: Final = 256 * 1024
"""The writer stops adding queued frames to one ``send_all`` past this many bytes."""
DRAIN_FRAMES: Final = 8
"""Queued frames at which their last sender writes them itself (see the module), on a
connection that has read no burst yet and has no request of this node in flight."""

_Item = tuple[Any, bytes]
_CLOSE: Final[_Item] = (None, b"")
"""Lane marker: write what precedes, then close the connection (graceful goodbye)."""


class _Encoded:
    """Lane record of a frame whose body was encoded without its record being built
    (``mesh.api.EncodedCommand``): only ever on a :attr:`Connection.plain` connection."""


ENCODED: Final = _Encoded()
_RUNNING: Final = NodePhase.RUNNING
_CLOSING: Final = NodePhase.CLOSING
_ACTOR_SEND: Final = int(ActorSend.COMMAND)
_HANDLED: Final = object()
"""What :meth:`Connection._checked_handler` returns for a record it handled or dropped."""
_NEVER: Final = math.inf


class _Stop(Exception):
    """The writer closed the connection (cut, goodbye): stop writing."""


class Connection:
    """Made once the handshake admitted ``peer`` (by ``state.connect``); :meth:`run` until
    it ends."""

    __slots__ = (
        "_burst_half",
        "_busy",
        "_coalesce",
        "_drains",
        "_farewell",
        "_handling",
        "_home",
        "_idle_writer",
        "_io",
        "_lane",
        "_queued",
        "_reader",
        "_rest",
        "_scope",
        "_state",
        "address",
        "close_reason",
        "deliver",
        "dialed",
        "in_flight",
        "peer",
        "plain",
        "preferred",
        "wake_at",
        "write_batch",
        "write_direct",
    )

    def __init__(
        self, state: TransportState, peer: PeerIdentity, io: PeerIO, *, dialed: bool
    ) -> None:
        self._state = state
        self.peer: Final = peer
        self.address: Final = peer.address
        self.dialed: Final = dialed
        self.preferred: Final = dialed == (state.identity.node_rid.value < peer.node_rid.value)
        """Dialed by the lower NodeRid: wins over a concurrent connection with the peer."""
        self._io = io
        io.decoder.max_body_bytes = state.max_frame_bytes
        self._lane: Final = WriterLane[_Item](state.peer_send_queue)
        self._scope: trio.CancelScope | None = None
        self.close_reason: CloseReason | None = None
        self._queued = 0  # items put in the lane (and the rest) and not yet written
        self._rest: bytes | None = None  # unwritten tail of a write: goes before the lane
        self._idle_writer: trio.lowlevel.Task | None = None  # the writer, parked
        self._farewell = False  # a goodbye is queued: nobody but the writer drains
        self._burst_half = DRAIN_FRAMES  # half the frames of the last burst read (>= 2)
        self._drains = type(io) is FrameIO and not io.peer_in_this_process
        """Self-drain here: a socket whose other end runs in another process."""
        self.in_flight = 0
        """Requests of this node that went out on this connection and wait for a reply
        (kept by the reply registry)."""
        self._busy = False  # the writer is writing a batch
        self._coalesce = False  # a burst was read: queue frames until the next write
        self._handling = False  # the reader is handling frames, not reading
        self._reader: _Reader | None = None  # the task reading this connection now
        self._home: trio.Nursery | None = None  # where reader tasks run (see _start_reader)
        self.write_direct: Callable[[Any, bytes], Awaitable[bool]] = self._write_direct
        """Write one frame now if the kernel takes it (see :meth:`send`)."""
        self.write_batch: Callable[[list[_Item]], Awaitable[None]] = self._write_plain
        """Write one batch taken from the lane (may be empty after a :attr:`wake_at`)."""
        self.deliver: Callable[[Any], Awaitable[None]] = self._dispatch
        """Handle one decoded inbound record."""
        self.plain = True
        """No instrumentation replaced the hooks: frames need no record, only their body
        (an instrumented connection gets every frame's record)."""
        self.wake_at = _NEVER
        """The writer also wakes at this time (with an empty batch)."""

    def __repr__(self) -> str:
        return f"<Connection to {self.peer} {'dialed' if self.dialed else 'accepted'}>"

    # --- lifetime ---------------------------------------------------------------------------
    async def run(self) -> CloseReason:
        """Run until the connection ends; return why. The stream is closed on return."""
        state = self._state
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                if self.close_reason is not None:  # closed before it ran: never attached
                    return self.close_reason
                nursery.start_soon(self._writer, name=f"zlink_trio.mesh.writer {self.peer}")
                nursery.start_soon(self._keepalive, name=f"zlink_trio.mesh.keepalive {self.peer}")
                if not state.links.attach(self):
                    self.close_reason = CloseReason.DUPLICATE
                    self.say_goodbye(GoodbyeReason.DUPLICATE_CONNECTION)
                    await trio.sleep_forever()  # until the writer wrote the goodbye
                self._home = state.readers or nursery
                self._start_reader()
                await trio.sleep(_NEVER)  # until close(): the reader ends by closing
        finally:
            if self.close_reason is None:
                self.close_reason = CloseReason.SHUTDOWN
            self._lane.close_send()
            state.links.detach(self)
            state.replies.connection_broke(self)
            state.counters.closed(self.close_reason)
            await close_io(self._io)
        return self.close_reason

    def close(self, reason: CloseReason) -> None:
        """End the connection (the first reason sticks)."""
        if self.close_reason is None:
            self.close_reason = reason
        if self._scope is not None:
            self._scope.cancel(reason=f"zlink_trio peer connection closed: {reason.value}")
        reader = self._reader
        if reader is not None and not reader.in_turn:
            # (A reader running an inline turn finishes it, then sees the close.)
            reader.scope.cancel(reason=f"zlink_trio peer connection closed: {reason.value}")

    def say_goodbye(self, reason: GoodbyeReason = GoodbyeReason.SHUTDOWN) -> None:
        """Queue a 104 then close after it is written (close at once if the lane is full)."""
        goodbye = PeerGoodbye(reason=reason)
        try:
            self._queued += 1  # counted like every lane item: no direct write overtakes it
            self._lane.put_nowait((goodbye, encode(goodbye)))
            self._farewell = True
            self._queued += 1
            self._lane.put_nowait(_CLOSE)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self._queued -= 1
            self.close(CloseReason.SHUTDOWN)
        self._wake_writer()

    # --- sending ---------------------------------------------------------------------------
    async def send(
        self,
        record: Any,
        body: bytes,
        *,
        checkpoint: bool = True,
        flush: bool = True,
        wait: bool = True,
    ) -> None:
        """Write or queue one encoded record; wait up to ``peer_send_timeout`` for lane
        space (DeadlineExceeded), PeerNotAdmitted if the connection is closed.

        Always a cancellation point. After a direct write it yields only every
        :data:`YIELD_EVERY` direct writes of this node (a loop of sends still lets other
        tasks run, and a request/reply exchange skips a scheduler pass per frame), after
        queueing it yields (the writer runs first); ``checkpoint=False`` never yields
        (the caller parks right after, e.g. a request waiting for its reply).
        ``flush=False`` queues the frame like a corked or coalescing connection does (no
        direct write, no yield): more frames follow at once, and they leave together
        (in one write of the writer, or in self-drained groups: see the module). ``wait=False`` raises ``trio.WouldBlock`` (nothing queued)
        instead of waiting for lane space."""
        await trio.lowlevel.checkpoint_if_cancelled()
        state = self._state
        corked = state.corked or not flush or self._coalesce
        if (
            not corked
            and not self._busy
            and self._queued == 0
            and self.close_reason is None
            and await self.write_direct(record, body)
        ):
            if checkpoint:
                state.send_streak += 1
                if state.send_streak >= YIELD_EVERY:
                    state.send_streak = 0
                    reading = state.reading
                    if reading is None or reading.task is not trio.lowlevel.current_task():
                        # (A reader's handler does not: its reader yields as it reads,
                        # and an inline turn that yields would hand its reading over.)
                        await trio.lowlevel.cancel_shielded_checkpoint()
            return
        item = (record, body)
        self._queued += 1
        try:
            self._lane.put_nowait(item)
        except trio.WouldBlock:
            self._queued -= 1
            if not wait:
                raise
            await self._send_slow(item)
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._queued -= 1
            raise PeerNotAdmitted(f"the connection to {self.peer} is closed") from None
        if (
            self._queued >= self.drain_at()
            and not self._busy
            and self._rest is None
            and self._drains
            and self.plain
            and not self._farewell
            and self.close_reason is None
        ):
            self._drain()
        else:
            self._wake_writer()
        if not corked and checkpoint:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _send_slow(self, item: _Item) -> None:
        timeout = self._state.peer_send_timeout
        self._queued += 1
        try:
            with trio.move_on_after(timeout) as scope:
                await self._lane.put(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._queued -= 1
            raise PeerNotAdmitted(f"the connection to {self.peer} is closed") from None
        except BaseException:
            self._queued -= 1
            raise
        if scope.cancelled_caught:
            self._queued -= 1
            raise DeadlineExceeded(f"the writer lane to {self.peer} stayed full for {timeout} s")
        self._wake_writer()

    def drain_at(self) -> int:
        """Frames queued at which their last sender writes them (see the module)."""
        in_flight = self.in_flight
        if in_flight:
            return max(2, (in_flight + 1) >> 1)
        return self._burst_half

    def _wake_writer(self) -> None:
        writer = self._idle_writer
        if writer is not None:
            self._idle_writer = None
            trio.lowlevel.reschedule(writer)

    def _drain(self) -> None:
        """Write what the lane holds now, without waiting (see the module: self-drain).
        Only while nobody writes, nothing is left unwritten and no goodbye is queued, on
        a connection without instrumentation (its frames need no record)."""
        lane = self._lane
        io = self._io
        parts: list[bytes] = []
        seq = io.sent
        size = taken = 0
        while size < BATCH_BYTES:
            try:
                body = lane.take_nowait()[1]
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            taken += 1
            seq += 1
            parts.append(pack_header(len(body) + SEQ_BYTES, seq))
            parts.append(body)
            size += len(body)
        self._queued -= taken
        if not taken:
            return
        io.sent = seq
        data = b"".join(parts)
        counters = self._state.counters
        counters.writes_out += 1
        counters.frames_out += taken
        counters.bytes_out += len(data)
        try:
            written = io.try_write(data)
        except PeerClosed:
            self.close(CloseReason.PEER_CLOSED)
            return
        if written < len(data):
            self._keep_rest(data[written:])

    async def _write_direct(self, record: Any, body: bytes) -> bool:
        """Write the frame now if the kernel takes (some of) it; False if it took nothing.
        The sequence number is committed once the first byte is out; an unwritten rest
        becomes the lane's first item."""
        io = self._io
        seq = io.sent + 1
        data = pack_header(len(body) + SEQ_BYTES, seq) + body
        try:
            written = io.try_write(data)
        except PeerClosed:
            self.close(CloseReason.PEER_CLOSED)
            raise PeerNotAdmitted(f"the connection to {self.peer} broke") from None
        if not written:
            return False
        io.sent = seq
        if written < len(data):
            self._keep_rest(data[written:])  # (the lane is empty)
        counters = self._state.counters
        counters.writes_out += 1
        counters.frames_out += 1
        counters.bytes_out += len(data)
        return True

    def _keep_rest(self, rest: bytes) -> None:
        """The tail of a write the kernel did not take: the writer writes it first."""
        self._rest = rest
        self._queued += 1
        self._wake_writer()

    def send_nowait(self, record: Any) -> bool:
        """Queue a control record if there is room (ping, pong, refusal); False if not."""
        self._queued += 1
        try:
            self._lane.put_nowait((record, encode(record)))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self._queued -= 1
            return False
        self._wake_writer()
        return True

    # --- writer ---------------------------------------------------------------------------
    async def _writer(self) -> None:
        lane = self._lane
        try:
            while True:
                rest = self._rest
                if rest is not None:
                    self._rest = None
                    self._busy = True
                    try:
                        await self._io.write_all(rest)
                    finally:
                        self._queued -= 1
                        self._busy = False
                    continue
                batch: list[_Item] = []
                try:
                    batch.append(lane.take_nowait())
                except trio.WouldBlock:
                    if self.wake_at == _NEVER:
                        await self._park()
                        continue  # (a sender may have drained the lane meanwhile)
                    with trio.move_on_at(self.wake_at) as timer:
                        await self._park()
                    if not timer.cancelled_caught:
                        continue
                    # (wake_at came: an empty batch, for the instrumentation)
                size = len(batch[0][1]) if batch else 0
                while size < BATCH_BYTES:
                    try:
                        item = lane.take_nowait()
                    except trio.WouldBlock:
                        break
                    batch.append(item)
                    size += len(item[1])
                try:
                    self._busy = True
                    self._coalesce = False  # what is sent from now on may go directly
                    await self.write_batch(batch)
                finally:
                    self._queued -= len(batch)
                    self._busy = False
        except _Stop:
            return
        except (PeerClosed, trio.EndOfChannel):
            self.close(CloseReason.PEER_CLOSED)
        finally:
            self._idle_writer = None
            lane.close_receive()

    async def _park(self) -> None:
        """Wait until a sender queues something (``_wake_writer``)."""
        self._idle_writer = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._idle_writer = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _write_plain(self, batch: list[_Item]) -> None:
        parts: list[bytes] = []
        seq = self._io.sent
        closing = False
        frames = 0
        for record, body in batch:
            if record is None:
                closing = True
                break
            frames += 1
            seq += 1
            parts.append(pack_header(len(body) + SEQ_BYTES, seq))
            parts.append(body)
        self._io.sent = seq
        if parts:
            await self.flush(parts, frames)
        if closing:
            self.close(CloseReason.SHUTDOWN)
            raise _Stop

    async def flush(self, parts: list[bytes], frames: int) -> None:
        """Write ``parts`` (``frames`` frames, already numbered) in one write."""
        data = b"".join(parts)
        counters = self._state.counters
        counters.writes_out += 1
        counters.frames_out += frames
        counters.bytes_out += len(data)
        await self._io.write_all(data)

    # --- keepalive -------------------------------------------------------------------------
    async def _keepalive(self) -> None:
        state = self._state
        interval, timeout = state.keepalive_interval, state.keepalive_timeout
        io = self._io
        token = 0
        seen = io.chunks
        silent = 0.0
        while True:
            await trio.sleep(interval)
            if io.chunks == seen and not self._handling:
                # (A reader busy in a handler reads nothing: that is not a silent peer.)
                silent += interval
                if silent >= timeout:
                    self.close(CloseReason.KEEPALIVE_TIMEOUT)
                    return
            else:
                seen = io.chunks
                silent = 0.0
            token += 1
            self.send_nowait(PeerPing(token=token))

    # --- reader ----------------------------------------------------------------------------
    def _start_reader(self) -> None:
        """A new reader task, which reads this connection from now on: in the node's
        network nursery, so that an inline turn that outlives its reading is not cut
        short by the connection's end (in the connection's nursery without one)."""
        home = self._home
        assert home is not None
        reader = self._reader = _Reader(self)
        home.start_soon(reader.run, name=f"zlink_trio.mesh.reader {self.peer}")

    async def _read(self, reader: _Reader) -> None:
        """Read and handle frames while ``reader`` is this connection's reader."""
        io = self._io
        state = self._state
        counters = state.counters
        bodies = io.take_buffered()
        plain = self.plain
        try:
            while True:
                # Several frames in one read (a burst): "cork" the node while handling
                # them, so what the handlers send goes to the writer lanes without a
                # yield each and leaves in one write per connection once we park. A lone
                # frame may run its lane's turn here (``state.reading``: see .state).
                corked = len(bodies) > 1
                if corked:
                    state.corked += 1
                    self._burst_half = max(2, (len(bodies) + 1) >> 1)
                aside = None
                read_all = False
                self._handling = True
                try:
                    for body in bodies:
                        counters.bytes_in += len(body) + SEQ_BYTES + 4
                        record = decode(body)
                        if type(record) in REPLY_TYPES and plain:
                            # (what _dispatch does with a reply, without its coroutine:
                            # nothing in it waits; an instrumented connection's records
                            # all go through its deliver)
                            if corked or not self._drains:
                                self._reply_in(record)
                            else:
                                aside = self._lone_reply_in(record, reader)
                        elif corked:
                            await self.deliver(record)
                        else:
                            state.reading = reader
                            await self.deliver(record)
                            state.reading = None
                        if self.close_reason is not None or reader.released:
                            return
                    read_all = True
                finally:
                    if aside is not None and not read_all:
                        aside.keep_reader()  # (leaving without stepping aside)
                    if not reader.released:
                        self._handling = False
                    if corked:
                        state.corked -= 1
                        self._coalesce = True
                if aside is not None:
                    await step_aside(aside)  # until the caller it woke has run
                bodies = await io.receive_some()
        except SequenceGap as exc:
            counters.drop(DropReason.SEQUENCE_GAP)
            logger.warning("peer %s: %s; closing the connection", self.peer, exc)
            self.close(CloseReason.SEQUENCE_GAP)
        except ProtocolError as exc:
            counters.drop(DropReason.PROTOCOL_ERROR)
            logger.warning("peer %s: protocol error %s; closing the connection", self.peer, exc)
            self.close(CloseReason.PROTOCOL_ERROR)
        except PeerClosed:
            self.close(CloseReason.PEER_CLOSED)

    async def _dispatch(self, record: Any) -> None:
        kind = type(record)
        if kind in REPLY_TYPES:
            self._reply_in(record)
            return
        state = self._state
        counters = state.counters
        counters.frames_in += 1
        if kind is ActorSend and state.phase is _RUNNING:
            # The commonest inbound request, with the checks below that apply to it:
            # stamped with its source, not a reply, a ping or a handshake.
            peer = self.peer
            if (
                record.source_rid.value != peer.node_rid.value
                or record.source_generation.value != peer.node_generation.value
            ):
                counters.drop(DropReason.SOURCE_MISMATCH)
                return
            handler = state.handlers.get(_ACTOR_SEND)
        else:
            handler = self._checked_handler(record, kind)
            if handler is _HANDLED:
                return
        if handler is None:
            counters.drop(DropReason.NO_HANDLER)
            return
        try:
            await handler(self.peer, record)
        except Exception:
            counters.drop(DropReason.HANDLER_FAILED)
            logger.exception("inbound handler of command %d failed", int(record.COMMAND))

    def _reply_in(self, record: Any) -> None:
        """An inbound reply (20/43/122) to its pending request, or dropped (counted)."""
        counters = self._state.counters
        counters.frames_in += 1
        reason = self._state.replies.deliver(self.peer, record.correlation, record)
        if reason is not None:
            counters.drop(reason)

    def _lone_reply_in(self, record: Any, reader: _Reader) -> Pending | None:
        """:meth:`_reply_in` for a reply read alone; the Pending to step aside for when
        it woke the only request in flight here (ReplyRegistry.deliver_aside)."""
        task = reader.task
        assert task is not None  # (set as the reader task starts, before it reads)
        counters = self._state.counters
        counters.frames_in += 1
        found = self._state.replies.deliver_aside(self.peer, record.correlation, record, task)
        if found is None or type(found) is Pending:
            return found
        counters.drop(found)
        return None

    def _checked_handler(self, record: Any, kind: type[Any]) -> Any:
        """The handler of an inbound record other than a reply or a running node's
        ActorSend (None: no handler); ``_HANDLED`` when the record was handled here (a
        transport command) or dropped (counted; a dropped request may be answered
        Unavailable)."""
        state = self._state
        counters = state.counters
        if kind is PeerPing:
            if not self.send_nowait(PeerPong(token=record.token)):
                counters.drop(DropReason.PONG_QUEUE_FULL)
            return _HANDLED
        if kind is PeerPong:
            return _HANDLED
        if kind is PeerGoodbye:
            self.close(CloseReason.GOODBYE)
            if record.reason is not GoodbyeReason.DUPLICATE_CONNECTION:
                state.peer_left()
            return _HANDLED
        if kind in HANDSHAKE_TYPES:
            raise ProtocolError(f"command {int(record.COMMAND)} after the handshake")
        if state.phase is not _RUNNING and not (
            state.phase is _CLOSING and record.COMMAND in state.draining
        ):
            counters.drop(DropReason.NOT_ADMITTING)
            correlation = getattr(record, "correlation", 0)
            if kind in ANSWERED_BY_20 and correlation:
                self.send_nowait(
                    TerminalReply.failed(
                        correlation, ErrorKind.UNAVAILABLE, "the node is not admitting"
                    )
                )
            return _HANDLED
        source = SOURCE_OF.get(kind)
        if source is not None:
            rid, generation = source(record)
            peer = self.peer
            if rid.value != peer.node_rid.value or generation.value != peer.node_generation.value:
                counters.drop(DropReason.SOURCE_MISMATCH)
                return _HANDLED
        return state.handlers.get(record.COMMAND)


@final
class _Reader:
    """One reader task of a connection, and the :class:`~zlink_trio.engine.TurnHost` of
    the inline turns it runs. It reads until the connection closes, or until a turn it
    runs first waits: then a new reader takes over the reading (``released``) and this
    task only finishes the turn."""

    __slots__ = ("conn", "in_turn", "released", "scope", "task")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.scope = trio.CancelScope()
        self.task: trio.lowlevel.Task | None = None
        self.in_turn = False
        self.released = False

    async def run(self) -> None:
        conn = self.conn
        self.task = trio.lowlevel.current_task()
        while not self.released and conn.close_reason is None:
            with self.scope:
                await conn._read(self)
            if not self.scope.cancelled_caught:
                return
            # Cancelled: by close() (the loop ends), or by the engine halting an inline
            # turn of this reader while the connection lives on: read on.
            self.scope = trio.CancelScope()

    # --- TurnHost -----------------------------------------------------------------------
    def enter_turn(self) -> None:
        self.in_turn = True

    def turn_suspended(self) -> None:
        conn = self.conn
        self.released = True
        if conn._reader is self:
            conn._reader = None
            conn._handling = False
            if conn.close_reason is None:
                conn._start_reader()

    def exit_turn(self) -> None:
        self.in_turn = False

    def cancel_turn(self) -> None:
        self.scope.cancel(reason="zlink_trio engine halted")
