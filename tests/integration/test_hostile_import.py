"""Hostile archives against real engines: a name the archive carries never reaches the engine's tag
table, and a zstd bomb is stopped before a Docker 26 engine (which could decompress zstd itself) loads
anything. Each archive comes with a manifest that matches it, as whoever writes one can write both.

The donor image of the sample world plus a label (a leaf image of its own) stands in for the archive's image.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from imagebuild.cli import main
from imagebuild.importer.tar_filter import TAR_END
from sampleworld.engine_matrix import MatrixEngine
from sampleworld.engines import NodeEngine
from sampleworld.world import World

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

VICTIM = "imagebuild-test-hostile/victim:latest"
PLANTED = "imagebuild-test-hostile/planted:new"


def _docker(host: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["docker", *args], env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "DOCKER_HOST": host},
        input=stdin, capture_output=True, timeout=600, check=False,
    )  # fmt: skip


def _image_ids(host: str) -> set[str]:
    return set(_docker(host, "images", "-aq", "--no-trunc").stdout.decode().split())


@pytest.fixture(scope="module")
def donor_export(world: World, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image of this module's own (the donor plus a label: a leaf no other test builds on, so every
    engine can remove it before a load) exported once (zstd); returns its manifest."""
    output = tmp_path_factory.mktemp("hostile")
    dockerfile = f"FROM {world.donor_image}\nLABEL io.imagebuild.test=hostile-import\n"
    built = subprocess.run(
        ["docker", "build", "--quiet", "-t", "imagebuild-test-hostile/archive:leaf", "-"],
        input=dockerfile.encode(), capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr.decode()
    assert main(["export", "imagebuild-test-hostile/archive:leaf", "--output", str(output)]) == 0
    (manifest,) = output.glob("*.json")
    return manifest


def _copy_with_tar(manifest_path: Path, where: Path, change: Callable[[bytes], bytes]) -> Path:
    """The export in ``where``, its tar rewritten by ``change``, with a manifest that matches it."""
    manifest = json.loads(manifest_path.read_text())
    stored = (manifest_path.parent / manifest["archive"]).read_bytes()
    raw = change(zstandard.ZstdDecompressor().decompressobj().decompress(stored))
    archive = zstandard.ZstdCompressor().compress(raw)
    (where / manifest["archive"]).write_bytes(archive)
    # The importer and the attestation files the manifest names (import checks their digests first).
    for name in ("imagebuild-import.pyz", *manifest.get("attestations", {})):
        (where / name).write_bytes((manifest_path.parent / name).read_bytes())
    manifest.update(sha256=hashlib.sha256(archive).hexdigest(), size=len(archive), uncompressed_size=len(raw))
    copied = where / manifest_path.name
    copied.write_text(json.dumps(manifest))
    return copied


def _naming_the_victim(raw: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw)) as source, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as target:
        for member in source:
            content = (source.extractfile(member) or io.BytesIO()).read() if member.isreg() else None
            if member.name == "manifest.json" and content is not None:
                entries = json.loads(content)
                entries[0]["RepoTags"] = [VICTIM, PLANTED]
                content = json.dumps(entries).encode()
                member = tarfile.TarInfo("decoy")  # noqa: PLW2901
                member.pax_headers = {"path": "./manifest.json"}
                member.size = len(content)
            target.addfile(member, io.BytesIO(content) if content is not None else None)
    return out.getvalue()


def test_a_victim_tag_in_the_archive_never_reaches_the_real_engine(
    donor_export: Path, node_engines: Callable[[str], NodeEngine], tmp_path: Path
) -> None:
    node = node_engines("hostile")
    one_file = io.BytesIO()
    with tarfile.open(fileobj=one_file, mode="w") as tar:
        info = tarfile.TarInfo("victim")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"victim"))
    victim = _docker(node.host, "import", "-", VICTIM, stdin=one_file.getvalue()).stdout.decode().strip()
    assert victim.startswith("sha256:")
    manifest_path = _copy_with_tar(donor_export, tmp_path, _naming_the_victim)
    identity = json.loads(manifest_path.read_text())["image_id"]
    _docker(node.host, "image", "rm", "--force", identity)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "imagebuild-import.pyz"), str(manifest_path)],
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": node.host}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "put back" not in done.stderr  # the tag table never showed the archive's names
    assert _docker(node.host, "image", "inspect", "--format", "{{.Id}}", VICTIM).stdout.decode().strip() == victim
    assert _docker(node.host, "image", "inspect", PLANTED).returncode != 0
    _docker(node.host, "image", "rm", "--force", VICTIM)


def _bomb(raw: bytes, zeros: int = 256 << 20) -> bytes:
    """The tar with one more member of ``zeros`` bytes before its end blocks."""
    member = tarfile.TarInfo("bomb")
    member.size = zeros
    return raw[: len(raw) - len(TAR_END)] + member.tobuf(tarfile.USTAR_FORMAT) + bytes(zeros) + TAR_END


@pytest.mark.parametrize("name", ["docker26-overlay2", "docker26-containerd", "forky-containerd"])
def test_a_zstd_bomb_is_stopped_before_a_newer_engine_loads_anything(
    *, donor_export: Path, docker_engine_matrix: list[MatrixEngine], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str,
) -> None:  # fmt: skip
    engine = next(e for e in docker_engine_matrix if e.name == name)
    declared = json.loads(donor_export.read_text())["uncompressed_size"]
    manifest_path = _copy_with_tar(donor_export, tmp_path, _bomb)
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "uncompressed_size": declared}))
    assert manifest["size"] < 1 << 20  # a small archive, 256 MiB of tar
    for engine_id in (manifest["image_id"], manifest["manifest_digest"]):
        _docker(engine.docker_host, "image", "rm", "--force", engine_id)
    assert _docker(engine.docker_host, "image", "inspect", manifest["image_id"]).returncode != 0, "not removed"
    before = _image_ids(engine.docker_host)
    monkeypatch.setenv("DOCKER_HOST", engine.docker_host)
    capsys.readouterr()
    assert main(["import", str(manifest_path)]) == 7
    assert f"decompresses past the {declared} bytes its manifest declares; nothing was loaded" in capsys.readouterr().err
    assert _image_ids(engine.docker_host) == before
