"""An engine older than the Docker API imagebuild needs is refused in one line, before anything runs."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.store_kind import MIN_API_VERSION, api_version_problem
from imagebuild.errors import EngineError, ExitCode
from tests.unit.engine_support import UnixHttpServer


@pytest.mark.parametrize("version", ["1.41", "1.45", "1.47", "2.0"])
def test_the_api_of_docker_20_and_newer_is_accepted(version: str) -> None:
    assert api_version_problem("unix:///run/docker.sock", version) is None


def test_an_older_api_is_refused_naming_the_engine_and_what_is_needed() -> None:
    problem = api_version_problem("unix:///run/docker.sock", "1.39")
    assert problem is not None
    assert "unix:///run/docker.sock" in problem
    assert "1.39" in problem
    assert MIN_API_VERSION in problem
    assert "\n" not in problem


def test_a_version_that_is_not_one_is_refused() -> None:
    problem = api_version_problem("tcp://10.0.0.1:2375", "latest")
    assert problem is not None
    assert "'latest'" in problem


class _OldEngine(http.server.BaseHTTPRequestHandler):
    """Answers like Docker 18.09 (API 1.39) would: /version and /_ping."""

    def do_GET(self) -> None:
        body = json.dumps({"Version": "18.09.9", "ApiVersion": "1.39", "MinAPIVersion": "1.12"}).encode()
        if self.path.endswith("/_ping"):
            body = b"OK"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Api-Version", "1.39")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def old_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    socket_path = tmp_path / "docker.sock"
    server = UnixHttpServer(str(socket_path), _OldEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    address = f"unix://{socket_path}"
    monkeypatch.setenv("DOCKER_HOST", address)
    monkeypatch.delenv("DOCKER_API_VERSION", raising=False)
    try:
        yield address
    finally:
        server.shutdown()
        server.server_close()


def test_docker_engine_refuses_an_engine_serving_api_1_39(old_engine: str) -> None:
    with pytest.raises(EngineError, match=r"serves Docker API 1\.39; imagebuild needs 1\.41"):
        DockerEngine.from_env()


def test_a_verb_exits_with_the_no_engine_code_in_one_line(old_engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "sha256:" + "a" * 64]) == ExitCode.NO_ENGINE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "Docker API 1.39" in err
    assert old_engine in err
