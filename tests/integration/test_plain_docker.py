"""The rendered context builds with plain `docker build` the image `imagebuild build` builds.

`imagebuild render --output DIR` writes the context of the sample pins; the docker CLI builds
that directory with the classic builder and, where this machine can, with BuildKit. Each
image has the same /app/versions.txt, the same labels (given the build args imagebuild
passes) and the same file tree: every path with its type, mode and size, and the content
of every file but the container's own hosts files. Not the mtimes: only `imagebuild build`
normalises those (imagebuild.normalize); the content needs no normalising, since the Dockerfile
declares SOURCE_DATE_EPOCH and the steps leave no logs or caches behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.inputs.layout import CHECKOUT_LABEL_ARGS, VERSIONS_FILE
from tests.integration.image_support import CHECKOUT
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

TAG = f"imagebuild-test/plain-docker:{{}}-{CHECKOUT}"

# Every path of the image with its type, mode, size and (for files) sha256; run by the image's python.
MANIFEST_SCRIPT = """
import hashlib, json, os, stat
out = {}
for top, dirs, files in os.walk("/"):
    dirs[:] = sorted(d for d in dirs if os.path.join(top, d) not in ("/proc", "/sys", "/dev"))
    for name in sorted(dirs + files):
        path = os.path.join(top, name)
        st = os.lstat(path)
        mode = oct(st.st_mode & 0o7777)
        if stat.S_ISLNK(st.st_mode):
            out[path] = ["link", mode, os.readlink(path)]
        elif stat.S_ISDIR(st.st_mode):
            out[path] = ["dir", mode]
        else:
            with open(path, "rb") as f:
                out[path] = ["file", mode, st.st_size, st.st_uid, st.st_gid, hashlib.sha256(f.read()).hexdigest()]
print(json.dumps(out))
"""
# The files the engine writes into each container it runs (their path, mode and size are still
# compared). Byte-code, apt's and dpkg's logs and caches and ldconfig's aux-cache are compared too:
# SOURCE_DATE_EPOCH makes pip write hash-checked .pyc files, and step 4 removes the rest.
STAMPED_FILES = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")


def stamped(path: str) -> bool:
    return path in STAMPED_FILES


def manifest(engine: DockerEngine, image: str) -> dict[str, list[object]]:
    code, out = engine.run(image, ["python3", "-c", MANIFEST_SCRIPT])
    assert code == 0, out[-2000:]
    entries: dict[str, list[object]] = json.loads(out)
    return {
        path: entry[:-1] if stamped(path) and entry[0] == "file" else entry for path, entry in entries.items()
    }


def docker_build(cli: str, context: Path, tag: str, build_args: dict[str, str], *, buildkit: bool) -> str:
    """Build ``context`` with the docker CLI, as a user would; returns the image ID."""
    argv = [cli, "build", "--network", "host", "--no-cache", "-t", tag]
    argv += [f"--build-arg={name}={value}" for name, value in build_args.items()]
    env = {**os.environ, "DOCKER_BUILDKIT": "1" if buildkit else "0"}
    done = subprocess.run(
        [*argv, str(context)], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    inspect = subprocess.run(
        [cli, "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True, check=False
    )
    return inspect.stdout.strip()


def buildkit_cli() -> tuple[str | None, str]:
    """A docker CLI that can run a BuildKit build here, or None and why not.

    Clients from 23.0 on build with BuildKit only through the buildx plugin; older clients
    carry BuildKit themselves and use the engine's.
    """
    found: list[str] = []
    for cli in dict.fromkeys(
        filter(None, [shutil.which("docker"), "/usr/bin/docker", "/usr/local/bin/docker"])
    ):
        if not Path(cli).is_file():
            continue
        if subprocess.run([cli, "buildx", "version"], capture_output=True, check=False).returncode == 0:
            return cli, "buildx"
        version = subprocess.run(
            [cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True, check=False
        ).stdout.strip()
        found.append(f"{cli} {version or '?'}")
        if version and int(version.split(".")[0]) < 23:
            return cli, f"client {version}, BuildKit built in"
    return None, "no buildx plugin and no docker client older than 23.0 (" + ", ".join(found) + ")"


@pytest.fixture(scope="module")
def imagebuild_image(locked_pins: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    record = tmp_path_factory.mktemp("ib") / "record.json"
    tag = TAG.format("imagebuild")
    argv = ["build", "--pins", str(locked_pins), "--network", "host", "--tag", tag, "--record", str(record)]
    assert main(argv) == 0
    result: dict[str, object] = json.loads(record.read_text())
    return result


@pytest.fixture(scope="module")
def context_dir(locked_pins: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("ctx") / "gfx942"
    assert main(["render", "--pins", str(locked_pins), "--output", str(directory)]) == 0
    return directory


def label_build_args(labels: dict[str, str]) -> dict[str, str]:
    """What docs/build-context.md tells a plain-docker user to pass: the checkout's facts as build args."""
    return {arg: labels[label] for label, arg in CHECKOUT_LABEL_ARGS.items()}


def test_plain_docker_reuses_imagebuilds_layers_one_context_not_two(
    imagebuild_image: dict[str, object], context_dir: Path
) -> None:
    """Same files, same instructions: the classic builder's cache gives back the very image imagebuild
    built, before it normalised its timestamps (kept as TAG-cache for that cache)."""
    normalization = imagebuild_image["normalization"]
    assert isinstance(normalization, dict)
    labels = imagebuild_image["labels"]
    assert isinstance(labels, dict)
    argv = ["docker", "build", "--quiet", "--network", "host", "-t", TAG.format("cached")]
    argv += [f"--build-arg={k}={v}" for k, v in label_build_args(labels).items()]
    done = subprocess.run(
        [*argv, str(context_dir)],
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == normalization["unnormalized_id"]


@pytest.fixture(scope="module")
def reference_manifest(imagebuild_image: dict[str, object], engine: DockerEngine) -> dict[str, list[object]]:
    return manifest(engine, str(imagebuild_image["image_id"]))


@pytest.fixture(scope="module")
def plain_classic_image(imagebuild_image: dict[str, object], context_dir: Path) -> str:
    """The rendered context built from scratch by the docker CLI with the classic builder."""
    cli = shutil.which("docker")
    assert cli, "the docker CLI is needed"
    labels = imagebuild_image["labels"]
    assert isinstance(labels, dict)
    return docker_build(cli, context_dir, TAG.format("classic"), label_build_args(labels), buildkit=False)


@pytest.mark.slow
@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_plain_docker_build_of_the_directory_gives_the_same_image(
    imagebuild_image: dict[str, object],
    reference_manifest: dict[str, list[object]],
    engine: DockerEngine,
    builder: str,
    request: pytest.FixtureRequest,
) -> None:
    labels = imagebuild_image["labels"]
    assert isinstance(labels, dict)
    reference = str(imagebuild_image["image_id"])
    if builder == "classic":
        image = request.getfixturevalue("plain_classic_image")
    else:
        found, how = buildkit_cli()
        if found is None:
            skip_or_fail(f"BuildKit cannot run on this machine: {how}")
        context_dir = request.getfixturevalue("context_dir")
        image = docker_build(found, context_dir, TAG.format(builder), label_build_args(labels), buildkit=True)
    assert image
    assert image != reference  # built from scratch (--no-cache), not taken from the cache
    built, expected = engine.inspect_image(image), engine.inspect_image(reference)
    assert built.labels == expected.labels
    assert engine.run(image, ["cat", VERSIONS_FILE]) == engine.run(reference, ["cat", VERSIONS_FILE])
    assert (built.env, built.entrypoint, built.workdir) == (
        expected.env,
        expected.entrypoint,
        expected.workdir,
    )
    theirs, ours = manifest(engine, image), reference_manifest
    differing = sorted(path for path in theirs.keys() | ours.keys() if theirs.get(path) != ours.get(path))
    assert differing == [], [(p, theirs.get(p), ours.get(p)) for p in differing[:10]]



@pytest.mark.slow
def test_a_cached_build_after_a_plain_one_gives_the_same_identity(
    imagebuild_image: dict[str, object], plain_classic_image: str, locked_pins: Path, tmp_path: Path
) -> None:
    """The docker CLI sends the context's real mtimes, imagebuild's context tar 0: whichever chain the
    classic builder's cache takes (the newest: the plain build's), the normalised image is the same, the
    COPY layers' entries and the untouched parents above them all getting their step's epoch."""
    record = tmp_path / "record.json"
    argv = ["build", "--pins", str(locked_pins), "--network", "host", "--tag", TAG.format("after-plain")]
    assert main([*argv, "--record", str(record)]) == 0
    again = json.loads(record.read_text())
    # Built on the plain build's layers (the labels imagebuild passes make one image more on top).
    assert parent(again["normalization"]["unnormalized_id"]) == parent(plain_classic_image)
    assert again["image_id"] == imagebuild_image["image_id"]


def parent(image: str) -> str:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Parent}}", image], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()
