"""The disk an engine keeps for N GB of build layers, with the built image kept as the layer cache
(`imagebuild build`'s default), replaced by a layer cache image (`--cache-normalized`) or removed
(`--drop-cache-image`) once normalised, on each engine of the engine matrix; and the rebuild of the
last step that the cache image serves.

Per engine: the file system's used bytes (statvfs of the engine's data root, after `sync`) before a
classic `docker build --no-cache` of ``FROM <the sample base pin>`` plus ``RUN head -c N
/dev/urandom > /blob`` (bench_stage_size's step), after it, after its normalisation (the normalised
image loaded beside the built one), and after the built image is removed: by its name, which is
what --drop-cache-image does, or, where the store allows a cache image (a graph-driver store), once
the cache image is loaded in its place, as --cache-normalized does (the two differ by a config of
a few KB). Printed: each growth over the start and its ratio to the built layers' own growth (the
goal of issue 27: <= 1.1x). Then, with the cache image: `docker build --cache-from` of the same
step with another NONCE (the N GB step taken from the cache image, the last step made again), and
its normalisation with the first one's notes (the N GB layer taken as it is).

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
    built, normalized, cache, rebuilt = (f"{TAG}:{kind}" for kind in ("built", "normalized", "cache", "rebuilt"))
    rebuild, made = "", []  # made: the normalised images (a rebuild's normalisation takes over their tag)
    with tempfile.TemporaryDirectory(prefix="bench-drop-") as work:
        context = Path(work) / "context.tar"
        context.write_bytes(stage.context(base, size))
        start = used_bytes(data_root)
        try:
            with context.open("rb") as stdin:
                stage.run(["docker", "build", "-q", "--no-cache", "--network", "none", "-t", built, "-"], host, stdin)
            after_build = used_bytes(data_root)
            built_id = stage.image_id(host, built)
            result = stage.normalise(host, built_id, base, Path(work))  # tags TAG:normalized
            made.append(str(result["engine_id"]))
            after_normalise = used_bytes(data_root)
            cache_id = cache_image(host, built_id, str(result["engine_id"]), cache)
            stage.docker(host, "rmi", built)  # by its name, as --drop-cache-image does
            after_drop = used_bytes(data_root)
            if cache_id:
                rebuild = rebuild_from(
                    host, context, cache=cache, rebuilt=rebuilt, base=base, work=Path(work), notes=result["layers"]
                )
        finally:
            subprocess.run(
                ["docker", "rmi", built, normalized, f"{stage.TAG}:normalized", cache, rebuilt, *made],
                env={**os.environ, "DOCKER_HOST": host},
                capture_output=True, check=False,
            )  # fmt: skip
    grown = [(after - start) / 1e6 for after in (after_build, after_normalise, after_drop)]
    kept = "--cache-normalized (a cache image in its place)" if cache_id else "--drop-cache-image (no cache image here)"
    print(
        f"| {name} | {size:g} GB | {grown[0]:.0f} MB | {grown[1]:.0f} MB ({grown[1] / grown[0]:.2f}x) "
        f"| {grown[2]:.0f} MB ({grown[2] / grown[0]:.2f}x), {kept} | {rebuild or 'n/a'} |",
        flush=True,
    )
    return grown[0], grown[1], grown[2]


def cache_image(host: str, built_id: str, normalized_id: str, tag: str) -> str:
    """The layer cache image of the build, loaded and tagged ``tag``, where the store allows one; else ""."""
    os.environ["DOCKER_HOST"] = host
    from imagebuild.engine.docker import DockerEngine
    from imagebuild.normalize.after_build import keeps_cache_images
    from imagebuild.normalize.cache_image import load_cache_image

    engine = DockerEngine.from_env()
    try:
        if not keeps_cache_images(engine):
            return ""
        made = load_cache_image(engine, built_id, normalized_id)
        engine.tag(made, tag)
        return made
    finally:
        engine.close()
        del os.environ["DOCKER_HOST"]


def rebuild_from(host: str, context: Path, *, cache: str, rebuilt: str, base: str, work: Path, notes: object) -> str:
    """The last step built again with the N GB step from the cache image, and normalised: what it took."""
    with context.open("rb") as stdin:
        argv = ["docker", "build", "-q", "--network", "none", "--cache-from", cache, "--build-arg", "NONCE=2"]
        seconds = stage.run([*argv, "-t", rebuilt, "-"], host, stdin)
    started = time.monotonic()
    again = stage.normalise(host, stage.image_id(host, rebuilt), base, work, previous=notes, as_is=True)
    return (
        f"build {seconds:.1f} s, normalisation {time.monotonic() - started:.1f} s "
        f"({again['layers_reused']} taken as they were, {again['layers_rewritten']} rewritten)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=1.0, help="GB of the step (default 1)")
    parser.add_argument("--engines", default=",".join(["main", *(s.name for s in engine_matrix.MANAGED)]))
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
    print("| engine | step | built | normalised, built kept (default) | built removed | rebuild of the last step from the cache image |")
    print("|---|---|---|---|---|---|")
    for name in wanted:
        host = hosts[name]
        root = Path(stage.docker(host, "info", "--format", "{{.DockerRootDir}}").strip())
        stage.pull_if_missing(host, base)
        measure(name, host, root, base, size)
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
