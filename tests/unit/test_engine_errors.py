"""An engine that cannot be reached is said in plain words, with what to do, never docker-py's internals.

Each case is the real failure: a socket path that does not exist, a socket nobody listens on, a
loopback port nobody listens on, a socket the user may not open, an address that is not one.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import imagebuild
from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.unreachable import plain_reason
from imagebuild.errors import ConfigError, EngineError
from imagebuild.testing import free_port
from tests import REPO

AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
INTERNALS = (
    "Error while fetching",
    "Connection aborted",
    "HTTPConnectionPool",
    "Max retries",
    "FileNotFoundError",
)


def engine_error(monkeypatch: pytest.MonkeyPatch, address: str) -> str:
    monkeypatch.setenv("DOCKER_HOST", address)
    with pytest.raises(EngineError) as error:
        DockerEngine.from_env()
    message = str(error.value)
    assert not any(internal in message for internal in INTERNALS), message
    return message


@pytest.fixture
def stale_socket(tmp_path: Path) -> Path:
    """A socket file whose server is gone, as a crashed engine leaves it."""
    path = tmp_path / "engine.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
    return path


def test_no_socket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    message = engine_error(monkeypatch, f"unix://{tmp_path}/engine.sock")
    assert message.startswith(
        f"no Docker socket at {tmp_path}/engine.sock: start the engine (systemctl start docker) or set DOCKER_HOST"
    )


def test_the_checkout_script_is_named_only_in_a_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert (REPO / "scripts" / "ensure-docker.sh").is_file()
    assert "in this checkout: bash scripts/ensure-docker.sh" in engine_error(
        monkeypatch, f"unix://{tmp_path}/x.sock"
    )
    # Installed (site-packages has no scripts/ beside the package): no script that is not there.
    installed = tmp_path / "site-packages" / "imagebuild"
    installed.mkdir(parents=True)
    monkeypatch.setattr(imagebuild, "__file__", str(installed / "__init__.py"))
    assert "ensure-docker" not in engine_error(monkeypatch, f"unix://{tmp_path}/x.sock")


def test_nothing_listens_on_the_socket(monkeypatch: pytest.MonkeyPatch, stale_socket: Path) -> None:
    message = engine_error(monkeypatch, f"unix://{stale_socket}")
    assert message.startswith(
        f"nothing answers on the Docker socket {stale_socket} (the engine has stopped?)"
    )


def test_connection_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    message = engine_error(monkeypatch, f"tcp://127.0.0.1:{port}")
    assert message == (
        f"connection refused at tcp://127.0.0.1:{port}: no Docker engine listens there; start it, or point DOCKER_HOST at one"
    )


@pytest.mark.parametrize(
    ("address", "detail"),
    [("tcp://host", "a port is required"), ("htp://x", "not understood"), ("tcp://a:b:c", "not understood")],
)
def test_malformed_docker_host_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, address: str, detail: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", address)
    with pytest.raises(ConfigError) as error:
        DockerEngine.from_env()
    assert str(error.value) == (
        f"DOCKER_HOST = {address!r} is not a Docker engine address ({detail}); "
        "use unix:///PATH/docker.sock, tcp://HOST:PORT or ssh://USER@HOST"
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody"
)
def test_permission_denied_on_the_socket(tmp_path: Path) -> None:
    """A user outside the docker group, as nobody: the socket's directory is root's alone."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = private / "engine.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        done = subprocess.run(
            [*AS_NOBODY, sys.executable, "-m", "imagebuild", "export", "--output", "/tmp"],
            env={**os.environ, "DOCKER_HOST": f"unix://{path}"},
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 3, done.stderr
    assert done.stderr == (
        f"imagebuild: error: permission denied on the Docker socket {path}: run as root, or join the docker "
        "group (usermod -aG docker $USER, then log in again)\n"
    )


def test_through_the_cli_one_line_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/engine.sock")
    assert main(["export", "--output", str(tmp_path / "out")]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"imagebuild: error: no Docker socket at {tmp_path}/engine.sock: ")
    assert len(err.splitlines()) == 1


def test_the_engines_own_message_replaces_the_http_wrapper() -> None:
    class APIError(Exception):  # the shape of docker-py's: str() is the HTTP text, explanation the engine's
        explanation = "conflict: unable to remove repository reference (must force)"

    error = APIError("409 Client Error for http+docker://localhost/v1.41/images/x: Conflict")
    assert plain_reason(error) == "conflict: unable to remove repository reference (must force)"
    assert (
        plain_reason(ConnectionResetError(104, "Connection reset by peer"))
        == "the engine closed the connection"
    )


def test_render_on_unpinned_pins_names_allow_unpinned_and_lock(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first command a new user tries: the shipped pins' base, donor and aiter have no identity yet."""
    monkeypatch.chdir(REPO)
    assert main(["render"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert "[base]" in err
    assert "run `imagebuild lock`" in err
    assert "imagebuild render --allow-unpinned" in err
