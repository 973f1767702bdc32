"""Real local servers for the lock tests: git daemon, registry, index, files.

Everything listens on 127.0.0.1 on a free port; nothing needs Docker or the
internet. An autouse guard refuses DNS for any non-loopback host unless a test
is marked ``network``, so an accidental request to the real world fails loudly
(and a lookup of a missing host looks exactly like a DNS failure).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from imagebuild.arch import ArchProfile
from imagebuild.lock import LockOptions

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    return LockOptions(pins_path=path, arch=arch, **kw)


@pytest.fixture
def amd64() -> ArchProfile:
    return make_arch("linux/amd64")


@pytest.fixture(autouse=True)
def _isolate(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No user docker config, and no real network unless the test says so."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path_factory.mktemp("no-docker-config")))
    if request.node.get_closest_marker("network"):
        return
    real = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if host is not None and host not in LOOPBACK and not str(host).startswith("127."):
            raise socket.gaierror(socket.EAI_NONAME, f"Name or service not known ({host}: blocked in tests)")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)


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


# --- git daemon --------------------------------------------------------------

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


@dataclass
class GitRepo:
    path: Path
    url: str

    def git(self, *args: str) -> str:
        env = {**os.environ, **GIT_ENV}
        out = subprocess.run(
            ["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True, env=env
        )
        return out.stdout.strip()

    def commit(self, message: str) -> str:
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str, at: str = "HEAD", *, annotated: bool = False, force: bool = False) -> str:
        args = ["tag"] + (["-f"] if force else []) + (["-a", "-m", name] if annotated else [])
        self.git(*args, name, at)
        return self.git("rev-parse", f"{name}^{{commit}}")

    def branch(self, name: str, at: str = "HEAD") -> str:
        self.git("branch", "-f", name, at)
        return self.git("rev-parse", name)


@dataclass
class GitDaemon:
    base: Path
    port: int
    counter: list[int] = field(default_factory=lambda: [0])

    def repo(self, prefix: str = "repo") -> GitRepo:
        """A fresh repository served at git://127.0.0.1:PORT/NAME with one commit."""
        self.counter[0] += 1
        name = f"{prefix}{self.counter[0]}"
        path = self.base / name
        subprocess.run(
            ["git", "init", "-q", "-b", "main", str(path)], check=True, env={**os.environ, **GIT_ENV}
        )
        repo = GitRepo(path=path, url=f"git://127.0.0.1:{self.port}/{name}")
        repo.commit("initial")
        return repo


@pytest.fixture(scope="session")
def git_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitDaemon]:
    base = tmp_path_factory.mktemp("git")
    port = free_port()
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            f"--base-path={base}",
            "--listen=127.0.0.1",
            f"--port={port}",
            "--reuseaddr",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: port_open(port), "git daemon")
        yield GitDaemon(base=base, port=port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- registry ----------------------------------------------------------------


@dataclass
class Registry:
    """A docker-registry we push to over its HTTP API, no engine involved."""

    url: str  # http://127.0.0.1:PORT
    host: str  # 127.0.0.1:PORT

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = sha256_digest(data)
        with requests.Session() as s:
            r = s.post(f"{self.url}/v2/{repo}/blobs/uploads/", timeout=10)
            assert r.status_code == 202, r.text
            location = r.headers["Location"]
            if location.startswith("/"):
                location = self.url + location
            sep = "&" if "?" in location else "?"
            r = s.put(
                f"{location}{sep}digest={digest}",
                data=data,
                headers={"Content-Type": "application/octet-stream"},
                timeout=10,
            )
            assert r.status_code == 201, r.text
        return digest

    def push_manifest(self, repo: str, ref: str, doc: dict[str, Any], media_type: str) -> str:
        body = json.dumps(doc, indent=2).encode()
        r = requests.put(
            f"{self.url}/v2/{repo}/manifests/{ref}",
            data=body,
            headers={"Content-Type": media_type},
            timeout=10,
        )
        assert r.status_code == 201, r.text
        return sha256_digest(body)

    def push_single(
        self,
        repo: str,
        tag: str,
        platform: str = "linux/amd64",
        *,
        media_type: str = DOCKER_MANIFEST,
        salt: str = "",
    ) -> str:
        """A one-platform image; returns its manifest digest."""
        os_name, arch = platform.split("/")[:2]
        config = json.dumps(
            {"architecture": arch, "os": os_name, "rootfs": {"type": "layers", "diff_ids": []}, "salt": salt}
        ).encode()
        layer = f"layer {repo} {platform} {salt}".encode()
        config_type = (
            "application/vnd.docker.container.image.v1+json"
            if media_type == DOCKER_MANIFEST
            else "application/vnd.oci.image.config.v1+json"
        )
        layer_type = (
            "application/vnd.docker.image.rootfs.diff.tar.gzip"
            if media_type == DOCKER_MANIFEST
            else "application/vnd.oci.image.layer.v1.tar+gzip"
        )
        doc = {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": config_type, "size": len(config), "digest": self.push_blob(repo, config)},
            "layers": [{"mediaType": layer_type, "size": len(layer), "digest": self.push_blob(repo, layer)}],
        }
        return self.push_manifest(repo, tag, doc, media_type)

    def push_multi(
        self, repo: str, tag: str, platforms: tuple[str, ...], *, media_type: str = OCI_INDEX, salt: str = ""
    ) -> tuple[str, dict[str, str]]:
        """A multi-arch index; returns (index digest, {platform: manifest digest})."""
        child_type = OCI_MANIFEST if media_type == OCI_INDEX else DOCKER_MANIFEST
        children: dict[str, str] = {}
        entries = []
        for platform in platforms:
            digest = self.push_single(
                repo, f"tmp-{abs(hash((platform, salt)))}", platform, media_type=child_type, salt=salt
            )
            children[platform] = digest
            size = len(self._get_manifest(repo, digest))
            os_name, arch, *variant = platform.split("/")
            plat: dict[str, str] = {"os": os_name, "architecture": arch}
            if variant:
                plat["variant"] = variant[0]
            entries.append({"mediaType": child_type, "digest": digest, "size": size, "platform": plat})
        # a buildx-style attestation entry that must never be chosen
        entries.append(
            {
                "mediaType": child_type,
                "digest": children[platforms[0]],
                "size": len(self._get_manifest(repo, children[platforms[0]])),
                "platform": {"os": "unknown", "architecture": "unknown"},
            }
        )
        doc = {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
        return self.push_manifest(repo, tag, doc, media_type), children

    def _get_manifest(self, repo: str, digest: str) -> bytes:
        r = requests.get(
            f"{self.url}/v2/{repo}/manifests/{digest}",
            headers={"Accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        return r.content


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: port_open(port), "docker-registry")
        yield Registry(url=f"http://127.0.0.1:{port}", host=f"127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class TokenProxy:
    """A registry front that demands bearer tokens, like Docker Hub does."""

    server: LocalServer
    host: str
    # repository prefix -> required "user:password" for its token
    private: dict[str, str] = field(default_factory=dict)
    tokens_issued: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
def token_registry(registry: Registry) -> Iterator[TokenProxy]:
    state: dict[str, TokenProxy] = {}
    valid: set[str] = set()

    def handle(h: BaseHTTPRequestHandler) -> None:
        proxy = state["proxy"]
        path, _, query = h.path.partition("?")
        if path == "/token":
            params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
            scope = requests.utils.unquote(params.get("scope", ""))
            repo = scope.split(":")[1] if scope.count(":") >= 2 else ""
            needed = next((cred for prefix, cred in proxy.private.items() if repo.startswith(prefix)), None)
            if needed is not None:
                given = h.headers.get("Authorization", "")
                if given != "Basic " + base64.b64encode(needed.encode()).decode():
                    send(
                        h, 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"Content-Type": "application/json"}
                    )
                    return
            token = f"tok-{len(proxy.tokens_issued)}-{repo}"
            proxy.tokens_issued.append(token)
            valid.add(token)
            send(h, 200, json.dumps({"token": token}).encode(), {"Content-Type": "application/json"})
            return
        auth = h.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth.removeprefix("Bearer ") not in valid:
            repo = path.removeprefix("/v2/").rsplit("/manifests/", 1)[0].rsplit("/blobs/", 1)[0]
            challenge = (
                f'Bearer realm="{proxy.server.url}/token",service="test-registry",'
                f'scope="repository:{repo}:pull"'
            )
            send(h, 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"WWW-Authenticate": challenge})
            return
        upstream = requests.request(
            h.command, registry.url + h.path, headers={"Accept": h.headers.get("Accept", "*/*")}, timeout=10
        )
        keep = ("Content-Type", "Docker-Content-Digest")
        send(
            h,
            upstream.status_code,
            upstream.content,
            {k: upstream.headers[k] for k in keep if k in upstream.headers},
        )

    server = LocalServer(handle)
    proxy = TokenProxy(server=server, host=f"127.0.0.1:{server.port}")
    state["proxy"] = proxy
    try:
        yield proxy
    finally:
        server.close()


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


def _file_handler(state: dict[str, FileServer]) -> Handler:
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


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    state: dict[str, FileServer] = {}
    server = LocalServer(_file_handler(state))
    state["fs"] = FileServer(server=server)
    try:
        yield state["fs"]
    finally:
        server.close()


# --- package index -----------------------------------------------------------


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


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


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


@pytest.fixture
def git_http() -> Iterator[GitHttpServer]:
    state: dict[str, GitHttpServer] = {}

    def handle(h: BaseHTTPRequestHandler) -> None:
        if not h.path.endswith("/info/refs?service=git-upload-pack"):
            send(h, 404, b"not found")
            return
        body = git_advertisement(state["git"].refs)
        send(h, 200, body, {"Content-Type": "application/x-git-upload-pack-advertisement"})

    server = LocalServer(handle)
    state["git"] = GitHttpServer(server=server)
    try:
        yield state["git"]
    finally:
        server.close()


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
