"""Real local servers for the lock tests: an HTTP server to script, a file server that can fail on
demand, a package index, a server that never answers, a git smart-HTTP advertiser; and helpers.

Everything listens on 127.0.0.1 on a free port; nothing needs Docker or the internet. The
fixtures that start them are in conftest.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import socket
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock import LockOptions


def wait_for(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    msg = f"{what} did not come up within {timeout}s"
    raise RuntimeError(msg)


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def zip_bytes(*members: tuple[str, bytes]) -> bytes:
    """A real zip archive (what a wheel is), in memory."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members or (("pkg/__init__.py", b""),):
            archive.writestr(name, data)
    return buffer.getvalue()


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_arch(platform: str = "linux/amd64") -> ArchProfile:
    return ArchProfile(
        name="test",
        description="test profile",
        platform=platform,
        gfx_arch="gfx942",
        rocm_arch="gfx942",
        mori_gpu_archs="gfx942",
        nic_arch="cx7",
    )


def options(path: Path, arch: ArchProfile, **kw: Any) -> LockOptions:
    """LockOptions for tests: short limits, since every server is local."""
    kw.setdefault("jobs", 8)
    kw.setdefault("timeout", 5.0)
    kw.setdefault("deadline", 60.0)
    return LockOptions(pins_path=path, arch=arch, base_pin="base", **kw)  # the sample definition's


# --- a tiny threaded HTTP server ---------------------------------------------


Handler = Callable[[BaseHTTPRequestHandler], None]


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    handler: Handler

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        # clients that time out or are cut off on purpose reset the connection
        with contextlib.suppress(ConnectionError, TimeoutError):
            super().handle()

    def _dispatch(self) -> None:
        with contextlib.suppress(ConnectionError):
            type(self).handler(self)

    do_GET = do_HEAD = do_POST = do_PUT = _dispatch


class LocalServer:
    def __init__(self, handler: Handler) -> None:
        cls = type("BoundHandler", (_Quiet,), {"handler": staticmethod(handler)})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), cls)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send(
    h: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict[str, str] | None = None
) -> None:
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


# --- file server -------------------------------------------------------------


@dataclass
class FileServer:
    """Serves registered bodies; can fail, hang or cut a path on demand."""

    server: LocalServer
    files: dict[str, bytes] = field(default_factory=dict)
    fail_first: dict[str, int] = field(default_factory=dict)  # path -> how many 500s before OK
    hang: set[str] = field(default_factory=set)
    cut: set[str] = field(default_factory=set)
    hits: dict[str, int] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    delay: float = 0.0
    # path -> answers (status, headers) to give before the file, one per request
    script: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    busy: int = 0  # requests being answered right now
    most_busy: int = 0  # the most ever answered at once
    _count: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, body: bytes, content_type: str = "application/octet-stream") -> str:
        self.files[path] = body
        self.headers[path] = {"Content-Type": content_type}
        return self.server.url + path


def file_handler(state: dict[str, FileServer]) -> Handler:
    def handle(h: BaseHTTPRequestHandler) -> None:
        fs = state["fs"]
        with fs._count:
            fs.busy += 1
            fs.most_busy = max(fs.most_busy, fs.busy)
        try:
            answer(fs, h)
        finally:
            with fs._count:
                fs.busy -= 1

    def answer(fs: FileServer, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?")[0]
        fs.hits[path] = fs.hits.get(path, 0) + 1
        if fs.delay:
            time.sleep(fs.delay)
        if path in fs.hang:
            time.sleep(5)
            return
        if fs.fail_first.get(path, 0) > 0:
            fs.fail_first[path] -= 1
            send(h, 500, b"boom")
            return
        if fs.script.get(path):
            status, headers = fs.script[path].pop(0)
            send(h, status, b"try later", headers)
            return
        if path not in fs.files:
            send(h, 404, b"not found")
            return
        body = fs.files[path]
        if path in fs.cut:
            h.send_response(200)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body[: len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        send(h, 200, body, fs.headers.get(path))

    return handle


@dataclass(frozen=True)
class IndexFile:
    filename: str
    body: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


def serve_index(
    fs: FileServer, project: str, files: list[IndexFile], *, flavour: str, hashes: bool = True
) -> str:
    """Publish ``files`` under /<flavour>/simple/<project>/ on ``fs``; returns the index URL."""
    for f in files:
        fs.add(f"/files/{f.filename}", f.body)
    page = f"/{flavour}/simple/{project}/"
    if flavour == "json":
        doc = {
            "meta": {"api-version": "1.0"},
            "name": project,
            "files": [
                {
                    "filename": f.filename,
                    "url": f"../../../files/{f.filename}",
                    "hashes": {"sha256": f.sha256} if hashes else {},
                }
                for f in files
            ],
        }
        fs.add(page, json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
    else:
        links = "\n".join(
            f'<a href="/files/{f.filename}'
            + (f"#sha256={f.sha256}" if hashes else "")
            + f'">{f.filename}</a><br/>'
            for f in files
        )
        fs.add(page, f"<!DOCTYPE html><html><body>{links}</body></html>".encode(), "text/html")
    return f"{fs.server.url}/{flavour}/simple/"


# --- servers that misbehave at the socket level --------------------------------


class SilentServer:
    """Accepts every connection and never answers: the worst upstream there is."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # shut down by close()
                return
            self.connections.append(conn)  # held open, never read, never answered

    def wait_for_connections(self, count: int, timeout: float = 10.0) -> None:
        wait_for(
            lambda: len(self.connections) >= count, f"{count} connection(s) to the silent server", timeout
        )

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._thread.join(timeout=5)
        self.sock.close()
        for conn in self.connections:
            conn.close()


def pkt_line(text: str) -> bytes:
    data = text.encode()
    return f"{len(data) + 4:04x}".encode() + data


def git_advertisement(refs: list[tuple[str, str]]) -> bytes:
    """A smart-HTTP ref advertisement (protocol v0), exactly as listed: duplicates and all."""
    body = pkt_line("# service=git-upload-pack\n") + b"0000"
    for i, (sha, ref) in enumerate(refs):
        body += pkt_line(f"{sha} {ref}" + ("\0symref=HEAD:refs/heads/main\n" if i == 0 else "\n"))
    return body + b"0000"


@dataclass
class GitHttpServer:
    """A git smart-HTTP server that advertises whatever refs a test gives it."""

    server: LocalServer
    refs: list[tuple[str, str]] = field(default_factory=list)

    def url(self, name: str = "repo") -> str:
        return f"{self.server.url}/{name}"


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (e.g. a server's port)."""
    found: list[str] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


def fingerprinted(path: Path) -> Path:
    """``path`` as `imagebuild lock` leaves it: every pin with a complete identity fingerprinted."""
    from imagebuild.pins import load_pins, render_updates

    stamps = {
        pin.name: {"fingerprint": stamped}
        for pin in load_pins(path)
        if pin.declared_keys
        and all(pin.identity_fields().get(k) for k in pin.identity_keys if k != "tag_object")
        and (stamped := pin.with_fingerprint().fingerprint)
    }
    path.write_text(render_updates(path, stamps), encoding="utf-8")
    return path
