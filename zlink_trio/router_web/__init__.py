"""zlink_trio.router_web: a websocket front end for the SessionRouter, its client, and the
runnable example (``zlink-trio router ...``; docs/router.md, "Websocket adapter")."""

from .adapter import http_status as http_status, serve_router_websocket as serve_router_websocket
from .client import RouterClient as RouterClient, open_router_client as open_router_client
