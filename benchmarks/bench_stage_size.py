"""The cost of N GB of build layers: a build step writing N GB of incompressible data, its timestamp
normalisation, and export + import of the normalised image against `docker save` + `docker load`,
on each engine of the engine matrix; the table per N and a linear fit in N.

Per engine and size N (GB, 1 GB = 1e9 bytes):

* build: a classic `docker build --no-cache` of ``FROM <the sample base pin>`` plus one
  ``RUN head -c N /dev/urandom > /blob``: the step's time, as an extra stage of the image would take;
* normalisation: ``imagebuild.normalize.core.normalize_image`` of that image, as `imagebuild build`
  does it (from the engine's layer store where it can, else from `docker save`), with the engine's
  phases (rewrite: read and rewrite the layers; load: the engine loading the rewritten ones), the
  disk the engine keeps beyond the base (the built layer, kept as the cache, and the normalised one)
  and the spool's peak (temporary disk while it runs);
* distribution: `imagebuild export --compress none` then, the image removed, `imagebuild import`,
  against `docker save -o` then, the image removed, `docker load -i` (base included on both sides).

Then, per engine, least-squares fits ``seconds = a + b * N`` (with R^2) for the normalisation and for
export + import and save + load, and the 10 GB extrapolation. Prints the load average before and after.

    python benchmarks/bench_stage_size.py [--sizes 0.5,1] [--engines main,docker26-overlay2,docker26-containerd]

Needs the engines (scripts/ensure-docker.sh; `python -m sampleworld engines up`) and the sample world
(IMAGEBUILD_SAMPLEWORLD_STATE names a shared one): the base is the sample base image, pulled by digest
into an engine that lacks it (and removed again). Removes every image, archive and spool it made.
Disk: about 4 N GB free on / at the peak (two layers in the engine, the spool, then an archive).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sampleworld import engine_matrix  # noqa: E402

GB = 1e9
TAG = "bench-stage/n"
EPOCH = 1_700_000_000  # the step's SOURCE_DATE_EPOCH: any fixed value


@dataclass(frozen=True, kw_only=True)
class Row:
    engine: str
    size_gb: float
    build: float
    normalize: float
    rewrite: float
    load: float
    read_from: str
    disk_mb: float  # kept by the engine beyond the base: the built layer (the cache) and the normalised one
    spool_mb: float  # the normalisation's temporary disk at its peak
    export: float
    import_: float
    save: float
    docker_load: float


def run(argv: list[str], host: str, stdin: BinaryIO | None = None) -> float:
    """Run one command against the engine at ``host``; its wall time. A failure shows its stderr's tail."""
    started = time.monotonic()
    env = {**os.environ, "DOCKER_HOST": host, "DOCKER_BUILDKIT": "0"}
    done = subprocess.run(
        argv, check=False, cwd=REPO, env=env, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace")[-2000:]
        msg = f"{' '.join(argv)}: exit {done.returncode}\n{tail}"
        raise RuntimeError(msg)
    return time.monotonic() - started


def docker(host: str, *args: str) -> str:
    env = {**os.environ, "DOCKER_HOST": host}
    return subprocess.run(["docker", *args], check=True, env=env, capture_output=True, text=True).stdout


def base_reference(state: Path) -> str:
    """The sample world's base pin: by digest when its pins are locked, else by its tag."""
    base = tomllib.loads((state / "pins.toml").read_text())["base"]
    return f"{base['image']}@{base['digest']}" if base.get("digest") else f"{base['image']}:{base['tag']}"


def context(base: str, size: float) -> bytes:
    dockerfile = f"FROM {base}\nRUN head -c {int(size * GB)} /dev/urandom > /blob\n".encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    return out.getvalue()


def normalise(host: str, built: str, base: str, spool: Path) -> dict[str, object]:
    """The normalisation `imagebuild build` runs, in this process, against the engine at ``host``."""
    os.environ["DOCKER_HOST"] = host
    from imagebuild.engine.docker import DockerEngine
    from imagebuild.normalize.core import normalize_image
    from imagebuild.normalize.model import LayerPlan

    engine = DockerEngine.from_env()
    try:
        image, base_info = engine.inspect_image(built), engine.inspect_image(base)
        plan = LayerPlan(
            layers=image.layers,
            base_layers=len(base_info.layers),
            base_history=len(base_info.history),
            epochs=(EPOCH,),
            created=EPOCH,
            context_copies=(False,),
        )
        result = normalize_image(engine, built, plan, spool)
        engine.tag(result.engine_id, f"{TAG}:normalized")
        return result.to_json()
    finally:
        engine.close()
        del os.environ["DOCKER_HOST"]


def image_bytes(host: str, ref: str) -> int:
    return int(docker(host, "image", "inspect", "--format", "{{.Size}}", ref).strip())


def measure(name: str, host: str, base: str, size: float, work: Path) -> Row:
    built_tag, normalized = f"{TAG}:built", f"{TAG}:normalized"
    ctx = work / "context.tar"
    ctx.write_bytes(context(base, size))
    try:
        with ctx.open("rb") as stdin:
            build = run(
                ["docker", "build", "-q", "--no-cache", "--network", "none", "-t", built_tag, "-"],
                host,
                stdin=stdin,
            )
        started = time.monotonic()
        result = normalise(
            host, docker(host, "image", "inspect", "--format", "{{.Id}}", built_tag).strip(), base, work
        )
        normalize = time.monotonic() - started
        phases = result["phases"]
        assert isinstance(phases, dict)
        disk = image_bytes(host, built_tag) - image_bytes(host, base) + int(str(result["bytes_rewritten"]))
        archive = work / "saved.tar"
        save = run(["docker", "save", "-o", str(archive), normalized], host)
        docker(host, "rmi", normalized)
        docker_load = run(["docker", "load", "-q", "-i", str(archive)], host)
        archive.unlink()
        out = work / "export"
        export = run(
            [sys.executable, "-m", "imagebuild", "export", normalized, "-o", str(out), "--compress", "none"],
            host,
        )
        docker(host, "rmi", normalized)
        manifest = next(out.glob("*.tar.json"))
        import_ = run([sys.executable, "-m", "imagebuild", "import", str(manifest)], host)
        shutil.rmtree(out)
    finally:
        subprocess.run(
            ["docker", "rmi", normalized, built_tag],
            env={**os.environ, "DOCKER_HOST": host},
            capture_output=True,
            check=False,
        )
    return Row(
        engine=name,
        size_gb=size,
        build=build,
        normalize=normalize,
        rewrite=float(phases.get("rewrite", 0.0)),
        load=float(phases.get("load", 0.0)),
        read_from=str(result["read_from"]),
        disk_mb=disk / 1e6,
        spool_mb=int(str(result["spool_peak"])) / 1e6,
        export=export,
        import_=import_,
        save=save,
        docker_load=docker_load,
    )


def fit(xs: list[float], ys: list[float]) -> str:
    """``a + b/GB (R^2 r), 10 GB: s``, or what a single size cannot give."""
    if len(set(xs)) < 2:
        return "(one size: no fit)"
    exact = " (two sizes: the line through them, R^2 1 by construction)" if len(set(xs)) == 2 else ""
    slope, intercept = statistics.linear_regression(xs, ys)
    predicted = [intercept + slope * x for x in xs]
    mean = statistics.fmean(ys)
    total = sum((y - mean) ** 2 for y in ys)
    r2 = 1 - sum((y - p) ** 2 for y, p in zip(ys, predicted, strict=True)) / total if total else 1.0
    return (
        f"{intercept:.2f} s + {slope:.2f} s/GB (R^2 {r2:.3f}){exact}; 10 GB -> {intercept + 10 * slope:.0f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.5,1", help="GB of the step, comma-separated (default 0.5,1)")
    parser.add_argument("--engines", default=",".join(["main", *(s.name for s in engine_matrix.DOCKER26)]))
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    wanted = args.engines.split(",")
    state_env = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")
    state = Path(state_env) if state_env else REPO / ".sampleworld"
    engines = {e.name: e for e in engine_matrix.status(state) if e.version}
    missing = [n for n in wanted if n not in engines]
    if missing:
        print(
            f"engines not running: {', '.join(missing)} (python -m sampleworld engines up)", file=sys.stderr
        )
        return 2
    base = base_reference(state)
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; base {base}")
    rows: list[Row] = []
    for name in wanted:
        host = engines[name].docker_host
        pulled = (
            subprocess.run(
                ["docker", "image", "inspect", base],
                check=False,
                env={**os.environ, "DOCKER_HOST": host},
                capture_output=True,
            ).returncode
            != 0
        )
        if pulled:
            docker(host, "pull", "-q", base)
        try:
            for size in sizes:
                with tempfile.TemporaryDirectory(
                    prefix="bench-stage-", dir=REPO / "build" if (REPO / "build").is_dir() else None
                ) as work:
                    row = measure(name, host, base, size, Path(work))
                rows.append(row)
                print(json.dumps(row.__dict__), flush=True)
        finally:
            if pulled:
                subprocess.run(
                    ["docker", "rmi", base],
                    env={**os.environ, "DOCKER_HOST": host},
                    capture_output=True,
                    check=False,
                )
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(
        "| engine | N | build of the step | normalisation | of it: rewrite | of it: load | read from | disk + | spool peak | export + import | save + load | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours, theirs = r.export + r.import_, r.save + r.docker_load
        print(
            f"| {r.engine} | {r.size_gb:g} GB | {r.build:.1f} s | {r.normalize:.1f} s | {r.rewrite:.1f} s | {r.load:.1f} s | "
            f"{r.read_from} | {r.disk_mb:.0f} MB | {r.spool_mb:.0f} MB | {r.export:.1f} + {r.import_:.1f} s | "
            f"{r.save:.1f} + {r.docker_load:.1f} s | {ours / theirs:.2f}x |"
        )
    print()
    for name in wanted:
        mine = [r for r in rows if r.engine == name]
        xs = [r.size_gb for r in mine]
        print(f"{name}: normalisation = {fit(xs, [r.normalize for r in mine])}")
        print(f"{name}: export + import = {fit(xs, [r.export + r.import_ for r in mine])}")
        print(f"{name}: save + load = {fit(xs, [r.save + r.docker_load for r in mine])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
