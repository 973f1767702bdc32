"""Podman as the engine: bookworm's podman 4.3.1 behind its Docker-compatible API (`podman system service`).

The session's sample image (built on the main engine) is exported, imported into Podman (by its
identity: Podman names an image by its config digest, as a graph-driver store does), verified there,
exported from Podman and imported verified on the containerd-store engine, and published from Podman
to the sample registry, where the pushed digest pulls on the main engine as the same identity.

Not built here: Podman's compat /build runs buildah, which gives the same inputs another image (no
layer for WORKDIR, its own history and label; README "Podman"), and a cold build costs minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sampleworld.engine_matrix import MatrixEngine
from sampleworld.world import World
from tests import REPO
from tests.integration.scratch import module_scratch

pytestmark = pytest.mark.docker



def imagebuild(docker_host: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI against one engine, in a process of its own (its DOCKER_HOST is not this process's)."""
    env = {**os.environ, "DOCKER_HOST": docker_host}
    return subprocess.run(
        [sys.executable, "-m", "imagebuild", *argv], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )


def remove(docker_host: str, image: str) -> None:
    subprocess.run(["docker", "-H", docker_host, "image", "rm", "--force", image], capture_output=True, check=False)


@pytest.fixture(scope="module")
def main_export(
    sample_image: dict[str, object], request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, object]]:
    with module_scratch(request, tmp_path_factory, "export-main") as output:
        done = imagebuild("unix:///var/run/docker.sock", "export", str(sample_image["tag"]), "-o", str(output))
        assert done.returncode == 0, done.stderr
        (path,) = output.glob("*.json")
        yield {**json.loads(path.read_text()), "path": str(path)}


@pytest.fixture(scope="module")
def on_podman(podman_docker_host: str, main_export: dict[str, object]) -> Iterator[dict[str, object]]:
    """The main engine's archive imported into Podman (the image removed there first): import's JSON.
    Removed again at the end: no later module reads Podman's copy, and it is 1 GB of the tier's disk."""
    remove(podman_docker_host, str(main_export["image_id"]))
    done = imagebuild(podman_docker_host, "import", str(main_export["path"]), "--json")
    assert done.returncode == 0, done.stderr
    assert "free space not checked" not in done.stderr  # its copy directory and storage were, first
    document: dict[str, object] = json.loads(done.stdout)
    yield document
    remove(podman_docker_host, str(main_export["image_id"]))


def test_an_archive_from_docker_imports_verified_on_podman_under_its_identity(
    on_podman: dict[str, object], main_export: dict[str, object], sample_image: dict[str, object]
) -> None:
    identity = sample_image["image_id"]
    assert (on_podman["image_id"], on_podman["engine_id"], on_podman["already_present"]) == (identity, identity, False)
    assert main_export["image_id"] == identity


def test_verify_passes_on_podman_and_names_it(
    on_podman: dict[str, object], podman_docker_host: str, locked_pins: Path
) -> None:
    done = imagebuild(podman_docker_host, "verify", str(on_podman["image_id"]), "--pins", str(locked_pins))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "on Podman 4.3.1 (Docker API 1.41)" in done.stdout + done.stderr


def test_podmans_export_imports_verified_on_the_containerd_store(
    on_podman: dict[str, object],
    podman_docker_host: str,
    docker_engine_matrix: list[MatrixEngine],
    tmp_path: Path,
) -> None:
    identity = str(on_podman["image_id"])
    done = imagebuild(podman_docker_host, "export", identity, "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (path,) = tmp_path.glob("*.json")
    manifest = json.loads(path.read_text())
    assert manifest["image_id"] == identity
    node = next(e for e in docker_engine_matrix if e.name == "docker26-containerd")
    remove(node.docker_host, manifest["manifest_digest"])
    done = imagebuild(node.docker_host, "import", str(path), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["image_id"], document["engine_id"]) == (identity, manifest["manifest_digest"])


def test_a_digest_published_from_podman_pulls_as_the_identity_on_docker(
    on_podman: dict[str, object], podman_docker_host: str, sample_world: World
) -> None:
    identity = str(on_podman["image_id"])
    repository = f"{sample_world.registry}/imagebuild-test-engines/podman"
    done = imagebuild(podman_docker_host, "publish", identity, "-t", repository, "--json")
    assert done.returncode == 0, done.stderr
    published = json.loads(done.stdout)
    assert published["image_id"] == identity
    pulled = subprocess.run(["docker", "pull", published["reference"]], capture_output=True, text=True, check=False)
    assert pulled.returncode == 0, pulled.stderr
    inspected = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", published["reference"]],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert inspected.stdout.strip() == identity
