"""The disk an engine keeps for N GB of build layers, with the built image kept as the layer cache
(`imagebuild build`'s default) and removed once normalised (`--drop-cache-image`), on each engine
of the engine matrix.

Per engine: the file system's used bytes (statvfs of the engine's data root, after `sync`) before a
classic `docker build --no-cache` of ``FROM <the sample base pin>`` plus ``RUN head -c N
/dev/urandom > /blob`` (bench_stage_size's step), after it, after its normalisation (the normalised
image loaded beside the built one), and after `docker rmi` of the built image by its name, which is
what --drop-cache-image does. Printed: each growth over the start and its ratio to the built
layers' own growth (the goal of issue 27: <= 1.1x).

    python benchmarks/bench_drop_cache.py [--size 1] [--engines main,docker26-overlay2,docker26-containerd,podman]

Needs the engines (scripts/ensure-docker.sh; `python -m sampleworld engines up`) and the sample
world, as bench_stage_size.py does; nothing else writing to the disk while it runs. ``podman`` is
the sample world's Podman service (sampleworld.podman_engine), started for the run unless it is
running, and stopped again if it was started here; it builds with buildah, whose intermediate
images are counted like the classic builder's. Removes every image it made.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_stage_size as stage  # noqa: E402  # the same step and the same normalisation

from sampleworld import engine_matrix, podman_engine  # noqa: E402
from sampleworld.layout import StateDir  # noqa: E402

TAG = f"bench-drop/n{os.getpid()}"


def used_bytes(path: Path) -> int:
    """The file system's used bytes once the engine's writes have settled (containerd collects
    unreferenced content in the background)."""
    last = -1
    for _ in range(20):
        subprocess.run(["sync"], check=True)
        stats = os.statvfs(path)
        used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
        if abs(used - last) < 1_000_000:
            return used
        last = used
        time.sleep(0.5)
    return last


def measure(name: str, host: str, data_root: Path, base: str, size: float) -> tuple[float, float, float]:
    built, normalized = f"{TAG}:built", f"{TAG}:normalized"
    with tempfile.TemporaryDirectory(prefix="bench-drop-") as work:
        context = Path(work) / "context.tar"
        context.write_bytes(stage.context(base, size))
        start = used_bytes(data_root)
        try:
            with context.open("rb") as stdin:
                stage.run(["docker", "build", "-q", "--no-cache", "--network", "none", "-t", built, "-"], host, stdin)
            after_build = used_bytes(data_root)
            stage.normalise(host, stage.image_id(host, built), base, Path(work))  # tags TAG:normalized
            after_normalise = used_bytes(data_root)
            stage.docker(host, "rmi", built)  # --drop-cache-image: the built image by its name
            after_drop = used_bytes(data_root)
        finally:
            subprocess.run(
                ["docker", "rmi", built, normalized], env={**os.environ, "DOCKER_HOST": host},
                capture_output=True, check=False,
            )  # fmt: skip
    grown = [(after - start) / 1e6 for after in (after_build, after_normalise, after_drop)]
    print(
        f"| {name} | {size:g} GB | {grown[0]:.0f} MB | {grown[1]:.0f} MB ({grown[1] / grown[0]:.2f}x) "
        f"| {grown[2]:.0f} MB ({grown[2] / grown[0]:.2f}x) |",
        flush=True,
    )
    return grown[0], grown[1], grown[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=1.0, help="GB of the step (default 1)")
    parser.add_argument("--engines", default=",".join(["main", *(s.name for s in engine_matrix.DOCKER26)]))
    args = parser.parse_args()
    state_env = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")
    state = Path(state_env) if state_env else HERE.parent / ".sampleworld"
    hosts = {e.name: e.docker_host for e in engine_matrix.status(state) if e.version}
    wanted = args.engines.split(",")
    missing = [n for n in wanted if n not in hosts and n != podman_engine.NAME]
    if missing:
        print(f"engines not running: {', '.join(missing)} (python -m sampleworld engines up)", file=sys.stderr)
        return 2
    world = StateDir(state.resolve())
    started_podman = podman_engine.NAME in wanted and podman_engine.ensure_podman(world)
    if podman_engine.NAME in wanted:
        hosts[podman_engine.NAME] = podman_engine.podman_engine(world).host
    try:
        return _measure_all(state, hosts, wanted, args.size)
    finally:
        if started_podman:
            podman_engine.stop_podman(world)


def _measure_all(state: Path, hosts: dict[str, str], wanted: list[str], size: float) -> int:
    base = stage.base_reference(state)
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; base {base}")
    print("| engine | step | built | normalised, built kept (default) | built removed (--drop-cache-image) |")
    print("|---|---|---|---|---|")
    for name in wanted:
        host = hosts[name]
        root = Path(stage.docker(host, "info", "--format", "{{.DockerRootDir}}").strip())
        stage.pull_if_missing(host, base)
        measure(name, host, root, base, size)
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
