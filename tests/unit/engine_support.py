"""A stand-in Docker engine's socket: an HTTP server on a unix socket, for the engine clients' tests."""

from __future__ import annotations

import socketserver
from typing import Any


class UnixHttpServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """http.server's handlers on a unix socket, as dockerd serves its API."""

    daemon_threads = True

    def get_request(self) -> tuple[Any, tuple[str, int]]:
        request, _ = super().get_request()
        return request, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port) client address
