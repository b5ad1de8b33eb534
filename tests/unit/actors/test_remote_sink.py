"""An owner that cannot send a reply sends a typed failure terminal instead, so the
requester never waits for its deadline (issue 9, item 8)."""

from __future__ import annotations

from typing import Any

import trio

from zlink_trio.config import MIB
from zlink_trio.errors import ErrorKind
from zlink_trio.ids import MeshName, NodeRid
from zlink_trio.mesh.api import PeerAddress
from zlink_trio.objects.sinks import RemoteSink
from zlink_trio.wire import TerminalReply, TerminalResult, encode

PEER = PeerAddress(MeshName("test"), NodeRid.new())


class EncodingNode:
    """Sends like a MeshNode does: the record is encoded (strictly) first."""

    def __init__(self) -> None:
        self.sent: list[TerminalReply] = []

    async def send(self, peer: PeerAddress, record: Any, **options: Any) -> None:
        await trio.lowlevel.checkpoint()
        encode(record)  # ProtocolError for a record the wire cannot carry
        self.sent.append(record)


async def test_a_reply_the_wire_cannot_carry_becomes_a_typed_failure() -> None:
    node = EncodingNode()
    sink = RemoteSink(node, PEER, 7)  # type: ignore[arg-type]
    await sink.reply(b"x" * (MIB + 1))
    (terminal,) = node.sent
    assert terminal.correlation == 7
    assert terminal.terminal_result is TerminalResult.FAILED
    assert terminal.failure_code is ErrorKind.APPLICATION
    assert "cannot be sent" in (terminal.failure_message or "")
    await sink.reply(b"late")  # terminal once
    assert len(node.sent) == 1


async def test_a_reply_that_fits_is_sent_as_is() -> None:
    node = EncodingNode()
    sink = RemoteSink(node, PEER, 8)  # type: ignore[arg-type]
    await sink.reply(b"x" * MIB)
    (terminal,) = node.sent
    assert terminal.terminal_result is TerminalResult.OK
