"""export + import vs `docker save | docker load`, per compression, with time and peak RSS.

The loads go into a node engine of the sample world (a second dockerd with its own image store,
sampleworld/engines.py), from which the image is removed before every load, so each load really
writes the layers. Every command runs as its own process; its peak RSS comes from wait4(2).

    python benchmarks/bench_distribute.py [IMAGE] [--repeat N] [--compress none,gzip,zstd]   # default imagebuild/kimi-k3:gfx942

Needs the Docker engine (scripts/ensure-docker.sh) and the image (bash scripts/try-sample-world, or the
docker test tier, builds it). Baselines compare like with like: `--compress none` against plain
`docker save | docker load`, gzip against `docker save | gzip -1` then `docker load`, and zstd against
`docker save | zstd -T0 -3` then `zstd -dc | docker load` (this engine, Docker 20.10, cannot load zstd).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sampleworld.engines import ensure_engine, node_engine, stop_engine  # noqa: E402
from sampleworld.layout import DEFAULT_STATE_DIR, StateDir  # noqa: E402

DEFAULT_IMAGE = "imagebuild/kimi-k3:gfx942"  # what scripts/try-sample-world builds
BASELINE_COMPRESS = {"none": "cat", "gzip": "gzip -1", "zstd": "zstd -q -T0 -3"}
BASELINE_LOAD = {
    "none": "docker load -q -i {f}",
    "gzip": "docker load -q -i {f}",
    "zstd": "zstd -dcq {f} | docker load -q",
}


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_rss_mb: float
    stdout: str


def run(argv: list[str], env: dict[str, str] | None = None) -> Run:
    """Run one process to the end; its wall time and peak resident memory (wait4, this child only)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        text = out.read().decode()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{err.decode()[-2000:]}")
    return Run(seconds=seconds, peak_rss_mb=usage.ru_maxrss / 1024, stdout=text)


def shell(command: str, env: dict[str, str] | None = None) -> float:
    return run(["bash", "-o", "pipefail", "-c", command], env).seconds


@dataclass(frozen=True)
class Row:
    compression: str
    export: Run
    imported: Run
    save: float
    load: float
    archive_size: int
    baseline_size: int


def best(runs: list[Run]) -> Run:
    """The fastest of several runs (the least disturbed by other work on a shared machine), peak RSS of all."""
    fastest = min(runs, key=lambda r: r.seconds)
    return Run(seconds=fastest.seconds, peak_rss_mb=max(r.peak_rss_mb for r in runs), stdout=fastest.stdout)


def measure(
    image: str, image_id: str, compression: str, *, work: Path, on_node: dict[str, str], repeat: int
) -> Row:
    def forget() -> None:
        subprocess.run(
            ["docker", "image", "rm", "--force", image_id], env=on_node, capture_output=True, check=False
        )

    out = work / compression
    exports, imports, saves, loads = [], [], [], []
    baseline_file = work / f"baseline.{compression}"
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        command = [
            sys.executable,
            "-m",
            "imagebuild",
            "export",
            image,
            "--output",
            str(out),
            "--compress",
            compression,
        ]
        exports.append(run(command))
        manifest = Path(exports[-1].stdout.strip())
        forget()
        imports.append(run([sys.executable, str(out / "imagebuild-import.pyz"), str(manifest)], on_node))
        saves.append(shell(f"docker save {image_id} | {BASELINE_COMPRESS[compression]} > {baseline_file}"))
        forget()
        loads.append(shell(BASELINE_LOAD[compression].format(f=baseline_file), on_node))
    row = Row(
        compression=compression,
        export=best(exports),
        imported=best(imports),
        save=min(saves),
        load=min(loads),
        archive_size=json.loads(manifest.read_text())["size"],
        baseline_size=baseline_file.stat().st_size,
    )
    baseline_file.unlink()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", nargs="?", default=DEFAULT_IMAGE)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measurement; the fastest counts")
    parser.add_argument("--compress", default="none,gzip,zstd", help="the compressions to measure, comma-separated")
    args = parser.parse_args()
    if unknown := set(args.compress.split(",")) - set(BASELINE_COMPRESS):
        sys.exit(f"--compress: {', '.join(sorted(unknown))} is none of {', '.join(BASELINE_COMPRESS)}")
    inspected = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}} {{.Size}}", args.image],
        capture_output=True,
        text=True,
        check=False,
    )
    if inspected.returncode != 0:
        sys.exit(
            f"no image {args.image}; build it (bash scripts/try-sample-world) or name one: {sys.argv[0]} IMAGE"
        )
    image_id, size = inspected.stdout.split()
    node = node_engine(StateDir(DEFAULT_STATE_DIR.resolve()), "bench")
    started = ensure_engine(node)
    on_node = {**os.environ, "DOCKER_HOST": node.host}
    work = Path(tempfile.mkdtemp(prefix="bench-distribute-"))
    rows: list[Row] = []
    try:
        print(
            f"image {args.image} ({image_id[:19]}, {int(size) / 1e9:.2f} GB) -> {node.host}", file=sys.stderr
        )
        for compression in args.compress.split(","):
            rows.append(
                measure(args.image, image_id, compression, work=work, on_node=on_node, repeat=args.repeat)
            )
            print(f"  {compression}: done", file=sys.stderr)
        last = work / args.compress.split(",")[-1]  # its image is on the node now
        manifest = next(last.glob("*.json"))
        present = best(
            [
                run([sys.executable, str(last / "imagebuild-import.pyz"), str(manifest)], on_node)
                for _ in range(args.repeat)
            ]
        )
    finally:
        subprocess.run(
            ["docker", "image", "rm", "--force", image_id], env=on_node, capture_output=True, check=False
        )
        shutil.rmtree(work, ignore_errors=True)
        if started:
            stop_engine(node)

    print(
        f"image {args.image} ({int(size) / 1e9:.2f} GB); engine {node.name} without the image before every load;"
    )
    print(
        f"fastest of {args.repeat} run(s) each, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n"
    )
    print(f"{'compression':<12}{'export':>9}{'import':>9}{'sum':>9}{'save':>9}{'load':>9}{'sum':>9}{'ratio':>7}"
          f"{'archive':>10}{'baseline':>10}{'RSS exp':>9}{'RSS imp':>9}")  # fmt: skip
    for r in rows:
        ours, theirs = r.export.seconds + r.imported.seconds, r.save + r.load
        print(
            f"{r.compression:<12}{r.export.seconds:>8.1f}s{r.imported.seconds:>8.1f}s{ours:>8.1f}s{r.save:>8.1f}s"
            f"{r.load:>8.1f}s{theirs:>8.1f}s{ours / theirs:>7.2f}{r.archive_size / 1e6:>8.0f}MB"
            f"{r.baseline_size / 1e6:>8.0f}MB{r.export.peak_rss_mb:>7.0f}MB{r.imported.peak_rss_mb:>7.0f}MB"
        )  # fmt: skip
    print(
        f"\nimport of an image already present: {present.seconds:.2f}s (peak RSS {present.peak_rss_mb:.0f} MB)"
    )
    print(
        "ratio = (export + import) / (save + load); goals: ratio <= 1.15 for none, present < 1 s, RSS < 100 MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
