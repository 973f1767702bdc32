"""Record the streams the progress tests replay beside record.py's builds: pull.jsonl and loopback/.

    python tests/data/build_streams/record_more.py

Needs the Docker engine and the sample world (``python -m sampleworld up``).

* ``pull.jsonl``: a real ``docker pull`` stream (``POST /images/create``). A small image of its own
  (FROM scratch, three layers of random bytes: 24 MB, 6 MB, 1 kB; no container runs) is pushed to the
  sample registry, removed from the engine and pulled back, every message kept with its time. The
  registry is on loopback, so the pull takes well under a second; the tests slow the recorded times.
* ``loopback/failure.jsonl``: the sample-world build without ``--network host``: the first step that
  fetches from the loopback stand-ins fails as a real build against a source on the build machine
  does. Built from a locked copy of the running world's pins, kept beside it (loopback/pins.toml).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

import docker

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record import RecordingEngine, imagebuild_main, record, up  # noqa: E402

LAYERS = (24_000_000, 6_000_000, 1_000)


def context() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        lines = ["FROM scratch"]
        for n, size in enumerate(LAYERS):
            info = tarfile.TarInfo(f"layer{n}.bin")
            info.size = size
            tar.addfile(info, io.BytesIO(os.urandom(size)))
            lines.append(f"COPY layer{n}.bin /layer{n}.bin")
        dockerfile = ("\n".join(lines) + "\n").encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    return buffer.getvalue()


def record_pull(registry: str) -> None:
    name = f"{registry}/imagebuild-test/pull-stream"
    api = docker.APIClient()
    for _ in api.build(
        fileobj=io.BytesIO(context()), custom_context=True, tag=f"{name}:1", rm=True, decode=True
    ):
        pass
    for _ in api.push(name, tag="1", stream=True, decode=True):
        pass
    api.remove_image(f"{name}:1", force=True)
    started = time.monotonic()
    note = f"docker pull of a 3-layer image ({', '.join(map(str, LAYERS))} bytes) from the sample registry"
    rows: list[dict[str, object]] = [{"name": "pull", "note": note, "dockerfile_sha256": ""}]
    for chunk in api.pull(name, tag="1", stream=True, decode=True):
        rows.append({"at": round(time.monotonic() - started, 3), "chunk": chunk})
    api.remove_image(f"{name}:1", force=True)
    (HERE / "pull.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8"
    )
    print(f"pull: {len(rows) - 1} messages in {time.monotonic() - started:.2f}s", file=sys.stderr)


def record_loopback() -> None:
    world = up()
    place = HERE / "loopback"
    place.mkdir(exist_ok=True)
    pins = place / "pins.toml"
    shutil.copy(world.pins_path, pins)
    shutil.copy(world.pins_path.with_name("pylock.toml"), place / "pylock.toml")
    assert imagebuild_main(["lock", "--pins", str(pins)]) == 0
    engine = RecordingEngine(docker.from_env(timeout=600), "unix:///var/run/docker.sock")
    note = (
        "the sample world's build on the default (bridge) network: its loopback sources refuse the connection"
    )
    record(engine, pins, "loopback/failure", note, network=None, no_cache=True)
    engine.close()


def main() -> None:
    world = json.loads((HERE.parents[2] / ".sampleworld" / "world.json").read_text())
    if "--loopback-only" not in sys.argv:
        record_pull(world["registry"])
    record_loopback()


if __name__ == "__main__":
    main()
