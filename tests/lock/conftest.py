"""Fixtures of the lock tests: real local servers (tests.lock.servers, tests.lock.repositories).

Everything listens on 127.0.0.1 on a free port; nothing needs Docker or the internet (the one
network guard, in tests/conftest.py, makes an accidental request to the real world fail loudly).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
import requests

from imagebuild.inputs.arch import ArchProfile
from imagebuild.testing import free_port
from tests.lock.repositories import GitDaemon, Registry, TokenProxy
from tests.lock.servers import (
    FileServer,
    GitHttpServer,
    LocalServer,
    SilentServer,
    file_handler,
    git_advertisement,
    make_arch,
    port_open,
    send,
    wait_for,
)
from tests.prerequisites import skip_or_fail


@pytest.fixture
def amd64() -> ArchProfile:
    return make_arch("linux/amd64")


@pytest.fixture(autouse=True)
def _no_docker_config(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No user docker config: credentials come only from what a test writes."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path_factory.mktemp("no-docker-config")))


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


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    exe = shutil.which("docker-registry")
    if exe is None:
        skip_or_fail("docker-registry is not installed (apt-get install docker-registry)")
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


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    state: dict[str, FileServer] = {}
    server = LocalServer(file_handler(state))
    state["fs"] = FileServer(server=server)
    try:
        yield state["fs"]
    finally:
        server.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


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
