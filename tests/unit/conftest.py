"""Unit tests need neither docker nor network: accidental use fails loudly."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        msg = "unit tests must not open network connections; use a docker/network-marked test"
        raise AssertionError(msg)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throw-away copy of the checkout's inputs, as the working directory."""
    for name in ("stages", "constraints", "docker"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "pins.toml", tmp_path / "pins.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path
