"""Build the sample-world image with `imagebuild build` and with plain `docker build`.

Same context (the directory `imagebuild render --output DIR` writes, which is
what imagebuild sends), same build args, same classic builder (DOCKER_BUILDKIT=0), and the
same work: imagebuild builds with --no-normalize, as docker does not normalise timestamps
(benchmarks/bench_normalize.py measures that). Cold builds (--no-cache) alternate which
tool goes first, so neither always gets the page cache the other warmed;
cached builds are repeated. Prints every run, the medians and their ratios.
Needs the Docker engine (scripts/ensure-docker.sh); brings the sample world up.

    python benchmarks/bench_build.py [--rounds 2] [--cached-runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
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

# Tags of this checkout only: several checkouts may share one engine.
TAG_PREFIX = f"bench-{REPO.name}"


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="cold builds of each tool (default 2)")
    parser.add_argument("--cached-runs", type=int, default=5, help="cached builds of each tool (default 5)")
    args = parser.parse_args()

    world = up()
    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    pins = work / "pins.toml"
    shutil.copy(world.pins_path, pins)
    subprocess.run([sys.executable, "-m", "imagebuild", "lock", "--pins", str(pins)], check=True, cwd=REPO)

    context_dir = work / "context"
    render = [sys.executable, "-m", "imagebuild", "render", "--pins", str(pins), "--output", str(context_dir)]
    subprocess.run(render, check=True, cwd=REPO)
    args_of_checkout = checkout_build_args(checkout_labels(find_project(REPO, pins), "gfx942"))

    ib = [
        sys.executable,
        "-m",
        "imagebuild",
        "build",
        "--pins",
        str(pins),
        "--network",
        "host",
        "--no-normalize",
    ]
    ib += ["--tag", f"{TAG_PREFIX}/ib:gfx942", "--record", str(work / "record.json"), "--progress", "plain"]
    plain = ["docker", "build", "--network", "host", "-t", f"{TAG_PREFIX}/plain:gfx942"]
    plain += [f"--build-arg={name}={value}" for name, value in args_of_checkout.items()]
    plain.append(str(context_dir))
    classic = {**os.environ, "DOCKER_BUILDKIT": "0"}
    runs: dict[str, list[float]] = {k: [] for k in ("ib cold", "docker cold", "ib cached", "docker cached")}
    outside: list[float] = []  # imagebuild's time outside the engine's build stream, per cold run
    for round_ in range(args.rounds):
        order = [
            ("ib cold", [*ib, "--no-cache"], None),
            ("docker cold", [*plain[:2], "--no-cache", *plain[2:]], classic),
        ]
        for name, argv, env in order if round_ % 2 == 0 else order[::-1]:
            runs[name].append(timed(argv, env))
            if name == "ib cold":
                stream = json.loads((work / "record.json").read_text())["total_seconds"]
                outside.append(runs[name][-1] - stream)
    timed(ib), timed(plain, classic)  # a warm-up of each, not measured
    for _ in range(args.cached_runs):
        runs["ib cached"].append(timed(ib))
        runs["docker cached"].append(timed(plain, classic))

    medians = {name: statistics.median(times) for name, times in runs.items()}
    for name, times in runs.items():
        print(f"{name:<14} median {medians[name]:6.2f} s   runs: {' '.join(f'{t:.2f}' for t in times)}")
    print(f"cold ratio   imagebuild / docker build = {medians['ib cold'] / medians['docker cold']:.3f}")
    print(
        "imagebuild cold, outside the build stream (start-up, labels, context, tag, SBOM and provenance): "
        + " ".join(f"{t:.2f}" for t in outside)
        + " s"
    )
    print(f"cached ratio imagebuild / docker build = {medians['ib cached'] / medians['docker cached']:.1f}")
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
