"""Time the sample cluster: cold and warm `cluster up`, a 2-node srun, a 2-node sbatch job, `down`.

Cold means this state dir's engines and daemons were stopped first (only ours, by recorded pid); the
engines keep their data roots, as they do between test sessions. Leaves the cluster as it found it.
Needs scripts/ensure-docker.sh and scripts/ensure-slurm.sh; honours IMAGEBUILD_SAMPLEWORLD_PORT_BASE.

    python benchmarks/bench_cluster.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sampleworld import cluster  # noqa: E402

WARM_RUNS = 3
JOB = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=5
srun --nodes=2 --ntasks-per-node=1 docker info --format '{{.DockerRootDir}}'
"""


def timed(step: str, func: Callable[[], object]) -> float:
    began = time.monotonic()
    func()
    seconds = time.monotonic() - began
    print(f"{step:<48} {seconds:6.2f} s")
    return seconds


def run(argv: list[str], env: dict[str, str]) -> str:
    return subprocess.run(argv, env=env, check=True, capture_output=True, text=True, timeout=300).stdout


def sbatch_and_wait(env: dict[str, str], work: Path) -> None:
    script = work / "job.sh"
    script.write_text(JOB)
    job = run(["sbatch", "--parsable", f"--output={work}/job-%j.out", str(script)], env).strip()
    while "JobState=COMPLETED" not in run(["scontrol", "--oneliner", "show", "job", job], env):
        time.sleep(0.1)


def main() -> int:
    was_running = any(cluster.status().values())
    timed("down (only what this state dir started)", cluster.down)
    timed("cold up (2 engines, munged, slurmctld, 2 slurmd)", cluster.up)
    warm = [timed(f"warm up #{n + 1}", cluster.up) for n in range(WARM_RUNS)]
    env = {**os.environ, **cluster.load().env}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as work:
        timed("srun -N2 hostname", lambda: run(["srun", "--nodes=2", "--ntasks-per-node=1", "hostname"], env))
        timed("sbatch 2-node docker job to COMPLETED", lambda: sbatch_and_wait(env, Path(work)))
    print(f"{'warm up, best of ' + str(WARM_RUNS):<48} {min(warm):6.2f} s")
    if not was_running:
        timed("down", cluster.down)
    return 0


if __name__ == "__main__":
    sys.exit(main())
