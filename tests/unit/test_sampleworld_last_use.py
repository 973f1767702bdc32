"""The sample world's plugin empties a session fixture's engines after the last test that uses it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sampleworld.pytest_plugin import last_users


def item(nodeid: str, *fixtures: str) -> Any:
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures))


def test_the_last_user_in_run_order_is_chosen_for_each_fixture() -> None:
    items = [
        item("a.py::one", "docker_engine_matrix", "tmp_path"),
        item("b.py::two", "docker_engine_matrix"),
        item("c.py::three", "podman_docker_host"),
        item("d.py::four", "tmp_path"),
    ]
    assert last_users(items, ["docker_engine_matrix", "podman_docker_host", "unused"]) == {
        "docker_engine_matrix": "b.py::two",
        "podman_docker_host": "c.py::three",
    }

