"""Prometheus metrics of a running node: the numbers on /metrics are the node's own
(hosted objects, dispatch outcomes by kind, peers, store latency), /health follows the node.
Two real nodes (loopback TCP, one memory store) and a real HTTP client socket."""

from __future__ import annotations

import pytest
import trio

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from zlink_trio import App, RecreateOnRelocation, on_request
from zlink_trio.metrics import serve_metrics
from zlink_trio.testing import open_cluster


class Echo:
    def __init__(self, context: object) -> None:
        self.context = context

    @on_request("echo")
    async def echo(self, payload: bytes) -> bytes:
        if payload == b"fail":
            raise ValueError("asked to fail")
        return payload


def make_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("echo", Echo, relocation=RecreateOnRelocation())
    return app


async def http_get(port: int, path: str) -> tuple[int, str]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found[(name, frozenset(labels.items()))]


async def test_metrics_report_the_nodes_own_numbers() -> None:
    with trio.fail_after(30):
        async with open_cluster(2, app=make_app()) as cluster:
            await cluster.wait_all_admitted()
            a, b = cluster.servers
            owners = {}
            for i in range(6):
                created = await a.actors.get_or_create(f"e{i}", "echo").timeout(5)
                owners[f"e{i}"] = created.actor.node_rid  # type: ignore[union-attr]
            on_b = [i for i, rid in owners.items() if rid == b.identity.node_rid]
            for actor_id in owners:
                assert await a.actors.request(actor_id, "echo", b"x").timeout(5) == b"x"
            with pytest.raises(Exception, match="asked to fail"):
                await a.actors.request("e0", "echo", b"fail").timeout(5)
            failed_on_b = owners["e0"] == b.identity.node_rid

            async with trio.open_nursery() as nursery:
                endpoint = await nursery.start(serve_metrics, b, "127.0.0.1", 0)
                status, text = await http_get(endpoint.port, "/metrics")
                assert status == 200
                found = samples(text)
                assert value(found, "zlink_hosted_objects", kind="actor") == len(on_b)
                assert value(found, "zlink_ready_objects", kind="actor", type="echo") == len(on_b)
                assert value(found, "zlink_actor_dispatch_total", type="echo", outcome="ok") == len(
                    on_b
                )
                assert value(
                    found, "zlink_actor_dispatch_total", type="echo", outcome="failed"
                ) == (1 if failed_on_b else 0)
                assert value(found, "zlink_peers", state="admitted") == 1
                assert value(found, "zlink_node_up") == 1
                assert value(found, "zlink_store_latency_seconds_count") >= 1
                assert ("zlink_flow_events_total", frozenset({("event", "reclaimed")})) in found
                assert await http_get(endpoint.port, "/health") == (200, "ok\n")
                assert (await http_get(endpoint.port, "/nope"))[0] == 404
                nursery.cancel_scope.cancel()


async def test_relocation_metrics_count_a_live_move() -> None:
    from zlink_trio.server import Server

    if not callable(getattr(Server, "relocate", None)):
        pytest.skip("this build has no live relocation (Server.relocate)")
    with trio.fail_after(30):
        async with open_cluster(2, app=make_app()) as cluster:
            await cluster.wait_all_admitted()
            servers = {s.identity.node_rid: s for s in cluster.servers}
            created = await cluster.servers[0].actors.get_or_create("m", "echo").timeout(5)
            source = servers[created.actor.node_rid]  # type: ignore[union-attr]
            (target,) = [s for s in cluster.servers if s is not source]
            await source.relocate("m", to=target.identity.node_rid)  # type: ignore[attr-defined]
            async with trio.open_nursery() as nursery:
                for server, outcome in ((source, "moved_out"), (target, "committed")):
                    endpoint = await nursery.start(serve_metrics, server, "127.0.0.1", 0)
                    found = samples((await http_get(endpoint.port, "/metrics"))[1])
                    assert value(found, "zlink_relocations_total", outcome=outcome) == 1
                    assert value(found, "zlink_relocations_now", state="in_flight") == 0
                nursery.cancel_scope.cancel()
