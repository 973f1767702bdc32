"""Timestamp normalisation on the sample image: its time as a share of a cold build, its memory, its disk.

One run: a cold `imagebuild build --no-normalize` of the sample-world image
(its images removed first, --no-cache), then the normalisation `imagebuild
build` would do, in a process of its own so its peak RSS is its own, then
the disk the engine gives the normalised image beyond what it shares with
the built one. It says which path ran: the engine's layer store (the default
where the engine allows it) or `docker save`. Then, for comparison, the
normalised image is removed and made again from `docker save`, and a plain
`docker save` of the built image is timed: the engine exports the whole
image, base included, and the save path cannot be faster than that. Goals
(issue 13): <= 10% of a cold build, < 100 MB peak RSS.
Needs the Docker engine (scripts/ensure-docker.sh); brings the sample world
up; removes the images it made.

    python benchmarks/bench_normalize.py
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TAG = "bench-normalize/kimi-k3:gfx942"
MB = 1e6
SHIFT = 1 + int(time.time()) % 86400  # seconds: new layers for this run (see normalize_in_this_process)


def normalize_in_this_process(record_path: Path, pins: Path, *, from_store: bool, shift: int) -> None:
    """The child: normalise the image the record names as `imagebuild build` does, its epochs moved; print JSON.

    Every normalisation of the same pins gives the same layers, and the engine
    skips loading a layer it has (under any tag, from any checkout): without
    moving the epochs by ``shift`` seconds the load would measure nothing.
    The work is the same either way.
    """
    from imagebuild.engine.docker import DockerEngine
    from imagebuild.normalize.after_build import layer_plan
    from imagebuild.normalize.core import normalize_image
    from imagebuild.project import find_project
    from imagebuild.render import RenderOptions, render_inputs

    record = json.loads(record_path.read_text())
    inputs = find_project(REPO, pins).load("gfx942")
    dockerfile = render_inputs(inputs, RenderOptions())
    engine = DockerEngine.from_env()
    built = record["image_id"]
    engine.tag(built, f"{TAG}-cache")  # as build does: the built image stays, and is removed at the end
    started = time.monotonic()
    plan = layer_plan(engine, built, inputs.pins.image(inputs.definition.base_pin).reference, dockerfile)
    plan = replace(plan, epochs=tuple(e + shift for e in plan.epochs), created=plan.created + shift)
    normalized = normalize_image(engine, built, plan, record_path.parent, from_store=from_store)
    seconds = time.monotonic() - started
    engine.tag(normalized.image_id, TAG)
    engine.close()
    result = normalized.to_json()
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


def normalize_in_a_child(record: Path, pins: Path, source: str) -> dict[str, Any]:
    """Normalise in a process of its own (its peak RSS is its own), from the layer store or from save."""
    child = subprocess.run(
        [sys.executable, __file__, "--child", str(record), str(pins), source, str(SHIFT)],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        sys.stderr.write(child.stderr)
        raise SystemExit(1)
    result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


def phases(result: dict[str, Any]) -> str:
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result["phases"].items())


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        record_arg, pins_arg, source, shift = sys.argv[2:]
        normalize_in_this_process(Path(record_arg), Path(pins_arg), from_store=source == "store", shift=int(shift))
        return 0
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    from imagebuild.pins import load_pins
    from sampleworld.world import up

    world = up()
    (REPO / "build").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-normalize-", dir=REPO / "build"))
    pins = work / "pins.toml"
    imagebuild = [sys.executable, "-m", "imagebuild"]
    record = work / "record.json"
    remove_images(TAG, f"{TAG}-cache")
    try:
        shutil.copy(world.pins_path, pins)
        shutil.copy(world.pins_path.with_name("pylock.toml"), work / "pylock.toml")
        subprocess.run([*imagebuild, "lock", "--pins", str(pins)], check=True, cwd=REPO, capture_output=True)
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
        result = normalize_in_a_child(record, pins, "store")
        base_ref = load_pins(pins).image("base").reference
        extra = normalized_layers_bytes(result["image_id"], base_ref)
        remove_images(TAG)  # the normalised image only: the built one stays as TAG-cache
        via_save = normalize_in_a_child(record, pins, "save")
        if via_save["image_id"] != result["image_id"]:
            print(f"the two paths disagree: {result['image_id']} vs {via_save['image_id']}", file=sys.stderr)
            return 1
        save_started = time.monotonic()  # the save path's floor: the engine's own export of the image
        subprocess.run(["docker", "save", built_id], check=True, stdout=subprocess.DEVNULL)
        save_seconds = time.monotonic() - save_started
    finally:
        remove_images(TAG, f"{TAG}-cache")
        shutil.rmtree(work, ignore_errors=True)
    share = result["seconds"] / build_seconds
    reason = f": {result['fallback_reason']}" if result["fallback_reason"] else ""
    print(f"cold build (--no-cache --no-normalize)  {build_seconds:7.1f} s")
    print(f"normalisation                           {result['seconds']:7.1f} s  ({phases(result)})")
    print(f"  read from                             {result['read_from']}{reason}")
    print(f"  share of the cold build               {share:7.1%}  (goal <= 10%)")
    print(
        f"  from docker save instead              {via_save['seconds']:7.1f} s  ({phases(via_save)}; "
        f"{via_save['seconds'] / build_seconds:.1%}), the same image"
    )
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
