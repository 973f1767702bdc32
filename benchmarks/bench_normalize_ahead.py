"""What normalising ahead saves: a build with an N GB step and a next step that keeps the cores busy,
leaves one or leaves both, timed plain, normalised after the build, and normalised ahead (while the
next step builds), on each engine of the engine matrix.

The build, ``FROM <the sample base pin>``, then:

* ``RUN head -c N /dev/urandom > /blob``: N GB of new layer (bench_stage_size's step);
* a next step (``--next``) of a fixed amount of work: ``busy``, two ``head -c W /dev/zero |
  sha256sum`` side by side, keeps both cores of this machine busy, as a compile keeps a host's cores
  (the worst case for normalising beside it, which then competes for them); ``one``, python hashing W
  GB in one thread, leaves a core, as a single-threaded step (an import check, pip) does; ``wait``,
  ``sleep S``, leaves both, as a download does, and as most steps leave most cores of a larger host;
* ``ARG NONCE`` and ``RUN echo $NONCE > /nonce``.

Per engine, N and round, each build ``--no-cache``:

* plain: `docker build` alone (the classic builder);
* after: the same build, then imagebuild's normalisation (``normalize_image``, as `imagebuild build
  --normalize-ahead off` runs it);
* ahead: the same build with ``NormalizeAhead`` fed the build stream's commits (as `imagebuild
  build` feeds it, default 500 MB), then the normalisation after the build given its notes.

Printed per row: each total, and what normalisation added to the plain build (after - plain, ahead -
plain), the time spent ahead beside the build (when its rounds ended, and the build), the
normalisation after the build, and whether the image normalised ahead has the identity of the same
built image normalised from scratch (it must).

    python benchmarks/bench_normalize_ahead.py [--sizes 1,2] [--next busy|one|wait] [--work-gb 4] [--wait-s 20]
        [--rounds 1] [--engines main,...]

Needs the engines and the sample world, as bench_stage_size.py does. Removes every image it made.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_stage_size as stage  # noqa: E402  # the same base, step and engines

from imagebuild.build.stream import COMMITTED_RE, STEP_RE  # noqa: E402
from imagebuild.engine.docker import DockerEngine  # noqa: E402
from imagebuild.engine.interface import BuildRequest  # noqa: E402
from imagebuild.normalize.ahead import DEFAULT_MIN_MB, NormalizeAhead  # noqa: E402
from imagebuild.normalize.core import normalize_image  # noqa: E402
from imagebuild.normalize.model import LayerPlan, NormalizeResult  # noqa: E402
from sampleworld import engine_matrix  # noqa: E402

GB = 1e9
STEPS = 3  # RUN blob, RUN work, RUN nonce (ARG is no step)
TAG = f"bench-ahead/n{os.getpid()}"


NEXT = {
    "busy": "for i in 1 2; do head -c {bytes} /dev/zero | sha256sum > /dev/null & done; wait",
    "one": "python3 -c 'import hashlib; h = hashlib.sha256(); b = bytes(1 << 20); [h.update(b) for _ in range({mib})]'",
    "wait": "sleep {seconds}",
}


def context(base: str, size: float, *, next_step: str, work_gb: float, wait_s: float) -> bytes:
    work = NEXT[next_step].format(bytes=int(work_gb * GB), mib=int(work_gb * GB) >> 20, seconds=wait_s)
    return stage.dockerfile_context(
        f"FROM {base}\n"
        f"RUN head -c {int(size * GB)} /dev/urandom > /blob\n"
        f"RUN {work}\n"
        "ARG NONCE=1\nRUN echo $NONCE > /nonce\n"
    )


def plan(engine: DockerEngine, image_id: str, base: str) -> LayerPlan:
    image, base_info = engine.inspect_image(image_id), engine.inspect_image(base)
    return LayerPlan(
        layers=image.layers,
        base_layers=len(base_info.layers),
        base_history=len(base_info.history),
        epochs=(stage.EPOCH,) * STEPS,
        created=stage.EPOCH,
        context_copies=(False,) * STEPS,
    )


def build(engine: DockerEngine, ctx: bytes, nonce: str, ahead: NormalizeAhead | None) -> str:
    """The classic build, its commits told to ``ahead`` as `imagebuild build`'s stream tells them; its ID."""
    built, step, cached, partial = "", 0, False, ""
    request = BuildRequest(context=ctx, build_args={"NONCE": nonce}, no_cache=True, network_mode="none")
    for event in engine.build(request):
        if event.error:
            raise RuntimeError(event.error)
        built = event.image_id or built
        *lines, partial = (partial + event.text).split("\n")
        for line in lines:
            if match := STEP_RE.match(line):
                step, cached = int(match[1]), line[match.end() :].startswith("FROM ")
            elif line.strip() == "---> Using cache":
                cached = True
            elif (commit := COMMITTED_RE.match(line)) and ahead is not None:
                ahead.committed(commit[1], step, cached)
    return built


def measure(host: str, base: str, size: float, *, next_step: str, work_gb: float, wait_s: float, spool: Path) -> dict[str, object]:
    ctx = context(base, size, next_step=next_step, work_gb=work_gb, wait_s=wait_s)
    env = {**os.environ, "DOCKER_HOST": host, "DOCKER_BUILDKIT": "0"}
    os.environ["DOCKER_HOST"] = host
    engine = DockerEngine.from_env()
    made: list[str] = []
    try:
        started = time.monotonic()
        plain_id = subprocess.run(
            ["docker", "build", "-q", "--no-cache", "--network", "none", "--build-arg", "NONCE=plain", "-t",
             f"{TAG}:plain", "-"], input=ctx, env=env, check=True, capture_output=True,
        ).stdout.decode().strip()  # fmt: skip
        plain = time.monotonic() - started
        made.append(f"{TAG}:plain")
        # Untimed: what the base holds is then kept in the spool, as a build host keeps it after its first build.
        warm = normalize_image(engine, plain_id, plan(engine, plain_id, base), spool)
        engine.remove_image(warm.engine_id)

        started = time.monotonic()
        built = build(engine, ctx, "after", None)
        after_result = normalize_image(engine, built, plan(engine, built, base), spool)
        after = time.monotonic() - started
        made += [built, after_result.engine_id]
        engine.remove_image(after_result.engine_id)  # the next one makes its layers again

        started = time.monotonic()
        rounds: list[float] = []  # when each round ended, from the build's start
        ahead = NormalizeAhead(
            engine,
            lambda image: plan(engine, image, base),
            spool,
            min_bytes=DEFAULT_MIN_MB * 10**6,
            tell=lambda _: rounds.append(time.monotonic() - started),
        )
        built = build(engine, ctx, "ahead", ahead)
        built_at = time.monotonic() - started
        notes = ahead.finish()
        final_started = time.monotonic()
        ahead_result: NormalizeResult = normalize_image(engine, built, replace(plan(engine, built, base), previous=notes), spool)
        final = time.monotonic() - final_started
        total = time.monotonic() - started
        ahead.remove_prefixes(keep=ahead_result.engine_id)
        made += [built, ahead_result.engine_id]
        # Untimed: the same built image normalised from scratch must give the same identity.
        engine.remove_image(ahead_result.engine_id)
        again = normalize_image(engine, built, plan(engine, built, base), spool)
        made.append(again.engine_id)
    finally:
        for image in reversed(made):
            subprocess.run(["docker", "rmi", image], env=env, capture_output=True, check=False)
        engine.close()
        del os.environ["DOCKER_HOST"]
    return {
        "size_gb": size,
        "plain": round(plain, 1),
        "after": round(after, 1),
        "ahead": round(total, 1),
        "added_after": round(after - plain, 1),
        "added_ahead": round(total - plain, 1),
        "ahead_seconds": ahead.work.seconds,
        "ahead_layers": ahead.work.layers,
        "build_with_ahead": round(built_at, 1),
        "rounds": [round(end, 1) for end in rounds],
        "final": round(final, 1),
        "same_identity": again.image_id == ahead_result.image_id,
        "stopped": ahead.work.stopped,
        "load": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2", help="GB of the N GB step, comma-separated (default 1,2)")
    parser.add_argument("--next", choices=sorted(NEXT), default="busy", help="the next step's kind (default busy)")
    parser.add_argument("--work-gb", type=float, default=4.0, help="GB each hash of a busy or one step hashes (default 4)")
    parser.add_argument("--wait-s", type=float, default=20.0, help="seconds a wait step sleeps (default 20)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--engines", default=",".join(["main", *(s.name for s in engine_matrix.MANAGED)]))
    args = parser.parse_args()
    try:
        sizes = [float(s) for s in args.sizes.split(",")]
    except ValueError:
        print(f"--sizes {args.sizes!r}: not a comma-separated list of GB", file=sys.stderr)
        return 2
    state_env = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")
    state = Path(state_env) if state_env else HERE.parent / ".sampleworld"
    hosts = {e.name: e.docker_host for e in engine_matrix.status(state) if e.version}
    wanted = args.engines.split(",")
    missing = [n for n in wanted if n not in hosts]
    if missing:
        print(f"engines not running: {', '.join(missing)} (python -m sampleworld engines up)", file=sys.stderr)
        return 2
    base = stage.base_reference(state)
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; base {base}; next step {args.next} ({args.work_gb} GB, or {args.wait_s} s)")
    print("| engine | N GB | plain | after | ahead | added after | added ahead | ahead beside the build | final | same identity | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in wanted:
        host = hosts[name]
        stage.pull_if_missing(host, base)
        for size in sizes * args.rounds:
            with tempfile.TemporaryDirectory(prefix="bench-ahead-") as spool:
                row = measure(
                    host, base, size, next_step=args.next, work_gb=args.work_gb, wait_s=args.wait_s, spool=Path(spool)
                )
            print(
                f"| {name} | {size:g} | {row['plain']} s | {row['after']} s | {row['ahead']} s | "
                f"{row['added_after']} s | {row['added_ahead']} s | {row['ahead_seconds']} s "
                f"({row['ahead_layers']} layers, ended at {row['rounds']} s; the build at {row['build_with_ahead']} s) | "
                f"{row['final']} s | {row['same_identity']} | {row['load']} |"
                + (f" stopped: {row['stopped']}" if row["stopped"] else ""),
                flush=True,
            )
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
