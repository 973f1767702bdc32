"""Issue: setuptools<80 must hold in every pip build, whatever pip the base ships.

Sample bases with pip 23.0.1 (Debian's), 25.3 and 26.3 build the full image:
step 4 (constraint probe + the MoRI stand-in, an sdist whose build fails on
setuptools >= 80) and step 7 (the vLLM-style --no-build-isolation build) pass
on each. With the mechanism switched off the same build fails at step 4 with
setuptools 80.x in the message, so these tests are known to be able to fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.build.core import BuildOptions, build_image, prepare_build
from imagebuild.build.progress import BuildProgress
from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import BuildError
from imagebuild.inputs.python_lock import require_python_lock
from imagebuild.project import find_project
from imagebuild.render import ConstraintMode
from sampleworld.world import World
from tests.integration.image_support import CHECKOUT

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PIP_VERSIONS = ("23.0.1", "25.3", "26.3")


def derived_base(world: World, tag: str, requirement: str) -> str:
    """The sample base with ``requirement`` installed, pushed to the sample registry; returns its tag."""
    ref = f"{world.base_image.rsplit(':', 1)[0]}:{tag}"
    dockerfile = f"FROM {world.base_image}\nRUN python3 -m pip install --no-cache-dir {requirement}\n"
    subprocess.run(
        ["docker", "build", "--quiet", "--network", "host", "-t", ref, "-"],
        input=dockerfile,
        text=True,
        check=True,
        capture_output=True,
    )
    subprocess.run(["docker", "push", "--quiet", ref], check=True, capture_output=True)
    return tag


@pytest.fixture(scope="module", params=PIP_VERSIONS)
def pins_for_pip(
    request: pytest.FixtureRequest, world: World, locked_pins: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    version: str = request.param
    tag = derived_base(world, f"pip-{version}", f"pip=={version}")
    return version, pins_for_base(world, tag, tmp_path_factory.mktemp(f"pip-{version}"))


def pins_for_base(world: World, tag: str, directory: Path) -> Path:
    """The sample pins with the base image tag replaced, locked by `imagebuild lock`."""
    path = directory / "pins.toml"
    text = world.pins_path.read_text().replace('tag = "ci_base-', f'tag = "{tag}" # was ci_base-', 1)
    path.write_text(text)
    assert main(["lock", "--pins", str(path)]) == 0
    return path




def build(pins: Path, mode: ConstraintMode, tmp_path: Path, engine: DockerEngine) -> str:
    project = find_project(Path(__file__).resolve().parents[2], pins)
    options = BuildOptions(
        arch="gfx942",
        # Per checkout: several checkouts share one Docker engine, and a shared tag would be overwritten.
        tag=f"imagebuild-test/constraints:{mode.value}-{CHECKOUT}",
        network="host",
        record_path=tmp_path / "record.json",
        log_path=tmp_path / "build.log",
        constraint_mode=mode,
        normalize=False,  # these check the constraint; test_reproducible checks normalisation
    )
    progress = BuildProgress(sys.stdout)  # shown by pytest when the test fails
    record = build_image(prepare_build(project, project.load("gfx942"), options), engine, progress=progress)
    return record.tag


def test_constraint_holds_on_every_pip(
    pins_for_pip: tuple[str, Path], tmp_path: Path, engine: DockerEngine
) -> None:
    version, pins = pins_for_pip
    tag = build(pins, ConstraintMode.ON, tmp_path, engine)
    code, versions = engine.run(tag, ["cat", "/app/versions.txt"])
    assert code == 0
    # The build constraint: constraints/ plus the exact setuptools pylock.toml locks for isolated builds.
    assert (
        f"BUILD_SETUPTOOLS=79.0.1 (isolated build, pip {version}, constraint setuptools<80,==79.0.1)"
        in versions
    )
    assert "VLLM_REF=" in versions


def test_without_the_mechanism_the_mori_step_fails(
    pins_for_pip: tuple[str, Path], tmp_path: Path, engine: DockerEngine
) -> None:
    _, pins = pins_for_pip
    with pytest.raises(BuildError) as failure:
        build(pins, ConstraintMode.OFF, tmp_path, engine)
    message = str(failure.value)
    assert "step 4/18 'Constraint proof, then MoRI from source' failed" in message
    assert "setuptools 80." in message


def test_a_base_with_setuptools_80_is_fixed_before_the_no_isolation_build(
    world: World, tmp_path: Path, engine: DockerEngine
) -> None:
    """The vLLM step builds with the image's own setuptools: the guard replaces it with the locked one.

    Exactly the version pylock.toml locks (group guard), sha256-checked, not whatever satisfies
    setuptools<80 that day; recorded in versions.txt, where verify checks it.
    """
    tag = derived_base(world, "setuptools-80", "setuptools==80.9.0")
    version = ["python3", "-c", "import setuptools; print(setuptools.__version__)"]
    base = f"{world.base_image.rsplit(':', 1)[0]}:{tag}"
    assert engine.run(base, version) == (0, "80.9.0\n")
    pins = pins_for_base(world, tag, tmp_path)
    locked = next(p for p in require_python_lock(pins.with_name("pylock.toml")).group("guard"))
    assert locked.name == "setuptools"
    image = build(pins, ConstraintMode.ON, tmp_path, engine)
    assert engine.run(image, version) == (0, f"{locked.version}\n")
    code, versions = engine.run(image, ["cat", "/app/versions.txt"])
    assert code == 0
    assert (
        f"GUARD_SETUPTOOLS={locked.version} (locked, sha256-checked; replaced the image's 80.9.0, "
        "which violates setuptools<80)"
    ) in versions
    assert main(["verify", image, "--pins", str(pins)]) == 0
