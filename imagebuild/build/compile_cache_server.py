"""The compile cache's server: ccache's HTTP storage protocol over a directory or the user's remote.

Imported only when ``build --compile-cache`` is given (imagebuild.build.compile_cache.serving).

The address is fixed (the Dockerfile names it), so builds that run at once on one host share one
server: the first to start serves; one that finds another build serving the same cache there
(asked at HOLDER_PATH) leaves its compiles to that server and takes the address over when that
build ends (``SharedServing``). ccache's requests carry nothing that tells the builds apart, so
builds with different caches cannot run at once: the second stops before the engine is asked.
"""

from __future__ import annotations

import base64
import errno
import http.client
import http.server
import json
import os
import re
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from imagebuild.build.compile_cache import CacheCounts, CompileCache
from imagebuild.errors import ImageBuildError
from imagebuild.inputs.layout import COMPILE_CACHE_URL
from imagebuild.log import logger

# ccache's key paths in its default ("subdirs") layout: two-character directories, then the key.
KEY_PATH_RE = re.compile(r"[0-9a-z]{1,2}(/[0-9a-z]{1,2})*/[0-9a-zA-Z._-]{4,200}|[0-9a-zA-Z._-]{4,200}")
CACHE_PATH = urllib.parse.urlsplit(COMPILE_CACHE_URL).path  # /ccache: ccache's requests are below it
REMOTE_TIMEOUT_S = 5.0  # below ccache's own operation timeout (10 s): a slow remote is a miss, not a wait
MAX_OBJECT_BYTES = 1 << 30
# What a build's server says of itself, for another build that finds the address taken: the cache
# as messages name it, its key (CompileCache.key) and the build's pid. ccache never asks this path.
HOLDER_PATH = "/.imagebuild/compile-cache"
TAKE_OVER_EVERY_S = 0.2  # how often a build whose cache another build serves tries the address


def cache_handler(
    store: DirectoryStore | RemoteStore, counts: CacheCounts, cache: CompileCache
) -> type[http.server.BaseHTTPRequestHandler]:
    holder = json.dumps({"cache": cache.described, "key": cache.key, "pid": os.getpid()}).encode()
    return type("CacheHandler", (_CacheHandler,), {"store": store, "counts": counts, "holder": holder})


@dataclass(frozen=True)
class Holder:
    """The build whose server answers at the compile cache's address."""

    cache: str
    key: str
    pid: int


def holder_at(port: int) -> Holder | None:
    """The imagebuild build serving a compile cache at ``port``; None when nothing, or something else, answers."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", HOLDER_PATH)
        response = connection.getresponse()
        body = response.read(4096)
        document = json.loads(body) if response.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        connection.close()
    if not isinstance(document, dict):
        return None
    cache, key, pid = document.get("cache"), document.get("key"), document.get("pid")
    if not isinstance(cache, str) or not isinstance(key, str) or type(pid) is not int:
        return None
    return Holder(cache=cache, key=key, pid=pid)


class SharedServing:
    """This build's server at the compile cache's address, or another build's serving the same cache.

    ``start`` binds the address; when another build's server holds it for the same cache, this build's
    compiles go there, and a thread takes the address over as soon as that build ends (within
    TAKE_OVER_EVERY_S: a compile asking in between finds nothing and compiles, as without a cache).
    ``counts`` gets what this build's own server answered, and how long the other one answered.
    """

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler], port: int, counts: CacheCounts) -> None:
        self._handler, self._port, self._counts = handler, port, counts
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, cache: CompileCache) -> None:
        """Serve, or leave the compiles to another build serving ``cache``; ImageBuildError when the
        address is held by a build serving another cache, or by another program."""
        try:
            server = self._bind()
        except OSError as e:
            msg = f"--compile-cache: cannot serve the cache at 127.0.0.1:{self._port} ({e.strerror}); build without --compile-cache"
            raise ImageBuildError(msg) from e
        holder = holder_at(self._port) if server is None else None
        if server is None and holder is None:
            server = self._bind_once_more()  # the holder may have ended between the two
        if server is not None:
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever, name="compile-cache", daemon=True)
        else:
            self._join(holder, cache)
            self._thread = threading.Thread(target=self._take_over, name="compile-cache", daemon=True)
        self._thread.start()

    def _join(self, holder: Holder | None, cache: CompileCache) -> None:
        """Leave this build's compiles to ``holder``'s server, if it serves ``cache``."""
        if holder is None:
            msg = (
                f"--compile-cache: cannot serve the cache at 127.0.0.1:{self._port}: another program holds "
                "that port; stop it, or build without --compile-cache"
            )
            raise ImageBuildError(msg)
        if holder.key != cache.key:
            msg = (
                f"--compile-cache: the build of pid {holder.pid} serves another compile cache ({holder.cache}) at "
                f"127.0.0.1:{self._port}; builds at once on one host share one cache: name the same one, "
                "wait for that build, or build without --compile-cache"
            )
            raise ImageBuildError(msg)
        self._counts.shared_with = holder.pid
        logger.info("compile cache %s: served by the build of pid %d until it ends", cache.described, holder.pid)

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()
            server = self._server
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()

    def _bind(self) -> http.server.ThreadingHTTPServer | None:
        """The server at the address; None while another holds it (other OSErrors raised)."""
        try:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", self._port), self._handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return None
            raise
        server.daemon_threads = True
        return server

    def _bind_once_more(self) -> http.server.ThreadingHTTPServer | None:
        try:
            return self._bind()
        except OSError:
            return None

    def _take_over(self) -> None:
        started = time.monotonic()
        while not self._stopped.wait(TAKE_OVER_EVERY_S):
            server = self._bind_once_more()
            if server is None:
                continue
            with self._lock:
                if self._stopped.is_set():
                    server.server_close()
                    break
                self._server = server
            self._counts.shared_seconds = time.monotonic() - started
            logger.info("compile cache %s: the build of pid %s ended; this build serves it", self._counts.cache, self._counts.shared_with)
            server.serve_forever()  # until stop(): its shutdown() waits for this loop to start and end
            return
        self._counts.shared_seconds = time.monotonic() - started


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
    holder: bytes  # HOLDER_PATH's answer
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
        if urllib.parse.urlsplit(self.path).path == HOLDER_PATH:
            self._reply(200, self.holder)
            return
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
