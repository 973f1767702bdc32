"""Build the sample-world image with `imagebuild build` and with plain `docker build`.

Same rendered Dockerfile, same context, same classic builder (DOCKER_BUILDKIT=0),
cold (--no-cache) and fully cached, and prints the times and the ratios. Needs
the Docker engine (scripts/ensure-docker.sh); brings the sample world up.

    python benchmarks/bench_build.py
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagebuild.context import context_files, make_context  # noqa: E402
from imagebuild.project import find_project  # noqa: E402
from imagebuild.render import RenderOptions, render  # noqa: E402
from sampleworld.world import up  # noqa: E402


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> int:
    world = up()
    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    pins = work / "pins.toml"
    shutil.copy(world.pins_path, pins)
    subprocess.run([sys.executable, "-m", "imagebuild", "lock", "--pins", str(pins)], check=True, cwd=REPO)

    project = find_project(REPO, pins)
    inputs = project.load("gfx942")
    dockerfile = render(inputs.definition, inputs.pins, inputs.arch, inputs.constraints, RenderOptions())
    context_dir = work / "context"
    with tarfile.open(fileobj=io.BytesIO(make_context(context_files(dockerfile, inputs)))) as tar:
        tar.extractall(context_dir, filter="data")

    ib = [
        sys.executable,
        "-m",
        "imagebuild",
        "build",
        "--pins",
        str(pins),
        "--network",
        "host",
        "--tag",
        "bench/ib:gfx942",
    ]
    plain = ["docker", "build", "--network", "host", "-t", "bench/plain:gfx942", str(context_dir)]
    classic = {**os.environ, "DOCKER_BUILDKIT": "0"}
    results = {
        "imagebuild cold": timed([*ib, "--no-cache"]),
        "docker build cold": timed([*plain[:2], "--no-cache", *plain[2:]], classic),
        "imagebuild cached": timed(ib),
        "docker build cached": timed(plain, classic),
    }
    for name, seconds in results.items():
        print(f"{name:<22} {seconds:7.2f} s")
    print(
        f"cold ratio   imagebuild / docker build = {results['imagebuild cold'] / results['docker build cold']:.2f}"
    )
    print(
        f"cached ratio imagebuild / docker build = {results['imagebuild cached'] / results['docker build cached']:.2f}"
    )
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
