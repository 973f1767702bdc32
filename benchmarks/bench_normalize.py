"""Timestamp normalisation on the sample image: its time as a share of a cold build, its memory, its disk.

One run: a cold `imagebuild build --no-normalize` of the sample-world image
(its images removed first, --no-cache), then the normalisation `imagebuild
build` would do, in a process of its own so its peak RSS is its own, then
the disk the engine gives the normalised image beyond what it shares with
the built one. A plain `docker save` of the built image is timed too: the
engine exports the whole image, base included, and normalisation cannot be
faster than that. Goals (issue 13): <= 10% of a cold build, < 100 MB peak RSS.
Needs the Docker engine (scripts/ensure-docker.sh); brings the sample world
up; removes the images it made.

    python benchmarks/bench_normalize.py
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TAG = "bench-normalize/kimi-k3:gfx942"
MB = 1e6


def normalize_in_this_process(record_path: Path, pins: Path) -> None:
    """The child: normalise the image the record names, exactly as `imagebuild build` does; print JSON."""
    from imagebuild.docker_engine import DockerEngine
    from imagebuild.project import find_project
    from imagebuild.render import RenderOptions, render
    from imagebuild.repro.after_build import normalize_build

    record = json.loads(record_path.read_text())
    inputs = find_project(REPO, pins).load("gfx942")
    dockerfile = render(
        inputs.definition,
        inputs.pins,
        inputs.arch,
        inputs.constraints,
        RenderOptions(),
        lock=inputs.python_lock,
    )
    engine = DockerEngine.from_env()
    started = time.monotonic()
    normalization = normalize_build(
        engine,
        record["image_id"],
        tag=TAG,
        base_ref=inputs.pins.image(inputs.definition.base_pin).reference,
        dockerfile=dockerfile,
        spool_dir=record_path.parent,
        record_path=record_path,
    )
    seconds = time.monotonic() - started
    engine.tag(normalization.image_id, TAG)
    engine.close()
    result = normalization.result.to_json()
    result["wall_seconds"] = seconds
    result["max_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(result))


def remove_images(*refs: str) -> None:
    """Our tags only; docker rmi also removes the untagged parents (the build's layer cache)."""
    for ref in refs:
        subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)


def layer_sizes(image: str) -> list[int]:
    """The size docker gives each history entry's layer, newest first (0 for entries without one)."""
    out = subprocess.run(
        ["docker", "history", "--human=false", "--format", "{{.Size}}", image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(line) for line in out.split()]


def normalized_layers_bytes(image_id: str, base_ref: str) -> int:
    """What the engine stores for the normalised image beyond its base: its rewritten layers.

    The built image keeps its own copies (it is the layer cache), so this is the extra disk.
    """
    sizes, base = layer_sizes(image_id), layer_sizes(base_ref)
    return sum(sizes[: len(sizes) - len(base)])


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        normalize_in_this_process(Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    from imagebuild.pins import load_pins
    from sampleworld.world import up

    world = up()
    work = Path(tempfile.mkdtemp(prefix="bench-normalize-", dir=REPO / "build"))
    pins = work / "pins.toml"
    shutil.copy(world.pins_path, pins)
    shutil.copy(world.pins_path.with_name("pylock.toml"), work / "pylock.toml")
    imagebuild = [sys.executable, "-m", "imagebuild"]
    subprocess.run([*imagebuild, "lock", "--pins", str(pins)], check=True, cwd=REPO, capture_output=True)
    record = work / "record.json"
    remove_images(TAG, f"{TAG}-cache")
    try:
        started = time.monotonic()
        subprocess.run(
            [
                *imagebuild,
                "build",
                "--pins",
                str(pins),
                "--network",
                "host",
                "--tag",
                TAG,
                "--no-cache",
                "--no-normalize",
                "--record",
                str(record),
            ],
            check=True,
            cwd=REPO,
            capture_output=True,
        )
        build_seconds = time.monotonic() - started
        built_id = json.loads(record.read_text())["image_id"]
        save_started = time.monotonic()  # the floor: the engine's own export of the same image
        subprocess.run(["docker", "save", built_id], check=True, stdout=subprocess.DEVNULL)
        save_seconds = time.monotonic() - save_started
        child = subprocess.run(
            [sys.executable, __file__, "--child", str(record), str(pins)],
            check=False,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            sys.stderr.write(child.stderr)
            return 1
        result = json.loads(child.stdout.strip().splitlines()[-1])
        base_ref = load_pins(pins).image("base").reference
        extra = normalized_layers_bytes(result["image_id"], base_ref)
    finally:
        remove_images(TAG, f"{TAG}-cache")
        shutil.rmtree(work, ignore_errors=True)
    share = result["seconds"] / build_seconds
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result["phases"].items())
    print(f"cold build (--no-cache --no-normalize)  {build_seconds:7.1f} s")
    print(f"normalisation                           {result['seconds']:7.1f} s  ({phases})")
    print(f"  share of the cold build               {share:7.1%}  (goal <= 10%)")
    print(f"  plain `docker save` of the same image {save_seconds:7.1f} s  (what the save phase cannot beat)")
    print(
        f"  layers rewritten                      {result['layers_rewritten']:7d}  ({result['bytes_rewritten'] / MB:.0f} MB)"
    )
    print(f"  peak RSS of the normalising process   {result['max_rss_kb'] / 1024:7.1f} MiB  (goal < 100 MB)")
    print(
        f"  extra disk in the engine              {extra / MB:7.1f} MB  (the rewritten layers; the built image stays as the layer cache)"
    )
    print(
        f"  temporary spool, peak                 {result['spool_peak'] / MB:7.1f} MB  (under build/, removed after)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
