"""The cost of N GB of build layers: a build step writing N GB of incompressible data, its timestamp
normalisation, and export + import of the normalised image against `docker save` + `docker load`,
on each engine of the engine matrix; the table per N and a linear fit in N.

Per engine and size N (GB, 1 GB = 1e9 bytes):

* build: a classic `docker build --no-cache` of ``FROM <the sample base pin>`` plus one
  ``RUN head -c N /dev/urandom > /blob`` and a small last step (``RUN echo $NONCE > /nonce``): the
  step's time, as an extra stage of the image would take; with ``--files K`` the step writes the N GB
  as K files instead, 100 to a directory (a package tree's shape: the per-entry cost, which one blob
  does not show); with ``--layers K`` K steps write N/K GB each (the real build's GBs come from
  several steps: the vLLM compile, the AITER wheel, the grafted trees), which the normalisation
  loads a layer at a time, the engine registering one while the next is rewritten;
* normalisation: ``imagebuild.normalize.core.normalize_image`` of that image, as `imagebuild build`
  does it (from the engine's own store where it can: overlay2's layer store, the containerd store's
  content store; else from `docker save`), with the engine's
  phases (rewrite: read and rewrite the layers; load: the engine loading the rewritten ones; where
  the rewrite streams into the load, overlay2 since issue 27's last step, rewrite is its sizing
  pass and load the rewrite and the engine's unpacking, which overlap), the
  CPU seconds of this process (every thread of it; the engine's own work is not in them), the
  disk the engine keeps beyond the base (the built layer, kept as the cache, and the normalised one)
  and the spool's peak (temporary disk while it runs);
* rebuild: the same build with another NONCE (the N GB step cached, the last step made again), then
  its normalisation with the first one's notes, as a rebuild after a late pin change runs it: on
  the layer-store path the unchanged N GB layer is taken from the engine, not rewritten or loaded;
  then "again": one more such rebuild, which finds what the first rebuild read of that layer kept
  (imagebuild.normalize.lower_cache);
* distribution: `imagebuild export --compress none` then, the image removed, `imagebuild import`,
  against `docker save -o` then, the image removed, `docker load -i` (base included on both sides).

Then, per engine, least-squares fits ``seconds = a + b * N`` (with R^2) for the normalisation, its
rewrite and load, export + import and save + load, and the 10 GB extrapolation, with the
normalisation's share of a 19-minute build there (the issue's goal: <= 5%). Each row carries the
load average (1 minute) at its start and end; ``--rounds`` repeats every size.

    python benchmarks/bench_stage_size.py [--sizes 0.5,1,2,4] [--rounds 1] [--engines main,docker26-overlay2,docker26-containerd]
    python benchmarks/bench_stage_size.py --no-distribute ...   # normalisation only
    python benchmarks/bench_stage_size.py --sizes 0.1,0.2 --files 50000 ...   # N GB in 50,000 files
    python benchmarks/bench_stage_size.py --layers 4 ...   # N GB in 4 steps

Needs the engines (scripts/ensure-docker.sh; `python -m sampleworld engines up`) and the sample world
(IMAGEBUILD_SAMPLEWORLD_STATE names a shared one): the base is the sample base image, pulled by digest
into an engine that lacks it (and removed again). Removes every image, archive and spool it made.
Disk: about 4 N GB free on / at the peak (two layers in the engine, the spool, then an archive).
Needs the imagebuild of this checkout; the numbers of another (main, before a change) come from
running this file from that checkout.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, cast

HERE = Path(__file__).resolve().parents[1]  # this checkout: its sample world and engines
REPO = HERE  # the checkout whose imagebuild is measured (--checkout)
if "--checkout" in sys.argv:
    REPO = Path(sys.argv[sys.argv.index("--checkout") + 1]).resolve()
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(HERE))

from process_cpu import ENGINE_PIDS, engine_cpu  # noqa: E402  # beside this file
from stage_report import Row, print_table  # noqa: E402

from sampleworld import engine_matrix  # noqa: E402

GB = 1e9
TAG = f"bench-stage/n{os.getpid()}"  # two runs may share an engine (before and after a change)
EPOCH = 1_700_000_000  # the step's SOURCE_DATE_EPOCH: any fixed value


CPU: dict[str, float] = {}  # command -> CPU seconds of its last run: the command's and the engine's


def run(argv: list[str], host: str, stdin: BinaryIO | None = None) -> float:
    """Run one command against the engine at ``host``; its wall time (its CPU seconds and the engine's
    in CPU[argv[...]]). A failure shows its stderr's tail."""
    started = time.monotonic()
    children, engine = resource.getrusage(resource.RUSAGE_CHILDREN), engine_cpu(host)
    env = {**os.environ, "DOCKER_HOST": host, "DOCKER_BUILDKIT": "0"}
    done = subprocess.run(
        argv, check=False, cwd=REPO, env=env, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace")[-2000:]
        msg = f"{' '.join(argv)}: exit {done.returncode}\n{tail}"
        raise RuntimeError(msg)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    ours = after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime
    CPU[" ".join(argv[:4])] = ours + engine_cpu(host) - engine
    return time.monotonic() - started


def docker(host: str, *args: str) -> str:
    env = {**os.environ, "DOCKER_HOST": host}
    return subprocess.run(["docker", *args], check=True, env=env, capture_output=True, text=True).stdout


def base_reference(state: Path) -> str:
    """The sample world's base pin: by digest when its pins are locked, else by its tag."""
    base = tomllib.loads((state / "pins.toml").read_text())["base"]
    return f"{base['image']}@{base['digest']}" if base.get("digest") else f"{base['image']}:{base['tag']}"


def context(base: str, size: float, files: int = 1, layers: int = 1) -> bytes:
    if layers > 1:
        steps = "".join(f"RUN head -c {int(size * GB / layers)} /dev/urandom > /blob{i}\n" for i in range(layers))
        return dockerfile_context(f"FROM {base}\n{steps}ARG NONCE=1\nRUN echo $NONCE > /nonce\n")
    write = (
        f"head -c {int(size * GB)} /dev/urandom > /blob"
        if files == 1
        else 'python3 -c "import os; [os.makedirs(f\'/tree/d{i // 100}\', exist_ok=True) or '
        f"open(f'/tree/d{{i // 100}}/f{{i}}', 'wb').write(os.urandom({int(size * GB) // files})) "
        f'for i in range({files})]"'
    )
    return dockerfile_context(f"FROM {base}\nRUN {write}\nARG NONCE=1\nRUN echo $NONCE > /nonce\n")


def dockerfile_context(dockerfile: str) -> bytes:
    """A build context (a tar) holding only ``dockerfile``."""
    content = dockerfile.encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def pull_if_missing(host: str, base: str) -> bool:
    """Pull ``base`` into the engine at ``host`` unless it has it; whether it pulled."""
    missing = subprocess.run(
        ["docker", "image", "inspect", base], check=False, env={**os.environ, "DOCKER_HOST": host}, capture_output=True
    ).returncode != 0
    if missing:
        docker(host, "pull", "-q", base)
    return missing


def normalise(
    host: str, built: str, base: str, spool: Path, previous: object = (), *, as_is: bool = False, steps: int = 2
) -> dict[str, object]:
    """The normalisation `imagebuild build` runs, in this process, against the engine at ``host``;
    ``previous``: the notes of an earlier one (a rebuild's record), with ``as_is`` also the layers it
    made, taken as they are when the build got them back from a layer cache image. Adds ``cpu``: this
    process's CPU seconds, every thread. ``steps``: the build steps above the base (with a layer or not)."""
    os.environ["DOCKER_HOST"] = host
    from imagebuild.engine.docker import DockerEngine
    from imagebuild.normalize.core import normalize_image
    from imagebuild.normalize.model import LayerPlan

    notes: tuple[Any, ...] = ()
    try:
        from imagebuild.normalize.model import LayerNote  # this checkout's; main before the change has none

        notes = tuple(LayerNote(**note) for note in cast("Iterable[dict[str, Any]]", previous))
    except ImportError:
        pass
    engine = DockerEngine.from_env()
    try:
        image, base_info = engine.inspect_image(built), engine.inspect_image(base)
        fields: dict[str, object] = {"previous": notes} if notes else {}
        if as_is:
            fields["normalized"] = tuple(note for note in notes if note.diff_id)
        plan = LayerPlan(
            layers=image.layers,
            base_layers=len(base_info.layers),
            base_history=len(base_info.history),
            epochs=(EPOCH,) * steps,
            created=EPOCH,
            context_copies=(False,) * steps,
            **fields,  # type: ignore[arg-type]
        )
        before, engine_before = resource.getrusage(resource.RUSAGE_SELF), engine_cpu(host)
        result = normalize_image(engine, built, plan, spool)
        after, engine_after = resource.getrusage(resource.RUSAGE_SELF), engine_cpu(host)
        engine.tag(result.engine_id, f"{TAG}:normalized")
        out = result.to_json()
        out["cpu"] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        out["engine_cpu"] = engine_after - engine_before
        return out
    finally:
        engine.close()
        del os.environ["DOCKER_HOST"]


def image_bytes(host: str, ref: str) -> int:
    return int(docker(host, "image", "inspect", "--format", "{{.Size}}", ref).strip())


def measure(
    name: str, host: str, base: str, size: float, work: Path, *, distribute: bool, files: int = 1, layers: int = 1
) -> Row:
    built_tag, rebuilt_tag, normalized = f"{TAG}:built", f"{TAG}:rebuilt", f"{TAG}:normalized"
    load_start = os.getloadavg()[0]
    ctx = work / "context.tar"
    ctx.write_bytes(context(base, size, files, layers))
    first_id = ""
    rebuilt_ids: list[str] = []  # the first rebuild's images, normalised and built (the second's are tagged)
    try:
        with ctx.open("rb") as stdin:
            build = run(
                ["docker", "build", "-q", "--no-cache", "--network", "none", "-t", built_tag, "-"],
                host,
                stdin=stdin,
            )
        started = time.monotonic()
        result = normalise(host, image_id(host, built_tag), base, work, steps=layers + 1)
        normalize = time.monotonic() - started
        first_id = str(result["engine_id"])
        phases = result["phases"]
        assert isinstance(phases, dict)
        disk = image_bytes(host, built_tag) - image_bytes(host, base) + int(str(result["bytes_rewritten"]))
        notes = result.get("layers") or ()
        rebuild_seconds: list[float] = []
        for nonce in ("2", "3"):  # the N GB step cached, the last one made again; then once more
            with ctx.open("rb") as stdin:
                run(
                    ["docker", "build", "-q", "--network", "none", "--build-arg", f"NONCE={nonce}", "-t", rebuilt_tag, "-"],
                    host,
                    stdin=stdin,
                )
            rebuilt = image_id(host, rebuilt_tag)
            started = time.monotonic()
            again = normalise(host, rebuilt, base, work, previous=notes, steps=layers + 1)
            rebuild_seconds.append(time.monotonic() - started)
            notes = again.get("layers") or ()
            if nonce == "2":  # the next build and normalisation take over their tags
                rebuilt_ids += [str(again["engine_id"]), rebuilt]
        rebuild_normalize, rebuild_again = rebuild_seconds
        export = import_ = save = docker_load = moved_cpu = saved_cpu = 0.0
        if distribute:
            export, import_, save, docker_load, moved_cpu, saved_cpu = distribution(host, normalized, work)
    finally:
        subprocess.run(
            ["docker", "rmi", normalized, built_tag, rebuilt_tag, *([first_id] if first_id else []), *rebuilt_ids],
            env={**os.environ, "DOCKER_HOST": host},
            capture_output=True,
            check=False,
        )
    return Row(
        engine=name,
        size_gb=size,
        files=files,
        layers=layers,
        build=build,
        normalize=normalize,
        # Streamed into the load (overlay2): "size" is the sizing pass, "stream" the rewrite and the
        # engine's unpacking, overlapped; shown in the rewrite and load columns.
        rewrite=float(phases.get("rewrite", phases.get("size", 0.0)) or 0.0),
        load=float(phases.get("load", phases.get("stream", 0.0)) or 0.0),
        read_from=str(result["read_from"]),
        disk_mb=disk / 1e6,
        spool_mb=int(str(result["spool_peak"])) / 1e6,
        cpu=float(str(result["cpu"])),
        engine_cpu=float(str(result["engine_cpu"])),
        moved_cpu=moved_cpu,
        saved_cpu=saved_cpu,
        rebuild_normalize=rebuild_normalize,
        rebuild_again=rebuild_again,
        reused=int(str(again.get("layers_reused", 0))),
        load_start=load_start,
        load_end=os.getloadavg()[0],
        export=export,
        import_=import_,
        save=save,
        docker_load=docker_load,
    )


def image_id(host: str, ref: str) -> str:
    return docker(host, "image", "inspect", "--format", "{{.Id}}", ref).strip()


def distribution(host: str, normalized: str, work: Path) -> tuple[float, float, float, float, float, float]:
    """(export, import, docker save -o, docker load -i) of the normalised image, each load into an
    engine that lacks it; then the CPU seconds of export + import and of save + load (the commands'
    and the engine's)."""
    archive = work / "saved.tar"
    save = run(["docker", "save", "-o", str(archive), normalized], host)
    docker(host, "rmi", normalized)
    docker_load = run(["docker", "load", "-q", "-i", str(archive)], host)
    archive.unlink()
    out = work / "export"
    export = run(
        [sys.executable, "-m", "imagebuild", "export", normalized, "-o", str(out), "--compress", "none"], host
    )
    docker(host, "rmi", normalized)
    manifest = next(out.glob("*.tar.json"))
    import_ = run([sys.executable, "-m", "imagebuild", "import", str(manifest)], host)
    shutil.rmtree(out)
    ours = CPU[f"{sys.executable} -m imagebuild export"] + CPU[f"{sys.executable} -m imagebuild import"]
    theirs = CPU[f"docker save -o {archive}"] + CPU["docker load -q -i"]
    return export, import_, save, docker_load, ours, theirs


MAIN_PID = Path("/var/run/docker.pid")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="0.5,1,2,4", help="GB of the step, comma-separated (default 0.5,1,2,4)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="measurements of every size (default 1)")
    parser.add_argument("--files", type=int, default=1, help="files the step writes its N GB as (default 1)")
    parser.add_argument("--layers", type=int, default=1, help="steps that write the N GB, N/K each (default 1)")
    parser.add_argument("--engines", default=",".join(["main", *(s.name for s in engine_matrix.MANAGED)]))
    parser.add_argument("--no-distribute", action="store_true", help="skip export/import and save/load")
    parser.add_argument("--checkout", help="measure the imagebuild of this checkout (main, before a change)")
    parser.add_argument(
        "--rows", nargs="+", type=Path, help="print the table and fits of the JSON rows earlier runs printed"
    )
    args = parser.parse_args()
    if args.layers < 1 or args.files < 1 or (args.layers > 1 and args.files > 1):
        parser.error("--layers and --files are each at least 1, and at most one of them above 1")
    if args.rows:
        earlier = [
            Row(**{"engine_cpu": 0.0, "moved_cpu": 0.0, "saved_cpu": 0.0, **json.loads(line)})
            for path in args.rows
            for line in path.read_text().splitlines()
            if line.startswith("{")
        ]
        names = list(dict.fromkeys(r.engine for r in earlier))
        print_table(earlier, names, distribute=any(r.export for r in earlier))
        return 0
    sizes = [float(s) for s in args.sizes.split(",")] * args.rounds
    wanted = args.engines.split(",")
    state_env = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")
    state = Path(state_env) if state_env else HERE / ".sampleworld"
    engines = {e.name: e for e in engine_matrix.status(state) if e.version}
    for engine in engines.values():  # the main engine's pid from its pid file (no other dockerd writes it)
        pid = engine.pid or (
            int(MAIN_PID.read_text()) if engine.name == "main" and MAIN_PID.exists() else None
        )
        if pid:
            ENGINE_PIDS[engine.docker_host] = pid
    missing = [n for n in wanted if n not in engines]
    if missing:
        print(
            f"engines not running: {', '.join(missing)} (python -m sampleworld engines up)", file=sys.stderr
        )
        return 2
    base = base_reference(state)
    print(f"imagebuild of {REPO}; load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; base {base}")
    rows: list[Row] = []
    for name in wanted:
        host = engines[name].docker_host
        pulled = pull_if_missing(host, base)
        try:
            for size in sizes:
                with tempfile.TemporaryDirectory(
                    prefix="bench-stage-", dir=HERE / "build" if (HERE / "build").is_dir() else None
                ) as work:
                    row = measure(
                        name,
                        host,
                        base,
                        size,
                        Path(work),
                        distribute=not args.no_distribute,
                        files=args.files,
                        layers=args.layers,
                    )
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
    print_table(rows, wanted, distribute=not args.no_distribute)
    return 0


if __name__ == "__main__":
    sys.exit(main())
