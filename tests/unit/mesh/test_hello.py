"""The hello: mutual proof over the secret with both nonces; nothing replays."""

from __future__ import annotations

import functools
import socket

import pytest
import trio

from zlink_trio.ids import MeshName, NodeGeneration, NodeRid
from zlink_trio.mesh.api import NodeIdentity, PeerIdentity
from zlink_trio.mesh.frameio import FrameIO
from zlink_trio.mesh.handshake import HandshakeRejected, accept_hello, dial_hello
from zlink_trio.mesh.proof import (
    HandshakeIdentity,
    ack_proof,
    confirm_proof,
    hello_proof,
    proof_matches,
)
from zlink_trio.mesh.reasons import DropReason
from zlink_trio.wire import PeerHello, PeerHelloConfirm

MESH = MeshName("m")
SECRET = b"k" * 32


def node() -> NodeIdentity:
    return NodeIdentity(NodeRid.new(), NodeGeneration.new())


def pair() -> tuple[FrameIO, FrameIO]:
    left, right = socket.socketpair()
    return FrameIO(left), FrameIO(right)


def test_proofs_are_bound_to_label_nonces_and_secret() -> None:
    d = HandshakeIdentity(NodeRid.new(), NodeGeneration.new(), b"d" * 16)
    a = HandshakeIdentity(NodeRid.new(), NodeGeneration.new(), b"a" * 16)
    ack = ack_proof(SECRET, 1, MESH, d, a)
    confirm = confirm_proof(SECRET, 1, MESH, d, a)
    assert ack != confirm  # an ack cannot be reflected as a confirm
    assert ack != ack_proof(
        SECRET, 1, MESH, d, HandshakeIdentity(a.node_rid, a.node_generation, b"b" * 16)
    )
    assert ack != ack_proof(b"other" * 8, 1, MESH, d, a)
    assert hello_proof(SECRET, 1, MESH, d) != hello_proof(SECRET, 1, MeshName("n"), d)
    assert proof_matches(ack, ack_proof(SECRET, 1, MESH, d, a))


async def run_pair(
    dialer: NodeIdentity,
    acceptor: NodeIdentity,
    *,
    dialer_secret: bytes = SECRET,
    meshes: frozenset[MeshName] = frozenset({MESH}),
) -> tuple[object, object]:
    left, right = pair()
    results: dict[str, object] = {}

    async def check(peer: PeerIdentity) -> DropReason | None:
        return None

    async def dial() -> None:
        try:
            results["dial"] = await dial_hello(
                left,
                secret=dialer_secret,
                local=dialer,
                expected=PeerIdentity(MESH, acceptor.node_rid, acceptor.node_generation),
            )
        except HandshakeRejected as exc:
            results["dial"] = exc
        left.close()

    async def accept() -> None:
        try:
            results["accept"] = await accept_hello(
                right, secret=SECRET, local=acceptor, meshes=meshes, check=check
            )
        except HandshakeRejected as exc:
            results["accept"] = exc
        right.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(dial)
        nursery.start_soon(accept)
    return results["dial"], results["accept"]


async def test_mutual_proof_admits_both_sides() -> None:
    d, a = node(), node()
    dialed, accepted = await run_pair(d, a)
    assert dialed == PeerIdentity(MESH, a.node_rid, a.node_generation)
    assert accepted == PeerIdentity(MESH, d.node_rid, d.node_generation)


async def test_wrong_secret_is_refused_as_bad_proof() -> None:
    dialed, accepted = await run_pair(node(), node(), dialer_secret=b"x" * 32)
    assert isinstance(accepted, HandshakeRejected)
    assert accepted.reason is DropReason.BAD_PROOF
    assert isinstance(dialed, HandshakeRejected)


async def test_unknown_mesh_is_refused() -> None:
    dialed, accepted = await run_pair(node(), node(), meshes=frozenset({MeshName("other")}))
    assert isinstance(accepted, HandshakeRejected)
    assert accepted.reason is DropReason.WRONG_MESH
    assert isinstance(dialed, HandshakeRejected)


async def test_a_recorded_hello_and_confirm_cannot_be_replayed() -> None:
    """An eavesdropper replays a genuine 100 and 105: the acceptor's fresh nonce makes the
    recorded confirm worthless."""
    d, a = node(), node()
    recorded: list[object] = []
    left, right = pair()

    async def check(peer: PeerIdentity) -> DropReason | None:
        return None

    async def accept(io: FrameIO) -> object:
        try:
            return await accept_hello(
                io,
                secret=SECRET,
                local=a,
                meshes=frozenset({MESH}),
                check=check,
                observe=lambda sent, peer, record: None if sent else recorded.append(record),
            )
        except HandshakeRejected as exc:
            return exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(
                dial_hello,
                left,
                secret=SECRET,
                local=d,
                expected=PeerIdentity(MESH, a.node_rid, a.node_generation),
            )
        )
        assert isinstance(await accept(right), PeerIdentity)
    left.close()
    right.close()
    hello, confirm = recorded
    assert isinstance(hello, PeerHello) and isinstance(confirm, PeerHelloConfirm)

    attacker, victim = pair()
    async with trio.open_nursery() as nursery:
        result: list[object] = []

        async def run_victim() -> None:
            result.append(await accept(victim))

        nursery.start_soon(run_victim)
        await attacker.write_record(hello)
        await attacker.read_record()  # the ack, with a fresh acceptor nonce
        await attacker.write_record(confirm)
    attacker.close()
    victim.close()
    (outcome,) = result
    assert isinstance(outcome, HandshakeRejected)
    assert outcome.reason is DropReason.BAD_PROOF


async def test_dialer_refuses_an_unexpected_acceptor() -> None:
    d, a, someone = node(), node(), node()
    left, right = pair()

    async def check(peer: PeerIdentity) -> DropReason | None:
        return None

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(
                accept_hello, right, secret=SECRET, local=a, meshes=frozenset({MESH}), check=check
            )
        )
        with pytest.raises(HandshakeRejected) as caught:
            await dial_hello(
                left,
                secret=SECRET,
                local=d,
                expected=PeerIdentity(MESH, someone.node_rid, someone.node_generation),
            )
        assert caught.value.reason is DropReason.UNEXPECTED_PEER
        left.close()
        nursery.cancel_scope.cancel()
    right.close()
