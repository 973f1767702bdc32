"""The whole suite's configuration: the sample-world fixtures, the one network guard, network opt-in.

Tiers: unit, lock, launcher and verify tests need neither docker nor the internet; tests marked
``docker`` need a Docker engine (scripts/test starts one, and the sample world); tests marked
``network`` need the internet (PyPI) and run only with ``--run-network`` or
IMAGEBUILD_TEST_NETWORK=1. Loopback servers are fine everywhere: the lock, launcher and engine
tests start their own.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from tests import REPO
from tests.prerequisites import skip_or_fail

pytest_plugins = ("sampleworld.pytest_plugin", "tests.disk_watch")

NETWORK_ENV = "IMAGEBUILD_TEST_NETWORK"
# The engine's socket, as docker-py and the docker CLI find it by default.
ENGINE_SOCKETS = frozenset({"/var/run/docker.sock", "/run/docker.sock"})


def pytest_configure(config: pytest.Config) -> None:
    # A non-interactive shell starts its background jobs with SIGINT ignored (scripts/test runs the
    # other tiers that way), and every process a test starts would inherit that: the Ctrl-C tests'
    # SIGINT then reached nothing. Ctrl-C back for pytest and, through exec's reset, its children.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-network",
        action="store_true",
        help=f"also run the tests marked network, which need the internet (or set {NETWORK_ENV}=1)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-network") or os.environ.get(NETWORK_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"needs the internet: run with --run-network or {NETWORK_ENV}=1")
    for item in items:
        if item.get_closest_marker("network"):
            item.add_marker(skip)


@functools.cache
def _engine_problem() -> str:
    """Why the Docker engine does not answer ('' when it does); asked once per session."""
    from imagebuild.engine.docker import DockerEngine
    from imagebuild.errors import EngineError

    try:
        DockerEngine.from_env().close()
    except EngineError as e:
        return str(e)
    return ""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A docker test on a machine whose engine does not answer skips (fails in CI) before its fixtures
    run: one reason for all of them, instead of each fixture's own error and its half-open client."""
    if item.get_closest_marker("docker") is not None and (problem := _engine_problem()):
        skip_or_fail(f"needs the Docker engine: {problem}")


@pytest.fixture
def repo() -> Path:
    return REPO


def _loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host in (None, "localhost", ""):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _network_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Accidental use of the internet, or of the Docker engine outside a docker test, fails loudly.

    Unless the test is marked ``network``: a name other than a loopback one does not resolve (it
    looks exactly like a DNS failure, which is what the code under test must handle), and a
    connection to a non-loopback address is an AssertionError. Unless it is marked ``docker``,
    connecting to the engine's socket is one too.
    """
    test = request.node
    if test.get_closest_marker("network"):
        return
    docker_allowed = test.get_closest_marker("docker") is not None
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _loopback(host):
            msg = f"Name or service not known ({host}: blocked in tests; mark the test network)"
            raise socket.gaierror(socket.EAI_NONAME, msg)
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family == socket.AF_UNIX:
            path = os.fsdecode(address) if isinstance(address, str | bytes) else ""
            if not docker_allowed and path in ENGINE_SOCKETS:
                msg = f"{test.nodeid} is not marked docker but connected to the Docker engine at {path}"
                raise AssertionError(msg)
        elif isinstance(address, tuple) and not _loopback(address[0]):
            msg = f"{test.nodeid} is not marked network but connected to {address!r}"
            raise AssertionError(msg)
        real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
