"""The suite's own rules: plain `pytest` anywhere, no imports of conftest or test modules, one network guard."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO

TESTS = REPO / "tests"
# The console script, not `python -m pytest`: that one puts the working directory on sys.path
# and so hides an import that works only from the repository root.
PYTEST = Path(sys.executable).parent / "pytest"


def _imported_modules(path: Path) -> list[str]:
    modules: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
    return modules


def test_nothing_imports_conftest_or_a_test_module() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for module in _imported_modules(path)
        if module.rsplit(".", 1)[-1] == "conftest" or module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert offenders == []


@pytest.mark.skipif(not PYTEST.exists(), reason="no pytest console script beside this interpreter")
@pytest.mark.parametrize(
    "directory", [".", "tests", "tests/lock", "tests/unit", "tests/verify", "tests/launcher"]
)
def test_plain_pytest_collects_from_the_root_and_any_test_directory(directory: str) -> None:
    done = subprocess.run(
        [str(PYTEST), "--collect-only", "-q", "-m", "not docker"],
        cwd=REPO / directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert " collected" in done.stdout


def test_the_guard_refuses_names_that_are_not_loopback() -> None:
    with pytest.raises(socket.gaierror, match="blocked in tests"):
        socket.getaddrinfo("pypi.org", 443)


def test_the_guard_refuses_connections_beyond_the_loopback() -> None:
    with socket.socket() as sock, pytest.raises(AssertionError, match="not marked network"):
        sock.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed; the guard stops it first anyway


def test_the_guard_refuses_the_docker_engine_outside_docker_tests() -> None:
    with socket.socket(socket.AF_UNIX) as sock, pytest.raises(AssertionError, match="not marked docker"):
        sock.connect("/var/run/docker.sock")


def test_the_guard_lets_loopback_through() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass


def test_network_tests_are_skipped_unless_asked_for() -> None:
    done = subprocess.run(
        [str(PYTEST), "-q", "-rs", "tests/lock/test_pypi.py::test_flydsl_on_the_real_pypi"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "IMAGEBUILD_TEST_NETWORK"},
    )
    assert "needs the internet: run with --run-network" in done.stdout, done.stdout
