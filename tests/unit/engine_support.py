"""A stand-in Docker engine's socket: an HTTP server on a unix socket, for the engine clients' tests."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class UnixHttpServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """http.server's handlers on a unix socket, as dockerd serves its API."""

    daemon_threads = True

    def get_request(self) -> tuple[Any, tuple[str, int]]:
        request, _ = super().get_request()
        return request, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port) client address


@contextmanager
def serving(socket_path: Path, handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[None]:
    """The stand-in engine answers on `socket_path` while the block runs, and is gone after it."""
    server = UnixHttpServer(str(socket_path), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


class EngineHandler(http.server.BaseHTTPRequestHandler):
    """A stand-in engine's request handler: JSON answers (or raw bytes), no request log."""

    def answer(self, status: int, body: Any = None, *, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass
