"""Notice bytes a server sends after the body its Content-Length declares.

requests (urllib3), pip and curl all stop reading at Content-Length and drop the rest without a
word, so the bytes the build installs are the declared ones. A server that sends more is still
broken or lying (the tail can be the start of a smuggled response), and the lock is where a pin's
source is judged: it refuses the file instead of pinning it.

http.client closes its buffered reader the moment the declared length is read, which discards what
was buffered past it. So the watcher hooks that close: it looks at what the reader already holds,
then waits a moment on the socket for either the server's close (the request asked for
``Connection: close``) or more data. A server that keeps the connection open and silent costs the
wait and passes: nothing was sent past the body.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl

import requests

# How long to wait for the server's close after the body: a server honouring Connection: close
# closes at once; this bounds the cost of one that does not.
CLOSE_WAIT = 0.5


class TrailingBytesWatcher:
    """Records, on ``resp``, up to one byte sent past the declared body (``found``)."""

    def __init__(self, resp: requests.Response) -> None:
        self.found = b""
        raw = resp.raw
        response = getattr(raw, "_fp", None)  # urllib3 keeps the http.client response here
        connection = getattr(raw, "_connection", None)
        buffered = getattr(response, "fp", None)
        sock = getattr(connection, "sock", None)
        if not isinstance(response, http.client.HTTPResponse) or buffered is None or sock is None:
            return  # another transport (a test adapter): nothing to watch
        if response.chunked or response.length is None:
            return  # no declared length: the body ends where the stream does
        close = response._close_conn  # type: ignore[attr-defined]  # private, stable since 3.0

        def look_then_close() -> None:
            self.found = _pending(buffered, sock)
            close()

        response._close_conn = look_then_close  # type: ignore[attr-defined]


def _pending(buffered: object, sock: socket.socket) -> bytes:
    """One byte already buffered or arriving within CLOSE_WAIT; b"" at the server's close or silence."""
    timeout = sock.gettimeout()
    try:
        sock.settimeout(0.0)
        with contextlib.suppress(OSError, ValueError):
            held = buffered.peek(1)  # type: ignore[attr-defined]  # a non-blocking raw read at most
            if held:
                return bytes(held[:1])
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return b"?"
        readable, _, _ = select.select([sock], [], [], CLOSE_WAIT)
        if not readable:
            return b""
        with contextlib.suppress(OSError):  # an SSL record that is no data, a reset: nothing sent
            # TLS cannot peek; the connection is closed after this response either way.
            return sock.recv(1) if isinstance(sock, ssl.SSLSocket) else sock.recv(1, socket.MSG_PEEK)
        return b""
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(timeout)
