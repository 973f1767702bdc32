"""The compile cache on the sample world: step 4's time and ccache's hit rate without a cache, with an
empty one and with a full one, and the identity of each image.

Each round builds the sample image from scratch (--no-cache) three times: without --compile-cache,
with a new empty cache directory (every lookup a miss, every object stored), and with that directory
again (every lookup a hit). Step 4 builds the sample MoRI, whose six C++ kernel sets are the compiles
(sampleworld/sources/mori/setup.py); the rest of the step (apt, pip, git) is the same in all three.
Prints each build's step 4 seconds, the record's compile_cache counts and the image ID, then the
medians and the load. Needs the Docker engine; brings the sample world up.

    python benchmarks/bench_compile_cache.py [--rounds 3]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sampleworld.world import up  # noqa: E402

MORI_STEP = 4


def build(pins: Path, record: Path, tag: str, cache: Path | None) -> dict[str, object]:
    argv = [sys.executable, "-m", "imagebuild", "build", "--pins", str(pins), "--network", "host"]
    argv += ["--no-cache", "--tag", tag, "--record", str(record), "--progress", "plain"]
    if cache is not None:
        argv += ["--compile-cache", str(cache)]
    subprocess.run(argv, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result: dict[str, object] = json.loads(record.read_text())
    return result


def step_seconds(record: dict[str, object], number: int) -> float:
    steps = record["steps"]
    assert isinstance(steps, list)
    return float(next(s["seconds"] for s in steps if s["number"] == number))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three builds (default 3)")
    args = parser.parse_args()
    state = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")
    world = up(Path(state) if state else None)
    work = Path(tempfile.mkdtemp(prefix="bench-compile-cache-"))
    tag = f"bench-compile-cache-{REPO.name}/ib:gfx942"
    try:
        pins = work / "pins.toml"
        shutil.copy(world.pins_path, pins)
        lock = [sys.executable, "-m", "imagebuild", "lock", "--pins", str(pins)]
        subprocess.run(lock, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times: dict[str, list[float]] = {"no cache": [], "empty cache": [], "full cache": []}
        print(f"load before: {os.getloadavg()!r}")
        for round_number in range(args.rounds):
            cache = work / f"ccache-{round_number}"
            for name, given in (("no cache", None), ("empty cache", cache), ("full cache", cache)):
                record = build(pins, work / "record.json", tag, given)
                seconds = step_seconds(record, MORI_STEP)
                times[name].append(seconds)
                counts = record.get("compile_cache") or {}
                print(
                    f"round {round_number + 1} {name:<11} step 4 {seconds:6.1f} s  {counts}  {record['image_id']}"
                )
        print(f"load after:  {os.getloadavg()!r}")
        for name, values in times.items():
            print(
                f"{name:<11} step 4 median {statistics.median(values):6.1f} s  runs: {' '.join(f'{v:.1f}' for v in values)}"
            )
    finally:
        subprocess.run(["docker", "rmi", tag, f"{tag}-cache"], check=False, capture_output=True)
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
