"""Record the classic builder's streams of the sample-world build, for the FakeEngine tests.

    IMAGEBUILD_SAMPLEWORLD_PORT_BASE=... python tests/data/build_streams/record.py

Needs the Docker engine (scripts/ensure-docker.sh); brings the sample world up
and locks a copy of its pins here (pins.toml; the Dockerfile the tests render
from it must be the one recorded). Each scenario is a real ``build_image`` on
a Docker engine that keeps what it sent back: one JSON-lines file per
scenario, each line a message of ``POST /build`` with its time.

* ``success``: a cold build (no cache) of the 18 steps;
* ``cached``: the same build again, every step a cache hit;
* ``failure``: vLLM pinned to a commit its repository lacks: step 7 fails;
* ``engine-lost``: the connection to the engine cut mid-build (through a
  socket proxy here, as a daemon restart or a dropped tunnel would);
* ``inventory.txt``: the Python distributions the built image's python lists; the replayed
  builds' images hold one METADATA file for each (imagebuild.testing.image_root_files), which
  the SBOM reads from their layers.

Re-record after changing stages/ (tests/unit/test_build_fake.py says so).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from imagebuild.build.core import BuildOptions, build_image, prepare_build  # noqa: E402
from imagebuild.cli import main as imagebuild_main  # noqa: E402
from imagebuild.engine.docker import DockerEngine  # noqa: E402
from imagebuild.engine.interface import BuildEvent, BuildRequest  # noqa: E402
from imagebuild.errors import BuildError, EngineError  # noqa: E402
from imagebuild.project import find_project  # noqa: E402
from imagebuild.render import RenderOptions, render  # noqa: E402
from imagebuild.testing import RecordedMessage, Recording  # noqa: E402
from sampleworld.layout import BAD_SHA  # noqa: E402
from sampleworld.world import up  # noqa: E402

CUT_AFTER_S = 8.0  # engine-lost: the proxy drops the connection this long into a cold build
TAG = f"imagebuild-record-{REPO.name}/kimi-k3:gfx942"  # per checkout: engines are shared
_MARK = "imagebuild-inventory:"
# Standard library only: runs on whatever python the image has, without pip's warnings in the output.
INVENTORY_SCRIPT = (
    "import json, importlib.metadata as m; "
    "found = sorted({(d.metadata['Name'], d.version) for d in m.distributions() if d.metadata['Name']}); "
    f"print({_MARK!r} + json.dumps(found))"
)


class RecordingEngine(DockerEngine):
    """A DockerEngine that keeps every raw message of its builds with its time."""

    messages: list[RecordedMessage]
    started: float

    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        try:
            yield from super().build(request)
        except EngineError as e:  # what the fake engine raises when it replays this point
            self.messages.append(RecordedMessage(at=time.monotonic() - self.started, engine_error=str(e)))
            raise

    def build_chunks(self, request: BuildRequest) -> Iterator[dict[str, Any]]:
        self.messages, self.started = [], time.monotonic()
        for chunk in super().build_chunks(request):
            self.messages.append(RecordedMessage(at=time.monotonic() - self.started, chunk=chunk))
            yield chunk


def record(
    engine: RecordingEngine,
    pins: Path,
    name: str,
    note: str,
    *,
    no_cache: bool = False,
    network: str | None = "host",
) -> None:
    """One real build_image, kept as ``name``.jsonl; its failure, if any, is part of the recording."""
    project = find_project(REPO, pins)
    inputs = project.load("gfx942")
    lock = inputs.python_lock
    text = render(
        inputs.definition, inputs.pins, inputs.arch, inputs.constraints, RenderOptions(), lock=lock,
        apt_lock=inputs.apt_lock,
    ).text
    work = Path(tempfile.mkdtemp(prefix="record-"))
    options = BuildOptions(
        arch="gfx942",
        tag=TAG,
        network=network,
        no_cache=no_cache,
        record_path=work / "gfx942.build.json",
        log_path=work / "gfx942.build.log",
        normalize=False,  # only the build stream is recorded
    )
    try:
        build_image(prepare_build(project, inputs, options), engine)
    except (BuildError, EngineError) as e:
        print(f"{name}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
    shutil.rmtree(work)
    recording = Recording(
        name=name,
        note=note,
        dockerfile_sha256=hashlib.sha256(text.encode()).hexdigest(),
        messages=tuple(engine.messages),
    )
    recording.dump(HERE / f"{name}.jsonl")
    print(f"{name}: {len(recording.messages)} messages in {recording.messages[-1].at:.1f} s", file=sys.stderr)


def cutting_proxy(target: str, listen: Path, cut_after: float) -> threading.Thread:
    """A unix-socket proxy to the engine that drops each connection ``cut_after`` s after it opens."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(listen))
    server.listen()

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def serve() -> None:
        while True:
            client, _ = server.accept()
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

            def cut(c: socket.socket = client, u: socket.socket = upstream) -> None:
                for s in (c, u):
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()

            threading.Timer(cut_after, cut).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def main() -> int:
    world = up()
    pins = HERE / "pins.toml"
    shutil.copy(world.pins_path, pins)
    assert imagebuild_main(["lock", "--pins", str(pins)]) == 0
    engine = RecordingEngine(docker.from_env(timeout=600), "unix:///var/run/docker.sock")

    record(engine, pins, "success", "cold build (no cache) of the sample world, all 18 steps", no_cache=True)
    code, inventory = engine.run(TAG, ["python3", "-I", "-c", INVENTORY_SCRIPT], network_mode="none")
    line = next((ln for ln in inventory.splitlines() if ln.startswith(_MARK)), None)
    assert code == 0, f"the built image's python did not list its distributions: {inventory[-300:]}"
    assert line, f"no inventory line in: {inventory[-300:]}"
    (HERE / "inventory.txt").write_text(line + "\n")
    record(engine, pins, "cached", "the same build again: every step a cache hit")

    vllm = find_project(REPO, pins).load("gfx942").pins.get("vllm").identity
    assert vllm
    bad = Path(tempfile.mkdtemp(prefix="record-")) / "pins.toml"
    # Unfingerprinted, as by hand: a fingerprinted identity typed over is refused before the build.
    bad.write_text(re.sub(r"^fingerprint = .*\n", "", pins.read_text().replace(vllm, BAD_SHA), flags=re.M))
    for lock in ("pylock.toml", "apt.lock.toml"):  # the same locks beside it: only vLLM's commit differs
        if (HERE / lock).is_file():
            shutil.copy(HERE / lock, bad.parent / lock)
    record(engine, bad, "failure", f"vllm pinned to {BAD_SHA}, which its repository lacks")
    shutil.rmtree(bad.parent)

    sock = Path(f"/tmp/imagebuild-record-{os.getpid()}.sock")
    cutting_proxy("/var/run/docker.sock", sock, CUT_AFTER_S)
    proxied = RecordingEngine(docker.DockerClient(base_url=f"unix://{sock}", timeout=600), f"unix://{sock}")
    note = f"the connection to the engine cut {CUT_AFTER_S:g} s into a cold build"
    record(proxied, pins, "engine-lost", note, no_cache=True)
    proxied.close()
    engine.close()
    sock.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
