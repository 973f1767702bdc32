"""A pytest plugin: the `sample_world` fixture, the loopback world that stands in for GitHub, Docker Hub and PyPI.

Registered once for the whole suite (``pytest_plugins`` in tests/conftest.py), so every test tree
can ask for its fixtures by name; nothing imports them.

`node_engines` gives extra Docker engines (sampleworld/engines.py), one per sample cluster node;
`sample_cluster` the sample SLURM cluster (sampleworld/cluster.py) with its two nodes and their engines.
`docker_engine_matrix` the engine matrix (sampleworld/engine_matrix.py): the main engine, two Docker 26
engines (overlay2, containerd image store) and Debian testing's (containerd image store), for tests that
parametrize over engines.
`podman_docker_host` Podman's Docker-compatible API service (sampleworld/podman_engine.py), as DOCKER_HOST.
`system_containerd_engine` a Docker 26 engine on a containerd of its own, as Docker CE's packages lay
them out (sampleworld/system_containerd.py).

It brings the world up through the package API (idempotent; the base image is cached by recipe, so only
a machine's first session runs debootstrap) and, at the end of the session, stops only the servers that
this session started: a world someone already had running is left as it was. The state dir defaults to
the repository's .sampleworld/; IMAGEBUILD_SAMPLEWORLD_STATE overrides it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import pytest

from sampleworld import World, cluster, down, engine_matrix, podman_engine, system_containerd, up
from sampleworld.engines import NodeEngine, ensure_engine, node_engine, stop_engine
from sampleworld.layout import DEFAULT_STATE_DIR, StateDir


def sample_world_state_dir() -> Path:
    override = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")
    return Path(override) if override else DEFAULT_STATE_DIR


@pytest.fixture(scope="session")
def sample_world() -> Iterator[World]:
    """A running sample world with both images in its registry; see sampleworld.World for the fields."""
    world = up(sample_world_state_dir(), images=True)
    try:
        yield world
    finally:
        if world.started:
            down(world.state_dir, only=world.started)


@pytest.fixture(scope="session")
def node_engines() -> Iterator[Callable[[str], NodeEngine]]:
    """A function giving a running extra Docker engine by name ("node1", ...): one per cluster node.

    Engines keep their data root (and images) in the state dir between sessions; a test that needs an
    engine without some image removes it first. At the end, only the engines this session started stop.
    """
    state = StateDir(sample_world_state_dir().resolve())
    started: list[NodeEngine] = []

    def get(name: str) -> NodeEngine:
        engine = node_engine(state, name)
        if ensure_engine(engine):
            started.append(engine)
        return engine

    try:
        yield get
    finally:
        for engine in started:
            stop_engine(engine)


@pytest.fixture(scope="session")
def sample_cluster() -> Iterator[cluster.Cluster]:
    """The sample SLURM cluster, up (its packages come from scripts/ensure-slurm.sh); clients need
    `Cluster.env` (SLURM_CONF). At the end, only the daemons and engines this session started stop."""
    state = sample_world_state_dir()
    running = cluster.up(state)
    try:
        yield running
    finally:
        if running.started:
            cluster.down(state, only=running.started)


@pytest.fixture(scope="session")
def docker_engine_matrix() -> Iterator[list[engine_matrix.MatrixEngine]]:
    """Every engine of the matrix, running: main first, then the managed ones (engine_matrix.MANAGED).

    A test parametrized over engine_matrix.ENGINE_NAMES picks its engine by name and runs its docker
    commands with `engine.env` (DOCKER_HOST). At the end, only the engines this session started stop."""
    state = sample_world_state_dir()
    engines, started = engine_matrix.up(state)
    try:
        yield engines
    finally:
        if started:
            engine_matrix.down(state, only=started)


# Session fixtures whose engines end up holding GBs (the sample image and its layer cache) that no
# later test reads: emptied after the last collected test that uses them, not kept to the session's
# end, where they made the docker tier's disk peak (tests/disk_watch.py).
EMPTIED_AFTER_LAST_USE: dict[str, Callable[[], None]] = {
    "docker_engine_matrix": lambda: engine_matrix.empty(sample_world_state_dir()),
}
_last_users = pytest.StashKey[dict[str, str]]()


def last_users(items: Sequence[pytest.Item], fixtures: Iterable[str]) -> dict[str, str]:
    """Of each fixture, the node ID of the last item (in run order) that uses it."""
    wanted = set(fixtures)
    return {name: item.nodeid for item in items for name in wanted & set(getattr(item, "fixturenames", ()))}


def pytest_collection_finish(session: pytest.Session) -> None:
    # session.items is after deselection: the tests that will run, in their order.
    session.config.stash[_last_users] = last_users(session.items, EMPTIED_AFTER_LAST_USE)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    for name, nodeid in item.config.stash.get(_last_users, {}).items():
        if nodeid == item.nodeid:
            EMPTIED_AFTER_LAST_USE[name]()


@pytest.fixture(scope="session")
def podman_docker_host() -> Iterator[str]:
    """Podman 4.3's Docker-compatible API service, running: what DOCKER_HOST takes to reach it.

    At the end it stops only if this session started it."""
    state = StateDir(sample_world_state_dir().resolve())
    started = podman_engine.ensure_podman(state)
    try:
        yield podman_engine.podman_engine(state).host
    finally:
        if started:
            podman_engine.stop_podman(state)


@pytest.fixture(scope="session")
def system_containerd_engine() -> Iterator[NodeEngine]:
    """A Docker 26 engine (containerd image store) on a containerd started apart from it, running.

    At the end it and its containerd stop only if this session started them."""
    state = sample_world_state_dir()
    engine, started = system_containerd.up(state)
    try:
        yield engine
    finally:
        if started:
            system_containerd.down(state)
