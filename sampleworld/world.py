"""Bring the whole sample world up, report on it, and take it down (only what it started)."""

from __future__ import annotations

import fcntl
import json
import sys
import time
import tomllib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sampleworld import apt_archive, donor_image, gitserver, log, registry, services, tarballs, wheels
from sampleworld.errors import SampleWorldError
from sampleworld.layout import (
    AITER_URL,
    BAD_SHA,
    BASE_REPOSITORY,
    BASE_TAG,
    DEFAULT_PORTS,
    DEFAULT_STATE_DIR,
    DONOR_MI355X_REPOSITORY,
    DONOR_MI355X_TAG,
    DONOR_REPOSITORY,
    DONOR_TAG,
    GIT_BASE_URL,
    INDEX_URL,
    PINS_PATH,
    PORTS,
    PYLOCK_PATH,
    REGISTRY,
    REPO_ROOT,
    SIMPLE_URL,
    SNAPSHOT_ARCHIVE,
    Ports,
    StateDir,
)

# Which stand-in repository and ref each git pin of sampleworld/pins.toml names.
GIT_PINS = {
    "mori": ("ROCm/mori.git", "refs/tags/v1.2.2"),
    "vllm": ("raviguptaamd/vllm.git", "refs/heads/kimi-k3-wideep-disagg-fullsource-v3"),
    "router": ("raviguptaamd/router.git", "refs/heads/ravgupta/discovery-dp-rank-roundrobin"),
    "ucx": ("ROCm/ucx.git", "refs/heads/master"),
    "rixl": ("ROCm/RIXL.git", "refs/heads/main"),
    "rocshmem": ("ROCm/rocm-systems.git", "refs/heads/develop"),
    "deepep": ("ROCm/DeepEP.git", "refs/heads/main"),
}


@dataclass(frozen=True, kw_only=True)
class World:
    """Where everything of a running sample world is; `started` names the servers this `up` started."""

    state_dir: Path
    ports: Ports
    registry: str  # host:port, prefix of image references
    git_url: str  # git://host:port; a repository is f"{git_url}/ROCm/mori.git"
    index_url: str  # http://host:port (files under /files/)
    simple_url: str  # what pip's --index-url takes
    aiter_url: str
    snapshot_archive: str  # what the sample apt pin's `archive` names
    pins_path: Path
    base_image: str  # registry reference with tag
    donor_image: str
    refs: dict[str, dict[str, str]]  # repository path -> ref name -> commit SHA (tags peeled)
    commits: dict[str, str]  # git pin name (mori, vllm, router) -> commit SHA
    wheel_sha256: dict[str, str]  # stand-in wheel filename -> sha256
    donor_mi355x_image: str = ""  # the gfx950 donor, pinned by digest in sampleworld/pins.toml
    bad_sha: str = BAD_SHA
    started: tuple[str, ...] = field(default=())

    def repo_url(self, path: str) -> str:
        return f"{self.git_url}/{path}"

    def to_json(self) -> str:
        data = asdict(self)
        data["state_dir"] = str(self.state_dir)
        data["pins_path"] = str(self.pins_path)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _state(state_dir: Path | None) -> StateDir:
    return StateDir((state_dir or DEFAULT_STATE_DIR).resolve())


@contextmanager
def state_lock(state: StateDir) -> Iterator[None]:
    """One `up`/`down` at a time per state dir (engineers share the checkout and its .sampleworld/)."""
    state.root.mkdir(parents=True, exist_ok=True)
    with state.lock_file.open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(f"waiting for another sampleworld command holding {state.lock_file}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _index_service(state: StateDir) -> services.Service:
    return services.Service(
        name="index",
        port=PORTS.index,
        argv=(
            sys.executable,
            "-m",
            "sampleworld.index_server",
            "--root",
            str(state.index),
            "--port",
            str(PORTS.index),
        ),
        marker=f"--root {state.index}",
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT)},
    )


def _snapshot_service(state: StateDir) -> services.Service:
    root = apt_archive.ArchiveDirs(state).served
    return services.Service(
        name="snapshots",
        port=PORTS.snapshot,
        argv=(
            sys.executable,
            "-m",
            "sampleworld.snapshot_server",
            "--root",
            str(root),
            "--port",
            str(PORTS.snapshot),
        ),
        marker=f"--root {root}",
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT)},
    )


def _services(state: StateDir) -> list[services.Service]:
    return [
        _index_service(state),
        gitserver.service(state),
        registry.service(state),
        _snapshot_service(state),
    ]


def _check_pins(refs: dict[str, dict[str, str]], wheel_sha256: dict[str, str]) -> dict[str, str]:
    """The commits the git pins must hold; warns when sampleworld/pins.toml disagrees with the world."""
    pins = tomllib.loads(PINS_PATH.read_text())
    commits: dict[str, str] = {}
    for name, (repo, ref) in GIT_PINS.items():
        commits[name] = refs[repo][ref]
        # An empty commit is lock's to fill (deepep follows its branch, as the reference builds it).
        if pins[name]["commit"] and pins[name]["commit"] != commits[name]:
            log.info(
                f"WARNING: {PINS_PATH} [{name}] commit {pins[name]['commit']} != {repo} {ref} {commits[name]}"
            )
    flydsl = pins["flydsl"]
    if wheel_sha256.get(flydsl["filename"]) != flydsl["sha256"]:
        log.info(f"WARNING: {PINS_PATH} [flydsl] sha256 differs from the built {flydsl['filename']}")
    wanted = donor_image.mi355x_image().digest
    if pins["donor_mi355x"]["digest"] != wanted:
        log.info(
            f"WARNING: {PINS_PATH} [donor_mi355x] digest {pins['donor_mi355x']['digest']} != the stand-in's {wanted}"
        )
    return commits


def _move_ports(text: str, source: Ports, target: Ports) -> str:
    for old, new in zip(
        (source.registry, source.git, source.index, source.snapshot),
        (target.registry, target.git, target.index, target.snapshot),
        strict=True,
    ):
        text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    return text


def _write_pins(state: StateDir) -> Path:
    """sampleworld/pins.toml and its python lock with this world's ports (unchanged for the defaults)."""
    for committed, live in ((PINS_PATH, state.pins), (PYLOCK_PATH, state.pylock)):
        text = _move_ports(committed.read_text(), DEFAULT_PORTS, PORTS)
        if not live.is_file() or live.read_text() != text:
            live.write_text(text)
    return state.pins


def save_lock(state_dir: Path | None = None) -> Path:
    """Copy the world's python lock (after `imagebuild lock --pins WORLD_PINS`) back to sampleworld/."""
    state = _state(state_dir)
    if not state.pylock.is_file():
        msg = f"{state.pylock} is missing; run `python -m sampleworld up` first"
        raise SampleWorldError(msg)
    PYLOCK_PATH.write_text(_move_ports(state.pylock.read_text(), PORTS, DEFAULT_PORTS))
    return PYLOCK_PATH


def _push_images(state: StateDir) -> None:
    """Make the registry hold the donor and the base of the current recipes, built on the engine only
    when it does not: the registry, not an engine, is where the stand-ins live.

    Once pushed, a stand-in is never rebuilt or pushed again for another engine (DOCKER_HOST pointing
    at a fresh Docker 26 engine, a node engine): a rebuild would get new timestamps, so a new digest,
    and every pin locked against the old one would name an image the others no longer have. A fresh
    engine pulls them from the registry by digest (the pins name digests). The MI355X donor needs no
    engine: it is written byte for byte (its digest is in sampleworld/pins.toml) and pushed by API.
    """
    from sampleworld import base_image

    donor_image.ensure_donor_mi355x()

    wanted = (
        (donor_image.ensure_donor, donor_image.LABEL, donor_image.recipe(), DONOR_REPOSITORY, DONOR_TAG),
        (
            base_image.ensure_base,
            base_image.BASE_LABEL,
            base_image.base_recipe(state, base_image.rootfs_recipe()),
            BASE_REPOSITORY,
            BASE_TAG,
        ),
    )
    missing = []
    for build, label, recipe, repository, tag in wanted:
        name = repository.removeprefix(f"{REGISTRY}/")
        if (registry.pushed_labels(name, tag) or {}).get(label) == recipe:
            log.info(f"registry: {repository}:{tag} is current (recipe {recipe[:16]}); not rebuilt")
        else:
            missing.append((build, name, repository, tag))
    if not missing:
        return
    from sampleworld import dockerutil  # docker-py only when an image must be built

    engine = dockerutil.client()
    try:
        for build, name, repository, tag in missing:
            image = build(engine, state)
            if registry.pushed_image_id(name, tag) == image.id:
                log.info(f"registry: {repository}:{tag} is current ({str(image.id)[:19]}, cached by recipe)")
                continue
            with log.step(f"registry: pushing {repository}:{tag} ({dockerutil.image_size(image)})"):
                dockerutil.push(engine, image, repository=repository, tag=tag)
    finally:
        engine.close()


def _follow_port_base(state: StateDir) -> None:
    """Stop the servers of ours still running on another port base than this command's.

    A state dir's pid files do not say which ports their servers listen on. Without this, an `up`
    whose IMAGEBUILD_SAMPLEWORLD_PORT_BASE differs from the one that started them (a shell without
    the variable) found its own pid alive and another world's server answering on the default
    port, took it for its own, and pushed and tagged its base over that world's (seen: another
    checkout's test run then built on a base holding the wrong apt archive key). As the cluster
    does with a new slurm.conf, the old servers go; `ensure_running` then starts ours on the new
    ports, or names the process that holds them.
    """
    ports = json.dumps(asdict(PORTS), sort_keys=True) + "\n"
    try:
        recorded = state.ports_file.read_text()
    except FileNotFoundError:
        recorded = None
    if recorded is not None and recorded != ports:
        for svc in reversed(_services(state)):
            services.stop(state, svc)
    state.ports_file.write_text(ports)


def up(state_dir: Path | None = None, *, images: bool = True) -> World:
    """Start every server (idempotent) and make sure the registry holds both images.

    images=False skips Docker entirely (index, git daemon and registry only), for tests that need no image.
    """
    began = time.monotonic()
    state = _state(state_dir)
    with state_lock(state):
        state.create()
        _follow_port_base(state)
        with log.step("index: wheels"):
            wheel_sha256 = wheels.populate_index(state)
            tarballs.populate_tarballs(state)
        refs = gitserver.ensure_repos(state)
        registry.write_config(state)
        with log.step("apt: snapshot archive"):
            apt_archive.ensure_archive(state)
        started = [svc.name for svc in _services(state) if services.ensure_running(state, svc)]
        if images:
            _push_images(state)
        world = World(
            state_dir=state.root,
            ports=PORTS,
            registry=REGISTRY,
            git_url=GIT_BASE_URL,
            index_url=INDEX_URL,
            simple_url=SIMPLE_URL,
            aiter_url=AITER_URL,
            snapshot_archive=SNAPSHOT_ARCHIVE,
            pins_path=_write_pins(state),
            base_image=f"{BASE_REPOSITORY}:{BASE_TAG}",
            donor_image=f"{DONOR_REPOSITORY}:{DONOR_TAG}",
            donor_mi355x_image=f"{DONOR_MI355X_REPOSITORY}:{DONOR_MI355X_TAG}",
            refs=refs,
            commits=_check_pins(refs, wheel_sha256),
            wheel_sha256=wheel_sha256,
            started=tuple(started),
        )
        state.world_file.write_text(world.to_json())
    log.info(f"sample world up in {time.monotonic() - began:.1f}s (state: {state.root})")
    return world


def down(state_dir: Path | None = None, *, only: Iterable[str] | None = None) -> list[str]:
    """Stop the servers this state dir recorded (all, or those named in `only`); returns what stopped."""
    state = _state(state_dir)
    wanted = None if only is None else set(only)
    stopped: list[str] = []
    with state_lock(state):
        for svc in _services(state):
            if (wanted is None or svc.name in wanted) and services.stop(state, svc):
                stopped.append(svc.name)
    return stopped


def status(state_dir: Path | None = None) -> dict[str, int | None]:
    """Service name -> pid of our running server, or None."""
    state = _state(state_dir)
    if not state.root.is_dir():
        return dict.fromkeys(("index", "git-daemon", "registry", "snapshots"))
    return {svc.name: services.running_pid(state, svc) for svc in _services(state)}


def load(state_dir: Path | None = None) -> World:
    """The World recorded by the last `up` of this state dir."""
    state = _state(state_dir)
    try:
        data = json.loads(state.world_file.read_text())
    except OSError as e:
        msg = f"{state.world_file} is missing; run `python -m sampleworld up` first"
        raise SampleWorldError(msg) from e
    data["state_dir"] = Path(data["state_dir"])
    data["pins_path"] = Path(data["pins_path"])
    data["ports"] = Ports(**data["ports"])
    data["started"] = tuple(data["started"])
    return World(**data)
