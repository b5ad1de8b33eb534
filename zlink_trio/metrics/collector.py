"""A Prometheus collector reading one server's ``statistics()`` at every scrape.

ActorIds and SpotIds are never labels (spec 04 §8.2, 06 §9): labels are stable types,
outcomes, peer states and flow event names, all bounded sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..mesh.api import PeerState
from ..mesh.lease import LeaseHeld

if TYPE_CHECKING:
    from ..server import Server

__all__ = ["STORE_LATENCY_BUCKETS", "ServerCollector", "new_registry"]

STORE_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

_RELOCATION_GAUGES = frozenset({"sealed", "in_flight"})
_ACTOR_OUTCOMES = ("ok", "failed", "no_handler", "expired", "dropped", "refused")
_SPOT_OUTCOMES = {
    "packet": "packet_handlers",
    "request": "request_handlers",
    "failed": "handler_failures",
    "no_handler": "no_handler",
    "expired": "expired",
    "dropped": "dropped",
    "refused": "refused",
}


class ServerCollector(Collector):
    """Every ``zlink_*`` metric of one server except the store latency histogram."""

    def __init__(self, server: Server) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        from ..server import runtime_of

        stats = self._server.statistics()
        node = stats.node
        up = GaugeMetricFamily("zlink_node_up", "1 while the node runs with its owner lease")
        up.add_metric([], 1.0 if node.admitting and isinstance(node.lease, LeaseHeld) else 0.0)
        yield up

        hosted = GaugeMetricFamily(
            "zlink_hosted_objects", "Actors and Spots hosted", labels=["kind"]
        )
        hosted.add_metric(["actor"], stats.actors.hosted if stats.actors else 0)
        hosted.add_metric(["spot"], stats.spots.hosted if stats.spots else 0)
        yield hosted

        ready = GaugeMetricFamily(
            "zlink_ready_objects", "Ready incarnations by stable type", labels=["kind", "type"]
        )
        backlog = GaugeMetricFamily(
            "zlink_queue_backlog", "Queued turns of a type's Actors", labels=["type", "queue"]
        )
        dispatch = CounterMetricFamily(
            "zlink_actor_dispatch", "Actor message outcomes", labels=["type", "outcome"]
        )
        for t in stats.actors.types if stats.actors else ():
            ready.add_metric(["actor", t.stable_type], t.ready)
            backlog.add_metric([t.stable_type, "application"], t.application_backlog)
            backlog.add_metric([t.stable_type, "control"], t.control_backlog)
            for outcome in _ACTOR_OUTCOMES:
                dispatch.add_metric([t.stable_type, outcome], getattr(t, f"dispatch_{outcome}"))
        spot_calls = CounterMetricFamily(
            "zlink_spot_dispatch", "Spot message outcomes", labels=["type", "outcome"]
        )
        for s in stats.spots.types if stats.spots else ():
            ready.add_metric([f"{s.kind}_spot", s.stable_type], s.ready)
            for outcome, field in _SPOT_OUTCOMES.items():
                spot_calls.add_metric([s.stable_type, outcome], getattr(s, field))
        yield from (ready, backlog, dispatch, spot_calls)

        relocation = getattr(stats.actors, "relocation", None)  # a build with relocation
        if relocation is not None:
            now = GaugeMetricFamily(
                "zlink_relocations_now", "Actors sealed / relocations coordinated now",
                labels=["state"],
            )  # fmt: skip
            done = CounterMetricFamily(
                "zlink_relocations", "Live relocation outcomes on this node", labels=["outcome"]
            )
            for field in attrs.fields(type(relocation)):
                value = getattr(relocation, field.name)
                if field.name in _RELOCATION_GAUGES:
                    now.add_metric([field.name], value)
                else:
                    done.add_metric([field.name], value)
            yield from (now, done)

        engine = stats.engine
        lanes = GaugeMetricFamily("zlink_engine_lanes", "Engine lanes", labels=["state"])
        lanes.add_metric(["ready"], engine.ready_lanes)
        lanes.add_metric(["running"], engine.running_lanes)
        yield lanes
        turns = CounterMetricFamily("zlink_engine_turns", "Handler invocations", labels=["result"])
        turns.add_metric(["ok"], engine.turns - engine.handler_failures)
        turns.add_metric(["failed"], engine.handler_failures)
        yield turns

        flow = CounterMetricFamily(
            "zlink_flow_events", "Runtime outcomes by flow event (relocations included)",
            labels=["event"],
        )  # fmt: skip
        for event, count in stats.flow.items():
            flow.add_metric([str(event.value)], count)
        yield flow

        peers = GaugeMetricFamily("zlink_peers", "Peer nodes by state", labels=["state"])
        states = Counter(runtime_of(self._server).node.peers().values())
        for state in PeerState:
            peers.add_metric([state.value], states.get(state, 0))
        yield peers
        frames = CounterMetricFamily("zlink_mesh_frames", "Mesh frames", labels=["direction"])
        frames.add_metric(["in"], node.frames_in)
        frames.add_metric(["out"], node.frames_out)
        yield frames
        writes = CounterMetricFamily(
            "zlink_mesh_writes", "Socket writes the outbound mesh frames went out in"
        )
        writes.add_metric([], node.writes_out)
        yield writes
        pending = GaugeMetricFamily("zlink_requests_pending", "Requests waiting for a reply")
        pending.add_metric([], node.requests_pending)
        yield pending
        lease = CounterMetricFamily(
            "zlink_lease_renewals", "Owner lease renewals", labels=["result"]
        )
        lease.add_metric(["ok"], node.lease_renewals)
        lease.add_metric(["failed"], node.lease_renew_failures)
        yield lease

        stream = runtime_of(self._server).stream
        if stream is not None:
            opened = stream.statistics()
            sessions = GaugeMetricFamily("zlink_stream_sessions", "Open STREAM sessions")
            sessions.add_metric([], opened.sessions)
            bindings = GaugeMetricFamily("zlink_stream_bindings", "Session-Actor bindings")
            bindings.add_metric([], opened.bindings)
            yield from (sessions, bindings)


def new_registry(server: Server) -> tuple[CollectorRegistry, Histogram]:
    """A registry holding ``server``'s collector and its store latency histogram."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(server))
    latency = Histogram(
        "zlink_store_latency_seconds",
        "Round trip of a Location Store call (the metrics probe's store.now())",
        buckets=STORE_LATENCY_BUCKETS,
        registry=registry,
    )
    return registry, latency
