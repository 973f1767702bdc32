"""--compile-cache on the sample world: the real ccache in step 4 misses, then hits, and the image is the same.

The sample MoRI compiles six C++ kernel sets through ccache (sampleworld/sources/mori/setup.py). Two
builds from scratch (--no-cache) share a compile-cache directory: the first stores what it compiles,
the second finds every object. Both give the identity of the session's build without a cache, the
same history, and no ccache directory in any layer. The second runs while another server of the same
cache holds the address, as another build on the host would: its compiles go there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.build.compile_cache import CompileCache, serving
from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from tests import REPO
from tests.integration.image_support import CHECKOUT, remove_images

pytestmark = pytest.mark.docker
TAG = f"imagebuild-test/compile-cache:gfx942-{CHECKOUT}"
# Every build with a cache serves the one fixed address: the checkouts sharing this machine take turns.
TURNS = Path("/tmp/imagebuild-compile-cache-tests.lock")


@pytest.fixture
def the_address() -> Iterator[None]:
    with TURNS.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(pins: Path, record: Path, cache: Path) -> dict[str, object]:
    argv = ["build", "--pins", str(pins), "--network", "host", "--no-cache", "--tag", TAG]
    with contextlib.chdir(REPO):
        assert main([*argv, "--record", str(record), "--compile-cache", str(cache)]) == 0
    result: dict[str, object] = json.loads(record.read_text())
    return result


def test_a_second_build_hits_every_object_and_every_build_gives_one_identity(
    *,
    engine: DockerEngine,
    locked_pins: Path,
    sample_image: dict[str, object],
    tmp_path: Path,
    the_address: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    cache = tmp_path / "ccache"
    try:
        cold = build(locked_pins, tmp_path / "cold.json", cache)
        # The same directory, served as another build with it would serve it: the build joins that server.
        with serving(CompileCache(directory=cache), network="host") as other_build:
            warm = build(locked_pins, tmp_path / "warm.json", cache)
    finally:
        remove_images(TAG)
    assert "no compile asked the cache" not in capfd.readouterr().err  # step 4's compiles asked it
    cold_use, warm_use = cold["compile_cache"], warm["compile_cache"]
    assert isinstance(cold_use, dict)
    assert isinstance(warm_use, dict)
    # ccache looks up two entries per compile (manifest, object): six kernel sets.
    assert (cold_use["hits"], cold_use["misses"], cold_use["stored"]) == (0, 12, 12), cold_use
    assert other_build is not None
    assert (other_build.hits, other_build.misses, other_build.stored) == (12, 0, 0), other_build
    assert (warm_use["hits"], warm_use["misses"], warm_use["stored"]) == (0, 0, 0), warm_use
    assert float(str(warm_use["shared_seconds"])) > 0, warm_use
    assert cold_use["cache"] == str(cache)
    assert len([p for p in cache.rglob("*") if p.is_file()]) == 12
    # One image with the cache empty, full, or not there at all (the session's build: the same
    # checkout labels only while HEAD does not move during the session).
    assert cold["image_id"] == warm["image_id"], "objects from the cache gave another image"
    assert cold["labels"] == sample_image["labels"], "the checkout moved during the session"
    assert warm["image_id"] == sample_image["image_id"], "a build with the cache differs from one without"
    image = engine.inspect_image(str(warm["image_id"]))
    assert image.history == engine.inspect_image(str(sample_image["image_id"])).history
    code, listing = engine.run(
        str(warm["image_id"]), ["sh", "-c", "ls -d /tmp/ccache /root/.cache/ccache 2>&1; true"]
    )
    assert code == 0
    assert "No such file" in listing
    assert listing.count("No such file") == 2, listing
    code, checksum = engine.run(
        str(warm["image_id"]), ["python3", "-c", "import mori.ops; print(mori.ops.kernel_checksum())"]
    )
    assert code == 0, checksum
    assert int(checksum.strip().splitlines()[-1]) > 0
