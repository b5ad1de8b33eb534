"""The owner's repeat filter: per link, by arrival, never discarding an unseen id."""

from __future__ import annotations

from zlink_trio.ids import MeshName, NodeGeneration, NodeRid
from zlink_trio.mesh.api import PeerIdentity
from zlink_trio.routing.dedupe import MAX_LINKS, WINDOW, IngressDedupe

RID = NodeRid.new()
GEN = NodeGeneration.new()
A = PeerIdentity(MeshName("a"), RID, GEN)
B = PeerIdentity(MeshName("b"), RID, GEN)


def test_a_repeat_is_dropped() -> None:
    dedupe = IngressDedupe()
    assert dedupe.first(A, 7)
    assert not dedupe.first(A, 7)
    assert not dedupe.first(A, 7)


def test_an_old_id_never_seen_is_fresh_however_far_others_ran_ahead() -> None:
    dedupe = IngressDedupe()
    assert dedupe.first(A, 1)
    for message_id in range(3, 3 + 3 * WINDOW):  # id 2 is held back
        assert dedupe.first(B, message_id)
    for message_id in range(3 + 3 * WINDOW, 3 + 4 * WINDOW):
        assert dedupe.first(A, message_id)
    assert dedupe.first(A, 2)
    assert not dedupe.first(A, 2)


def test_links_are_independent() -> None:
    dedupe = IngressDedupe()
    assert dedupe.first(A, 5)
    assert dedupe.first(B, 5)
    assert not dedupe.first(B, 5)


def test_a_repeat_is_caught_within_the_window_of_arrivals() -> None:
    dedupe = IngressDedupe()
    assert dedupe.first(A, 1)
    for message_id in range(2, WINDOW + 1):  # WINDOW - 1 arrivals after id 1
        assert dedupe.first(A, message_id)
    assert not dedupe.first(A, 1)
    assert dedupe.first(A, WINDOW + 1)  # id 1 now leaves the window
    assert dedupe.first(A, 1)  # (only a repeat that far behind its original runs again)


def test_the_oldest_link_is_forgotten_first() -> None:
    dedupe = IngressDedupe()
    links = [PeerIdentity(MeshName("m"), NodeRid.new(), GEN) for _ in range(MAX_LINKS + 1)]
    for link in links:
        assert dedupe.first(link, 1)
    assert dedupe.first(links[0], 1)  # forgotten
    assert not dedupe.first(links[-1], 1)
