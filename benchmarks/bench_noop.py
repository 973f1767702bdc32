"""A no-op rebuild: a fully cached `imagebuild build` (with normalisation, as the default) against a
cached plain `docker build` of the same context, run after run, median of N.

The first imagebuild build (not measured) makes the image, its normalised image and its record; every
measured one is a no-op that still asks the engine to build (its cache check) and reuses the
record's normalised image. The two tools alternate, so neither always runs on a warmer machine.
Beside the wall time, each run's CPU time (user + system of the process and its children, from
getrusage): on a machine other work keeps busy, the wall time grows with the load and the CPU time
much less, so it tells a change of the tool's own work apart from the machine's mood.
With --checkout DIR --python PY the imagebuild runs are another checkout's (the "before" number of a
change); the docker runs are the same. Prints every run, the medians, their ratio and the load.
Needs the Docker engine (scripts/ensure-docker.sh); brings the sample world up (the one
IMAGEBUILD_SAMPLEWORLD_STATE names, else the checkout's).

    python benchmarks/bench_noop.py [--runs 15] [--checkout DIR --python PY] [--cache-normalized]

With --cache-normalized the imagebuild builds keep the layer cache as a cache image
(imagebuild.normalize.cache_image): each no-op build gives that image back from its ``cache_from``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagebuild.build.checkout_labels import checkout_build_args, checkout_labels  # noqa: E402
from imagebuild.project import find_project  # noqa: E402
from sampleworld.world import up  # noqa: E402


def timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    # In the checkout measured: `python -m imagebuild` imports the package of its working directory.
    subprocess.run(argv, check=True, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load() -> str:
    return os.getloadavg().__repr__()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=15, help="measured no-op builds of each tool (default 15)"
    )
    parser.add_argument("--checkout", type=Path, default=REPO, help="the imagebuild checkout to measure")
    parser.add_argument("--python", default=sys.executable, help="the python that runs that checkout")
    parser.add_argument("--cache-normalized", action="store_true", help="imagebuild build --cache-normalized")
    args = parser.parse_args()
    checkout: Path = args.checkout.resolve()

    state = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")  # a shared sample world, as the tests take it
    world = up(Path(state) if state else None)
    work = Path(tempfile.mkdtemp(prefix="bench-noop-"))
    tag = f"bench-noop-{checkout.name}/ib:gfx942"
    plain_tag = f"bench-noop-{checkout.name}/plain:gfx942"
    try:
        pins = work / "pins.toml"
        shutil.copy(world.pins_path, pins)
        ib_base = [args.python, "-m", "imagebuild", "-C", str(checkout)]
        subprocess.run(
            [*ib_base, "lock", "--pins", str(pins)], check=True, cwd=checkout, stdout=subprocess.DEVNULL
        )
        context_dir = work / "context"
        render = [*ib_base, "render", "--pins", str(pins), "--output", str(context_dir)]
        subprocess.run(render, check=True, cwd=checkout, stdout=subprocess.DEVNULL)
        labels = checkout_build_args(checkout_labels(find_project(checkout, pins), "gfx942"))
        ib = [*ib_base, "build", "--pins", str(pins), "--network", "host", "--tag", tag]
        ib += ["--record", str(work / "record.json"), "--progress", "plain"]
        ib += ["--cache-normalized"] if args.cache_normalized else []
        plain = ["docker", "build", "--network", "host", "-t", plain_tag]
        plain += [f"--build-arg={name}={value}" for name, value in labels.items()]
        plain.append(str(context_dir))
        classic = {**os.environ, "DOCKER_BUILDKIT": "0"}
        # Bytecode caches present, as in an installed wheel, whatever PYTHONDONTWRITEBYTECODE says, and
        # kept outside the checkout measured (another worktree's files stay untouched): the first run
        # writes them.
        bytecode = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        bytecode["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        (
            timed(ib, bytecode, cwd=checkout),
            timed(plain, classic),
        )  # make the image and the record, warm both: not measured
        runs: dict[str, list[float]] = {"imagebuild build": [], "docker build": []}
        cpu: dict[str, list[float]] = {"imagebuild build": [], "docker build": []}
        print(f"load before: {load()}")
        for i in range(args.runs):
            pair = [("imagebuild build", ib, bytecode, checkout), ("docker build", plain, classic, REPO)]
            for name, argv, env, cwd in pair if i % 2 == 0 else pair[::-1]:
                wall, used = timed(argv, env, cwd)
                runs[name].append(wall)
                cpu[name].append(used)
        print(f"load after:  {load()}")
        medians = {name: statistics.median(times) for name, times in runs.items()}
        for name, times in runs.items():
            print(f"{name:<17} median {medians[name]:5.3f} s   runs: {' '.join(f'{t:.2f}' for t in times)}")
            print(f"{'':<17} CPU median {statistics.median(cpu[name]):5.3f} s")
        print("CPU: user + system time of the command and its children (docker build's: the CLI's, not the engine's)")
        print(
            f"no-op ratio imagebuild / docker build = {medians['imagebuild build'] / medians['docker build']:.2f}"
        )
    finally:
        images = [tag, f"{tag}-cache", plain_tag]
        subprocess.run(["docker", "rmi", *images], check=False, capture_output=True)
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
