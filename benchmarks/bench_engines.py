"""Per engine of the matrix: a cold build, its normalisation, verify, export + import, and the identity.

For each engine (Docker 20.10 overlay2, Docker 26 overlay2, Docker 26 with the containerd image store;
`python -m sampleworld engines up` starts the two 26 ones):

* a cold `imagebuild build --no-cache` of the sample pins (normalisation included, its own time and
  share from the build record) against a cold plain `docker build --no-cache` of the same rendered
  context (the classic builder, as imagebuild drives it): the ratio is what imagebuild costs;
* `imagebuild verify`;
* `imagebuild export` (zstd) and `imagebuild import` of it into the same engine after the image was
  removed, against `docker save | zstd -T0 -3` and `zstd -dc | docker load` of the same image;
* the identity, and whether every engine gave the same one.

    python benchmarks/bench_engines.py [--engines main,docker26-containerd]

Needs the Docker engine (scripts/ensure-docker.sh) and the sample world (`python -m sampleworld up`);
removes the images it tagged. Each cold build takes minutes on 2 cores.
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

from sampleworld import engine_matrix  # noqa: E402
from sampleworld.layout import DEFAULT_STATE_DIR  # noqa: E402

TAG = "bench-engines/kimi-k3:gfx942"
PLAIN = "bench-engines/plain:gfx942"


@dataclass(frozen=True, kw_only=True)
class Row:
    engine: str
    store: str
    build: float
    plain_build: float
    normalize: float
    read_from: str
    verify: float
    verified: bool
    export: float
    import_: float
    save_zstd: float
    zstd_load: float
    archive_gb: float
    identity: str


def timed(argv: list[str], env: dict[str, str], *, check: bool = True) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if check and done.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])}... failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, done


def docker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], env=env, capture_output=True, text=True, check=False)


def remove(env: dict[str, str], *refs: str) -> None:
    for ref in refs:
        docker(env, "image", "rm", "--force", ref)


def measure(engine: engine_matrix.MatrixEngine, pins: Path, work: Path, *, keep: bool) -> Row:
    env = {**os.environ, **engine.env, "DOCKER_BUILDKIT": "0"}
    imagebuild = [sys.executable, "-m", "imagebuild"]
    remove(env, TAG, f"{TAG}-cache", PLAIN)
    record = work / f"{engine.name}.json"
    build, _ = timed([*imagebuild, "build", "--no-cache", "--pins", str(pins), "--network", "host", "--tag", TAG, "--record", str(record)], env)
    built = json.loads(record.read_text())
    normalization = built["normalization"]
    context = work / f"{engine.name}-context"
    timed([*imagebuild, "render", "--pins", str(pins), "-o", str(context)], env)
    plain, _ = timed(["docker", "build", "--no-cache", "--network", "host", "-q", "-t", PLAIN, str(context)], env)
    verify, verified = timed([*imagebuild, "verify", TAG, "--pins", str(pins)], env, check=False)
    out = work / f"{engine.name}-export"
    export, exported = timed([*imagebuild, "export", TAG, "-o", str(out)], env)
    manifest = json.loads(Path(exported.stdout.strip()).read_text())
    engine_id = manifest["manifest_digest"] if engine.kind == "containerd" else manifest["image_id"]
    remove(env, engine_id)
    imported, _ = timed([*imagebuild, "import", exported.stdout.strip()], env)
    baseline = work / f"{engine.name}.tar.zst"
    save, _ = timed(["bash", "-o", "pipefail", "-c", f"docker save {engine_id} | zstd -q -T0 -3 > {baseline}"], env)
    remove(env, engine_id)
    load, _ = timed(["bash", "-o", "pipefail", "-c", f"zstd -dcq {baseline} | docker load -q"], env)
    if not keep:
        remove(env, TAG, f"{TAG}-cache", PLAIN)
    shutil.rmtree(out, ignore_errors=True)
    baseline.unlink()
    return Row(
        engine=engine.name,
        store=str(normalization["engine"]),
        build=build,
        plain_build=plain,
        normalize=float(normalization["seconds"]),
        read_from=str(normalization["read_from"]),
        verify=verify,
        verified=verified.returncode == 0,
        export=export,
        import_=imported,
        save_zstd=save,
        zstd_load=load,
        archive_gb=manifest["size"] / 1e9,
        identity=str(built["image_id"]),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="main,docker26-overlay2,docker26-containerd")
    parser.add_argument("--keep", action="store_true", help=f"keep {TAG} on each engine (to compare them with imagebuild diff)")
    args = parser.parse_args()
    wanted = args.engines.split(",")
    sample = DEFAULT_STATE_DIR / "pins.toml"
    if not sample.is_file():
        sys.exit(f"{sample}: no sample pins; run `python -m sampleworld up` first")
    engines = [e for e in engine_matrix.matrix() if e.name in wanted]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        pins = Path(tmp) / "pins.toml"  # the sample pins, locked as a user would
        shutil.copy(sample, pins)
        shutil.copy(sample.with_name("pylock.toml"), pins.with_name("pylock.toml"))
        timed([sys.executable, "-m", "imagebuild", "lock", "--pins", str(pins)], dict(os.environ))
        for engine in engines:
            if engine.managed:  # the main engine has them from the sample world
                engine_matrix.pull_pinned_images(None, engine.name, pins)
            print(f"measuring {engine.name} ...", file=sys.stderr, flush=True)
            rows.append(measure(engine, pins, Path(tmp), keep=args.keep))
    identities = {row.identity for row in rows}
    print(
        "| engine | cold build (s) | plain docker build (s) | ratio | normalise (s, share, read from) | verify (s) "
        "| export (s) | import (s) | save\\|zstd (s) | zstd -d\\|load (s) | archive (GB) | identity |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        same = "same as the others" if len(identities) == 1 else "DIFFERS"
        print(
            f"| {r.store} | {r.build:.1f} | {r.plain_build:.1f} | {r.build / r.plain_build:.2f} "
            f"| {r.normalize:.1f} ({r.normalize / r.build:.0%}, {r.read_from}) | {r.verify:.1f}{'' if r.verified else ' FAILED'} "
            f"| {r.export:.1f} | {r.import_:.1f} | {r.save_zstd:.1f} | {r.zstd_load:.1f} | {r.archive_gb:.2f} "
            f"| `{r.identity[:19]}...` {same} |"
        )
    return 0 if len(identities) == 1 and all(r.verified for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
