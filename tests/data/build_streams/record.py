"""Record the classic builder's streams of the sample-world build, for the FakeEngine tests.

    IMAGEBUILD_SAMPLEWORLD_PORT_BASE=... python tests/data/build_streams/record.py

Needs the Docker engine (scripts/ensure-docker.sh); brings the sample world up
and locks a copy of its pins here (pins.toml; the Dockerfile the tests render
from it must be the one recorded). Writes one JSON-lines file per scenario:
each line a message of ``POST /build`` as the engine sent it, with its time.

* ``success``: a cold build (no cache) of the 18 steps;
* ``cached``: the same build again, every step a cache hit;
* ``failure``: vLLM pinned to a commit its repository lacks: step 7 fails;
* ``engine-lost``: the connection to the engine cut mid-build (through a
  socket proxy here, as a daemon restart or a dropped tunnel would);
* ``inventory.txt``: what the built image's python prints for the SBOM's pip
  inventory (imagebuild.attestations), which the replayed builds answer with.

Re-record after changing stages/ (tests/unit/test_build_fake.py says so).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from imagebuild.attestations import INVENTORY_SCRIPT  # noqa: E402
from imagebuild.cli import main as imagebuild_main  # noqa: E402
from imagebuild.context import context_files, make_context  # noqa: E402
from imagebuild.docker_engine import DockerEngine  # noqa: E402
from imagebuild.engine import BuildRequest  # noqa: E402
from imagebuild.errors import EngineError  # noqa: E402
from imagebuild.labels import image_labels  # noqa: E402
from imagebuild.project import find_project  # noqa: E402
from imagebuild.render import RenderOptions, render  # noqa: E402
from imagebuild.testing import RecordedMessage, Recording  # noqa: E402
from sampleworld.layout import BAD_SHA  # noqa: E402
from sampleworld.world import up  # noqa: E402

CUT_AFTER_S = 8.0  # engine-lost: the proxy drops the connection this long into a cold build


class RecordingEngine(DockerEngine):
    """A DockerEngine that keeps every raw message of its builds, with its time."""

    messages: list[RecordedMessage]
    started: float

    def build_chunks(self, request: BuildRequest) -> Iterator[dict[str, Any]]:
        self.messages, self.started = [], time.monotonic()
        for chunk in super().build_chunks(request):
            self.messages.append(RecordedMessage(at=time.monotonic() - self.started, chunk=chunk))
            yield chunk


def record(
    engine: RecordingEngine, request: BuildRequest, dockerfile_text: str, name: str, note: str
) -> str | None:
    """Record one build; the built image's id, if it built."""
    image_id = None
    try:
        for event in engine.build(request):
            image_id = event.image_id or image_id
    except EngineError as e:
        engine.messages.append(RecordedMessage(at=time.monotonic() - engine.started, engine_error=str(e)))
    recording = Recording(
        name=name,
        note=note,
        dockerfile_sha256=hashlib.sha256(dockerfile_text.encode()).hexdigest(),
        messages=tuple(engine.messages),
    )
    recording.dump(HERE / f"{name}.jsonl")
    print(f"{name}: {len(recording.messages)} messages in {recording.messages[-1].at:.1f} s", file=sys.stderr)
    return image_id


def request_for(pins: Path) -> tuple[BuildRequest, str]:
    project = find_project(REPO, pins)
    inputs = project.load("gfx942")
    dockerfile = render(inputs.definition, inputs.pins, inputs.arch, inputs.constraints, RenderOptions())
    context = make_context(context_files(dockerfile, inputs))
    labels = image_labels(project, inputs)
    return BuildRequest(context=context, labels=labels, network_mode="host"), dockerfile.text


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
    request, text = request_for(pins)
    engine = RecordingEngine(docker.from_env(timeout=600), "unix:///var/run/docker.sock")

    cold = BuildRequest(context=request.context, labels=request.labels, network_mode="host", no_cache=True)
    built = record(engine, cold, text, "success", "cold build (no cache) of the sample world, all 18 steps")
    assert built, "the cold build failed"
    code, inventory = engine.run(built, ["python3", "-I", "-c", INVENTORY_SCRIPT])
    assert code == 0, inventory
    (HERE / "inventory.txt").write_text(inventory)
    record(engine, request, text, "cached", "the same build again: every step a cache hit")

    bad = HERE / "bad-pins.toml"
    commit = [line for line in pins.read_text().splitlines() if "raviguptaamd/vllm" in line]
    assert commit, "no vllm url in the pins"
    text_pins = pins.read_text()
    vllm_commit = text_pins.split("[vllm]", 1)[1].split('commit = "', 1)[1][:40]
    bad.write_text(text_pins.replace(vllm_commit, BAD_SHA))
    bad_request, bad_text = request_for(bad)
    bad.unlink()
    record(engine, bad_request, bad_text, "failure", f"vllm pinned to {BAD_SHA}, which its repository lacks")

    sock = Path(f"/tmp/imagebuild-record-{os.getpid()}.sock")
    cutting_proxy("/var/run/docker.sock", sock, CUT_AFTER_S)
    proxied = RecordingEngine(docker.DockerClient(base_url=f"unix://{sock}", timeout=600), f"unix://{sock}")
    record(
        proxied,
        cold,
        text,
        "engine-lost",
        f"the connection to the engine cut {CUT_AFTER_S:g} s into a cold build",
    )
    proxied.close()
    engine.close()
    sock.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
