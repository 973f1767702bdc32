"""Fixtures for verify's tests: the Docker engine, a good image and broken ones."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.interface import Engine
from imagebuild.project import find_project
from imagebuild.verify.expectations import build_expectations
from sampleworld.layout import BASE_REPOSITORY
from tests.prerequisites import skip_or_fail
from tests.verify.verify_support import (
    REPO,
    GoodImage,
    build,
    context_tar,
    dockerfile,
    good_files,
    good_labels,
    write_pins,
)

# What the engine says when an image lacks the command it was asked to run.
NO_EXECUTABLE = "executable file not found"
# Local images with python3 >= 3.11 (the launcher needs tomllib), best first: the sample world's.
BASE_CANDIDATES = ("sampleworld/base:", f"{BASE_REPOSITORY}:ci_base-")
PY_PROBE = (
    "import site, sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}', site.getsitepackages()[0])"
)


@pytest.fixture
def k3_pins(tmp_path: Path) -> Path:
    return write_pins(tmp_path / "pins.toml")


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    """verify finds stages/ and constraints/ from the working directory, as the CLI does."""
    monkeypatch.chdir(REPO)
    return REPO


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    import docker

    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except docker.errors.DockerException as e:
        skip_or_fail(f"no Docker engine answers ({e}); start one with `bash scripts/ensure-docker.sh`")
    yield client
    client.close()


@pytest.fixture(scope="session")
def engine(docker_client: Any) -> Engine:
    from imagebuild.engine.docker import DockerEngine

    return DockerEngine.from_env()


def _find_base(client: Any) -> tuple[str, str, str] | None:
    """(image, python major.minor, site-packages) of the first local candidate base with python3 >= 3.11."""
    forced = os.environ.get("IMAGEBUILD_TEST_BASE")
    tags = [forced] if forced else sorted(
        (tag for image in client.images.list() for tag in image.tags if tag.startswith(BASE_CANDIDATES)),
        key=lambda tag: next(i for i, c in enumerate(BASE_CANDIDATES) if tag.startswith(c)),
    )  # fmt: skip
    import docker

    for tag in tags:
        try:
            out = client.containers.run(
                tag, ["python3", "-c", PY_PROBE], entrypoint=[], remove=True, network_mode="none"
            )
        except docker.errors.ContainerError:
            continue  # it ran, and its python3 is not usable: not a base, try the next
        except docker.errors.APIError as e:
            if NO_EXECUTABLE in str(e):
                continue  # the image has no python3: not a base
            # The engine could not run a container at all (a broken default bridge, a full disk...):
            # that is the engine's failure, not a missing base, and never a reason to skip.
            pytest.fail(f"the Docker engine could not run a container of {tag}: {e}", pytrace=False)
        version, site_packages = out.decode().split()
        if tuple(int(x) for x in version.split(".")) >= (3, 11):
            return tag, version, site_packages
    return None


@pytest.fixture(scope="session")
def good_image(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoodImage]:
    """IMAGEBUILD_TEST_IMAGE (with IMAGEBUILD_TEST_PINS, default pins.toml) or a small synthetic image
    that satisfies every check for a pins file generated here."""
    inputs_dir = tmp_path_factory.mktemp("good")
    given = os.environ.get("IMAGEBUILD_TEST_IMAGE")
    if given:
        pins = Path(os.environ.get("IMAGEBUILD_TEST_PINS", str(REPO / "pins.toml"))).resolve()
        inputs = find_project(REPO, pins).load("gfx942")
        yield GoodImage(
            image=given, pins=pins, expectations=build_expectations(inputs, image=given), synthetic=False
        )
        return
    found = _find_base(docker_client)
    if found is None:
        skip_or_fail(
            "no base image with python3 >= 3.11 in the local Docker engine (looked for "
            f"{', '.join(c + '*' for c in BASE_CANDIDATES)}): run `python -m sampleworld up`, or set "
            "IMAGEBUILD_TEST_IMAGE (+ IMAGEBUILD_TEST_PINS) or IMAGEBUILD_TEST_BASE"
        )
    base, python, site_packages = found
    pins = write_pins(inputs_dir / "pins.toml", python=python, site_packages=site_packages)
    exp = build_expectations(find_project(REPO, pins).load("gfx942"), image="synthetic")
    image_id = build(
        docker_client, context_tar(dockerfile(base, exp), good_files(exp)), labels=good_labels(exp)
    )
    try:
        yield GoodImage(image=image_id, pins=pins, expectations=exp, synthetic=True)
    finally:
        with contextlib.suppress(Exception):
            docker_client.images.remove(image_id, force=True)


@pytest.fixture
def derived_image(docker_client: Any, good_image: GoodImage) -> Iterator[Callable[..., str]]:
    """Build FROM the good image with extra Dockerfile lines; removed after the test."""
    built: list[str] = []

    def derive(
        lines: str, *, buildargs: dict[str, str] | None = None, files: dict[str, bytes] | None = None
    ) -> str:
        """``files`` land in the context under rootfs/ for the lines to COPY."""
        text = f"FROM {good_image.image}\n{lines}\n"
        context = context_tar(text, {k: (v, 0o644) for k, v in (files or {}).items()})
        image_id = build(docker_client, context, buildargs=buildargs)
        built.append(image_id)
        return image_id

    yield derive
    for image_id in built:
        with contextlib.suppress(Exception):
            # noprune: removing a child must not take the (untagged) good image with it.
            docker_client.images.remove(image_id, force=True, noprune=True)
