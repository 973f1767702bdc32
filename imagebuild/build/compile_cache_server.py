"""The compile cache's server: ccache's HTTP storage protocol over a directory or the user's remote.

Imported only when ``build --compile-cache`` is given (imagebuild.build.compile_cache.serving).
"""

from __future__ import annotations

import base64
import http.client
import http.server
import os
import re
import tempfile
import urllib.parse
from pathlib import Path

from imagebuild.build.compile_cache import CacheCounts
from imagebuild.inputs.layout import COMPILE_CACHE_URL

# ccache's key paths in its default ("subdirs") layout: two-character directories, then the key.
KEY_PATH_RE = re.compile(r"[0-9a-z]{1,2}(/[0-9a-z]{1,2})*/[0-9a-zA-Z._-]{4,200}|[0-9a-zA-Z._-]{4,200}")
CACHE_PATH = urllib.parse.urlsplit(COMPILE_CACHE_URL).path  # /ccache: ccache's requests are below it
REMOTE_TIMEOUT_S = 5.0  # below ccache's own operation timeout (10 s): a slow remote is a miss, not a wait
MAX_OBJECT_BYTES = 1 << 30


def cache_handler(
    store: DirectoryStore | RemoteStore, counts: CacheCounts
) -> type[http.server.BaseHTTPRequestHandler]:
    return type("CacheHandler", (_CacheHandler,), {"store": store, "counts": counts})


class DirectoryStore:
    """Objects as files under a directory, in ccache's own layout (its ``subdirs`` HTTP layout)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def get(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None

    def has(self, key: str) -> bool:
        return (self.root / key).is_file()

    def put(self, key: str, data: bytes) -> bool:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        # Another build may read it at the same time: write aside, then rename over.
        fd, spool = tempfile.mkstemp(dir=target.parent, prefix=".incoming-")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        Path(spool).replace(target)
        return True


class RemoteStore:
    """Objects in the user's ccache HTTP storage, forwarded with the credentials its URL carries.

    After the first failure (unreachable, refused, no answer in time) every request is answered as a
    miss at once: a dead remote costs a build one timeout, not one per compile.
    """

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "", parts.port
        self.base = parts.path.rstrip("/")
        self.headers: dict[str, str] = {}
        if parts.username is not None:
            pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        self.down = False

    def _request(self, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        connection = kind(self.host, self.port, timeout=REMOTE_TIMEOUT_S)
        try:
            connection.request(method, f"{self.base}/{key}", body=body, headers=self.headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.down = True
            raise
        finally:
            connection.close()
        if response.status >= 500 or response.status in (401, 403):
            self.down = True
            msg = f"the remote answered {response.status}"
            raise OSError(msg)
        return response.status, data

    def get(self, key: str) -> bytes | None:
        if self.down:
            return None
        status, data = self._request("GET", key)
        return data if status == 200 else None

    def has(self, key: str) -> bool:
        return not self.down and self._request("HEAD", key)[0] == 200

    def put(self, key: str, data: bytes) -> bool:
        return not self.down and self._request("PUT", key, data)[0] < 300


class _CacheHandler(http.server.BaseHTTPRequestHandler):
    """ccache's HTTP storage protocol: GET and HEAD an object, PUT one; 404 is a miss."""

    store: DirectoryStore | RemoteStore
    counts: CacheCounts
    protocol_version = "HTTP/1.1"

    def _key(self) -> str | None:
        path = urllib.parse.urlsplit(self.path).path
        key = path.removeprefix(CACHE_PATH + "/") if path.startswith(CACHE_PATH + "/") else ""
        return key if KEY_PATH_RE.fullmatch(key) else None

    def _reply(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        key = self._key()
        if key is None:
            self._reply(400)
            return
        try:
            data = self.store.get(key)
        except OSError:
            self.counts.count("failed")
            data = None
        self.counts.count("hits" if data is not None else "misses")
        self._reply(200, data) if data is not None else self._reply(404)

    def do_HEAD(self) -> None:
        key = self._key()
        try:
            found = key is not None and self.store.has(key)
        except OSError:
            self.counts.count("failed")
            found = False
        self._reply(200 if found else 404)

    def do_PUT(self) -> None:
        key, length = self._key(), int(self.headers.get("Content-Length") or 0)
        if key is None or length > MAX_OBJECT_BYTES:
            self._reply(400)
            return
        data = self.rfile.read(length)
        try:
            stored = self.store.put(key, data)
        except OSError:
            self.counts.count("failed")
            stored = False
        if stored:
            self.counts.count("stored")
        self._reply(201 if stored else 503)

    def log_message(self, *args: object) -> None:
        pass  # a request line names only a hash; the counts are reported once, after the build
