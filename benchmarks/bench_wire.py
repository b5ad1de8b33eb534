"""Wire codec micro-benchmark: records against raw cbor2 of the same array, in one run.

Usage: python benchmarks/bench_wire.py [--rounds R] [--seconds S]

Two typical hot records:

* ``ActorSend`` as the Actor messenger builds a cross-node request (route fences, timeout,
  100-byte payload);
* ``TerminalReply.ok`` with a ``ReplyPayloadTail`` of 100 bytes (the reply to it).

For each: ``encode``, ``decode``, ``encode`` + ``decode``; baseline: ``cbor2.dumps`` and
``cbor2.loads`` of the equivalent array (what ``encode`` produces, as plain lists, bytes,
ints and strings: no checks, no classes). Rates are the best of ``--rounds``; every round
measures the record and the baseline back to back. The ratio (record / raw cbor2) is LAST
on each line.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import cbor2

from zlink_trio.ids import (
    ActorId,
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
)
from zlink_trio.wire import (
    ActorSend,
    MessageKind,
    ReplyPayloadTail,
    TerminalReply,
    WireRecord,
    decode,
    encode,
)

PAYLOAD = bytes(range(100))


def actor_send() -> ActorSend:
    return ActorSend(
        correlation=123_456,
        source_rid=NodeRid(bytes(range(16))),
        source_generation=NodeGeneration(8_123_456_789_012_345),
        target_rid=NodeRid(bytes(range(16, 32))),
        target_generation=NodeGeneration(7_123_456_789_012_345),
        actor_id=ActorId("player-42"),
        route_object_generation=ObjectGeneration(17),
        expected_owner_generation=AuthorityOwnerGeneration(3),
        owner_lease_generation=OwnerLeaseGeneration(5),
        message_kind=MessageKind.REQUEST,
        packet_name="chat.say",
        payload=PAYLOAD,
        timeout_ms=30_000,
    )


def terminal_reply() -> TerminalReply:
    return TerminalReply.ok(123_456, ReplyPayloadTail(payload=PAYLOAD))


def _rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls of ``fn`` per second, timed in batches for about ``seconds``."""
    batch = 1000
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            fn()
        done += batch
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def _cases(record: WireRecord) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    body = encode(record)
    items = cbor2.loads(body)  # the equivalent plain array
    assert decode(body) == record and cbor2.dumps(items) == body
    dumps, loads = cbor2.dumps, cbor2.loads
    return [
        ("encode", lambda: encode(record), lambda: dumps(items)),
        ("decode", lambda: decode(body), lambda: loads(body)),
        ("encode+decode", lambda: decode(encode(record)), lambda: loads(dumps(items))),
    ]


def main(rounds: int, seconds: float) -> None:
    for name, record in (
        ("ActorSend (24)", actor_send()),
        ("TerminalReply (20)", terminal_reply()),
    ):
        size = len(encode(record))
        for what, wire_fn, raw_fn in _cases(record):
            best_wire = best_raw = 0.0
            for _ in range(rounds):
                best_raw = max(best_raw, _rate(raw_fn, seconds))
                best_wire = max(best_wire, _rate(wire_fn, seconds))
            print(
                f"{name:<19} {size:3d} B {what:<14} wire {best_wire:11,.0f}/s "
                f"{1e6 / best_wire:6.2f} us  raw cbor2 {best_raw:11,.0f}/s "
                f"{1e6 / best_raw:6.2f} us  ratio {best_wire / best_raw:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    options = parser.parse_args()
    main(options.rounds, options.seconds)
