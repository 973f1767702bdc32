"""publish, export and import for real: the sample registry, the main engine and a node's own engine.

The node engine (sampleworld/engines.py) is a second dockerd with its own image store, so "an engine
that never had the image" is true: each test removes the image there first.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from sampleworld import engines
from sampleworld.engines import NodeEngine, ensure_engine, stop_engine
from sampleworld.layout import StateDir
from sampleworld.pytest_plugin import sample_world_state_dir
from sampleworld.world import World
from tests.integration.export_support import corrupt_copy, run_shipped_importer
from tests.integration.image_support import CHECKOUT
from tests.integration.scratch import module_scratch
from tests.prerequisites import PYTHON38, skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

# Per checkout: several checkouts share one Docker engine, and a shared tag would be overwritten.
IMAGE = f"imagebuild-test-distribute/kimi-k3:gfx942-{CHECKOUT}"


def _docker(host: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", **({"DOCKER_HOST": host} if host else {})}
    return subprocess.run(
        ["docker", *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _forget(node: NodeEngine, image_id: str) -> None:
    """Make the node an engine that never had the image (its own store: nothing else uses it)."""
    _docker(node.host, "image", "rm", "--force", image_id)
    assert _docker(node.host, "image", "inspect", image_id).returncode != 0


@pytest.fixture(scope="module")
def built(locked_pins: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The sample image, built (mostly from cache) under this module's own tag, and its build record."""
    record = tmp_path_factory.mktemp("build") / "gfx942.build.json"
    code = main(
        ["build", "--pins", str(locked_pins), "--network", "host", "--tag", IMAGE, "--record", str(record)]
    )
    assert code == 0
    data: dict[str, object] = json.loads(record.read_text())
    data["record_path"] = str(record)
    return data


@pytest.fixture(scope="module")
def node(node_engines: Callable[[str], NodeEngine]) -> NodeEngine:
    return node_engines("distribute")


@pytest.fixture
def node_engine(node: NodeEngine, monkeypatch: pytest.MonkeyPatch) -> Iterator[DockerEngine]:
    monkeypatch.setenv("DOCKER_HOST", node.host)
    engine = DockerEngine.from_env()
    monkeypatch.delenv("DOCKER_HOST")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def exported(
    built: dict[str, object], request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The image exported once (zstd) to a 'shared' directory; returns the manifest path."""
    with module_scratch(request, tmp_path_factory, "shared") as output:
        assert main(["export", IMAGE, "--output", str(output)]) == 0
        (manifest,) = output.glob("*.json")
        yield manifest


def test_publish_gives_a_digest_reference_that_pulls_the_same_image_on_a_fresh_engine(
    built: dict[str, object],
    world: World,
    node: NodeEngine,
    node_engine: DockerEngine,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repository = f"{world.registry}/imagebuild-test-distribute/kimi-k3"
    assert main(["publish", IMAGE, "-t", repository, "--record", str(built["record_path"])]) == 0
    reference = capsys.readouterr().out
    assert re.fullmatch(rf"{re.escape(repository)}@sha256:[0-9a-f]{{64}}\n", reference)
    reference = reference.strip()
    record = json.loads(Path(str(built["record_path"])).read_text())
    assert reference in record["published"]
    assert record["recipes"] == ["kimi-k3"]  # what the built image carries, as build recorded it

    _forget(node, str(built["image_id"]))
    assert node_engine.pull(reference) == built["image_id"]

    # The job needs no reference typed again: the record holds it, and the recipe.
    job = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/kimi-k3"]
    assert main([*job, "--from-record", str(built["record_path"])]) == 0
    from_record = capsys.readouterr().out
    assert main([*job, "--image", reference, "--recipe", "kimi-k3"]) == 0
    assert from_record == capsys.readouterr().out


def test_the_shipped_importer_loads_verifies_and_tags_on_a_fresh_engine_with_python38(
    built: dict[str, object], exported: Path, node: NodeEngine
) -> None:
    if not PYTHON38.exists():
        skip_or_fail(f"no Python 3.8 at {PYTHON38} (pyenv)")
    _forget(node, str(built["image_id"]))
    importer = exported.parent / "imagebuild-import.pyz"
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": node.host}
    done = subprocess.run(
        [str(PYTHON38), str(importer), str(exported)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{built['image_id']}\n"
    assert "verified and loaded" in done.stderr
    inspected = _docker(node.host, "image", "inspect", "--format", "{{.Id}}", IMAGE)
    assert inspected.stdout.strip() == built["image_id"]

    again = subprocess.run(
        [str(PYTHON38), str(importer), str(exported)], env=env, capture_output=True, text=True, check=False
    )
    assert again.returncode == 0
    assert "already present" in again.stderr


def test_the_docker_context_is_the_engine_both_importers_load_into(
    built: dict[str, object], exported: Path, node: NodeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a node set up for rootless Docker: DOCKER_HOST unset, a context made current by the docker
    CLI, and another engine (the machine's, which has the image) on the default socket."""
    config = tmp_path / "docker-config"
    cli_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DOCKER_CONFIG": str(config)}
    for argv in (["context", "create", "node", "--docker", f"host={node.host}"], ["context", "use", "node"]):
        made = subprocess.run(["docker", *argv], env=cli_env, capture_output=True, text=True, check=False)
        assert made.returncode == 0, made.stderr
    importer = [sys.executable, str(exported.parent / "imagebuild-import.pyz"), str(exported)]
    _forget(node, str(built["image_id"]))
    done = subprocess.run(importer, env=cli_env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "verified and loaded" in done.stderr  # not "already present": the default socket's engine has it
    seen = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", IMAGE], env=cli_env, capture_output=True, text=True, check=False)
    assert seen.stdout.strip() == built["image_id"], seen.stderr  # what `docker run` in the job will find

    _forget(node, str(built["image_id"]))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    monkeypatch.setenv("DOCKER_CONTEXT", "node")
    assert main(["import", str(exported)]) == 0
    assert _docker(node.host, "image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip() == built["image_id"]
    # DOCKER_CONTEXT over the config's current context, as the CLI: the default socket's engine has it.
    again = subprocess.run(importer, env={**cli_env, "DOCKER_CONTEXT": "default"}, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert "already present" in again.stderr


def test_imagebuild_import_of_an_uncompressed_archive_on_a_fresh_engine(
    built: dict[str, object], node: NodeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["export", IMAGE, "--output", str(tmp_path), "--compress", "none"]) == 0
    (manifest,) = tmp_path.glob("*.tar.json")
    _forget(node, str(built["image_id"]))
    monkeypatch.setenv("DOCKER_HOST", node.host)
    assert main(["import", str(manifest)]) == 0
    monkeypatch.delenv("DOCKER_HOST")
    assert (
        _docker(node.host, "image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
        == built["image_id"]
    )


def test_a_one_byte_corruption_fails_the_import_with_nothing_left_on_the_node(
    built: dict[str, object], exported: Path, node: NodeEngine, tmp_path: Path
) -> None:
    copied = corrupt_copy(exported, tmp_path)
    archive = tmp_path / json.loads(copied.read_text())["archive"]
    _forget(node, str(built["image_id"]))
    done = subprocess.run(
        [sys.executable, str(tmp_path / "imagebuild-import.pyz"), str(copied)],
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": node.host},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 7
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[-1].startswith(f"imagebuild-import: error: archive {archive}: sha256 mismatch (expected ")
    assert "copy it again from" in lines[-1]
    assert _docker(node.host, "image", "inspect", str(built["image_id"])).returncode != 0
    assert _docker(node.host, "image", "inspect", IMAGE).returncode != 0


def test_an_archive_of_another_image_is_refused_and_removed(
    world: World, built: dict[str, object], node: NodeEngine, tmp_path: Path
) -> None:
    donor = world.donor_image  # tiny (FROM scratch): its archive stands in for "some other image"
    assert main(["export", donor, "--output", str(tmp_path), "--compress", "gzip"]) == 0
    (manifest_path,) = tmp_path.glob("*.json")
    manifest = json.loads(manifest_path.read_text())
    donor_id = manifest["image_id"]
    manifest["image_id"] = built["image_id"]
    manifest_path.write_text(json.dumps(manifest))
    _forget(node, donor_id)
    _forget(node, str(built["image_id"]))
    done = subprocess.run(
        [sys.executable, str(tmp_path / "imagebuild-import.pyz"), str(manifest_path)],
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": node.host},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 7, done.stderr
    assert f"the engine loaded {donor_id}, but {manifest_path} says {built['image_id']}" in done.stderr
    assert _docker(node.host, "image", "inspect", donor_id).returncode != 0  # the failed load left nothing


def test_an_unknown_image_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "imagebuild-test-distribute/absent:nope", "--output", str(tmp_path)]) == 2
    assert main(["publish", "imagebuild-test-distribute/absent:nope", "-t", "127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert all("no image 'imagebuild-test-distribute/absent:nope'" in line for line in err)
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_registry_is_named(
    world: World, built: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["publish", world.donor_image, "-t", "127.0.0.1:9/imagebuild-test-distribute/x"]) == 8
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("imagebuild: error: push of 127.0.0.1:9/imagebuild-test-distribute/x:")
    assert "registry 127.0.0.1:9 is unreachable from the Docker engine" in err


def test_the_shipped_importer_names_a_missing_engine(exported: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(exported.parent / "imagebuild-import.pyz"), str(exported)],
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/docker.sock"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3
    assert done.stderr == (
        f"imagebuild-import: error: the Docker engine at unix://{tmp_path}/docker.sock did not answer GET "
        f"/info ([Errno 2] No such file or directory); start docker on this node, or point DOCKER_HOST at "
        "its engine\n"
    )


@pytest.fixture(scope="module")
def small_disk_node() -> Iterator[NodeEngine]:
    """A node whose engine's data root is a tmpfs of 256 MB: less than the sample image's layers."""
    if os.geteuid() != 0:
        skip_or_fail("a tmpfs for a node's data root needs root")
    engine = engines.node_engine(StateDir(sample_world_state_dir().resolve()), "small-disk")
    stop_engine(engine)  # one a killed session left running
    engine.data_root.mkdir(parents=True, exist_ok=True)
    if not engine.data_root.is_mount():
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "imagebuild-small-disk", str(engine.data_root)], check=True)
    try:
        ensure_engine(engine)
        yield engine
    finally:
        stop_engine(engine)
        subprocess.run(["umount", str(engine.data_root)], check=False)


def test_a_node_without_room_for_the_layers_fails_at_once_naming_itself_and_loads_nothing(
    exported: Path, small_disk_node: NodeEngine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layers = json.loads(exported.read_text())["layers"]
    needed = 2 * sum(layer["size"] for layer in layers)
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": small_disk_node.host}
    started = time.monotonic()
    done = run_shipped_importer(exported, env=env)
    refused_after = time.monotonic() - started
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()  # refused before "loading ...": nothing was read
    assert line.startswith(
        f"imagebuild-import: error: not enough disk on {socket.gethostname()} for this load: {small_disk_node.data_root} has 0.2"
    )
    assert f"needs {needed / 1e9:.2f} GB there ({needed / 2e9:.2f} GB of layers, twice in {small_disk_node.data_root}: the engine's copy" in line
    assert _docker(small_disk_node.host, "image", "ls", "--all", "--quiet").stdout == ""

    monkeypatch.setenv("DOCKER_HOST", small_disk_node.host)  # imagebuild's own import: the same check
    assert main(["import", str(exported)]) == 1
    assert capsys.readouterr().err.count("not enough disk on") == 1

    # Without the check, the engine fails the same load with its own words, later.
    started = time.monotonic()
    unchecked = run_shipped_importer(exported, env={**env, "IMAGEBUILD_IMPORT_ROOM": "off"})
    failed_after = time.monotonic() - started
    assert unchecked.returncode == 3
    assert "no space left on device" in unchecked.stderr
    print(f"refused in {refused_after:.2f}s; unchecked, the engine failed after {failed_after:.2f}s")


# A shell without job control starts background jobs with SIGINT ignored, and Python leaves an
# ignored SIGINT ignored: the export gets Python's usual Ctrl-C handler, as from a terminal.
AS_FROM_A_TERMINAL = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from imagebuild.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_export_leaves_nothing_that_looks_complete(
    built: dict[str, object], tmp_path: Path, signum: signal.Signals
) -> None:
    export = subprocess.Popen(
        [sys.executable, "-c", AS_FROM_A_TERMINAL, "export", IMAGE, "--output", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".*.tmp")):  # the archive is being written
        assert export.poll() is None, export.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    export.send_signal(signum)
    _, err = export.communicate(timeout=120)
    assert export.returncode == 130, err
    assert err.strip().splitlines()[-1] == "imagebuild: interrupted"
    assert list(tmp_path.iterdir()) == []
