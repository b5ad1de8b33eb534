"""Prometheus metrics of one node (the optional ``metrics`` extra: ``prometheus_client``).

::

    async with open_server(config, app) as server:
        async with trio.open_nursery() as nursery:
            endpoint = await nursery.start(serve_metrics, server, "127.0.0.1", 9100)

``serve_metrics`` serves ``GET /metrics`` (the text exposition format) and ``GET /health``
(200 ``ok`` while the node is running with its lease, else 503) until cancelled; it also
probes the Location Store's round-trip latency every ``probe_interval`` seconds.
``zlink-trio node --metrics-port PORT`` runs it next to the node. The metric names are in
docs/operations.md ("Metrics").
"""

try:
    import prometheus_client as _prometheus_client  # noqa: F401
except ImportError as exc:  # a newcomer's plain install: say which extra, not a bare trace
    raise ImportError(
        "zlink_trio.metrics needs the metrics extra: pip install 'zlink-trio[metrics]' "
        "(from a checkout: python -m pip install -e '.[metrics]')",
        name=exc.name,
    ) from exc

from .collector import ServerCollector as ServerCollector, new_registry as new_registry
from .http import MetricsEndpoint as MetricsEndpoint, serve_metrics as serve_metrics
