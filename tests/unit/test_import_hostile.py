"""`imagebuild import` of hostile archives against the FakeEngine, which loads real docker-save tars and
applies the names they carry as docker load does: no archive-supplied name ever reaches it, a bomb is
stopped one byte past its declared size, and a real export reaches the engine unchanged.

Each hostile archive comes with a manifest that matches it (size, sha256, uncompressed size): whoever
can write the one can write the other, so only the importer's own checks stand in the way.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import zstandard

from imagebuild.cli import main
from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.local_import import import_manifest
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import IntegrityError
from imagebuild.importer.failures import IntegrityFailure
from imagebuild.importer.load_stream import CHUNK_SIZE, engine_tar
from imagebuild.importer.manifest import parse_manifest
from imagebuild.importer.tar_filter import TAR_END
from imagebuild.testing import FakeEngine

TAG = "imagebuild/kimi-k3:gfx942"
VICTIM = "victim:latest"
Members = list[tuple[tarfile.TarInfo, bytes | None]]


def _export(tmp_path: Path, compression: Compression = Compression.ZSTD, size: int = 3 << 20) -> Path:
    source = FakeEngine()
    source.add_saved_image(TAG, size=size)
    return export_image(
        ExportOptions(image=TAG, output=tmp_path / "out", compression=compression), source, report=lambda _: None
    ).manifest_path


def _manifest(path: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(path.read_text())
    return data


def _plain_tar(manifest_path: Path) -> bytes:
    """The tar inside the exported archive, as export wrote it."""
    data = (manifest_path.parent / str(_manifest(manifest_path)["archive"])).read_bytes()
    compression = _manifest(manifest_path)["compression"]
    if compression == "zstd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return gzip.decompress(data) if compression == "gzip" else data


def _members(raw: bytes) -> Members:
    with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
        return [(m, (archive.extractfile(m) or io.BytesIO()).read() if m.isreg() else None) for m in archive]


def _write_tar(members: Members, fmt: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as archive:
        for info, content in members:
            if content is not None:
                info.size = len(content)
            archive.addfile(info, io.BytesIO(content) if content is not None else None)
    return out.getvalue()


def _replace_archive(manifest_path: Path, stored: bytes, *, declared: int | None, **changes: object) -> None:
    """Write ``stored`` as the archive, and a manifest that matches it."""
    archive = manifest_path.parent / str(_manifest(manifest_path)["archive"])
    archive.write_bytes(stored)
    manifest = {**_manifest(manifest_path), "sha256": hashlib.sha256(stored).hexdigest(), "size": len(stored), **changes}
    if manifest["format_version"] == 1:
        manifest.pop("layers")  # version 1 predates the list
    if declared is None:
        manifest.pop("uncompressed_size")
    else:
        manifest["uncompressed_size"] = declared
    manifest_path.write_text(json.dumps(manifest))


def _hostile(manifest_path: Path, change: Callable[[Members], Members], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """The exported archive rewritten by ``change`` (zstd, as export writes it); returns its plain tar."""
    raw = _write_tar(change(_members(_plain_tar(manifest_path))), fmt)
    _replace_archive(manifest_path, zstandard.ZstdCompressor().compress(raw), declared=len(raw))
    return raw


def _named(content: bytes | None) -> bytes:
    entries = json.loads(content or b"")
    entries[0]["RepoTags"] = [VICTIM, "planted:new"]
    return json.dumps(entries).encode()


def _manifest_as(name: str, *, pax_path: bool = False) -> Callable[[Members], Members]:
    """The archive's manifest.json naming the victim, stored under ``name`` (or a PAX path record)."""

    def change(members: Members) -> Members:
        out: Members = []
        for info, content in members:
            if info.name != "manifest.json":
                out.append((info, content))
                continue
            renamed = tarfile.TarInfo("decoy" if pax_path else name)
            if pax_path:
                renamed.pax_headers = {"path": name}
            out.append((renamed, _named(content)))
        return out

    return change


def _duplicated(members: Members) -> Members:
    """An innocent manifest.json first, the naming one after it: the last one wins in the untar."""
    (manifest,) = [content for info, content in members if info.name == "manifest.json"]
    return [*members, (tarfile.TarInfo("./manifest.json"), _named(manifest))]


def _node_with_victim() -> tuple[FakeEngine, str]:
    node = FakeEngine()
    return node, node.add_saved_image(VICTIM)


HOSTILE = [
    pytest.param(_manifest_as("manifest.json"), tarfile.PAX_FORMAT, id="repo-tags"),
    pytest.param(_manifest_as("manifest.json", pax_path=True), tarfile.PAX_FORMAT, id="pax-path"),
    pytest.param(_manifest_as("y" * 110 + "/../manifest.json"), tarfile.GNU_FORMAT, id="gnu-longname"),
    pytest.param(_manifest_as("./manifest.json"), tarfile.USTAR_FORMAT, id="dot-slash"),
    pytest.param(_duplicated, tarfile.PAX_FORMAT, id="duplicate-manifest"),
]


@pytest.mark.parametrize(("change", "fmt"), HOSTILE)
def test_names_in_a_hostile_archive_never_reach_the_engine(
    tmp_path: Path, change: Callable[[Members], Members], fmt: int
) -> None:
    manifest_path = _export(tmp_path)
    raw = _hostile(manifest_path, change, fmt)
    direct = FakeEngine()
    direct.load([raw])
    assert VICTIM in direct.archive_names  # the fake does see the name when it is sent the archive as is
    node, victim = _node_with_victim()
    lines: list[str] = []
    result = import_manifest(manifest_path, node, report=lines.append)
    assert node.archive_names == []  # never applied, not merely undone
    assert node.tag_table() == {VICTIM: victim, TAG: result.engine_id}
    assert not any("put back" in line for line in lines)
    assert VICTIM.encode() not in node.received[0]


def test_index_json_name_annotations_never_reach_the_containerd_store(tmp_path: Path) -> None:
    manifest_path = _export(tmp_path)

    def annotate(members: Members) -> Members:
        out: Members = []
        for info, content in members:
            if info.name != "index.json":
                out.append((info, content))
                continue
            index = json.loads(content or b"")
            index["manifests"][0]["annotations"] = {"io.containerd.image.name": f"docker.io/library/{VICTIM}"}
            out.append((info, json.dumps(index).encode()))
        return out

    raw = _hostile(manifest_path, annotate)
    direct = FakeEngine(manifest_ids=True)
    direct.load([raw])
    assert direct.archive_names == [f"docker.io/library/{VICTIM}"]
    node = FakeEngine(manifest_ids=True)
    result = import_manifest(manifest_path, node, report=lambda _: None)
    assert node.archive_names == []
    assert node.tag_table() == {TAG: result.engine_id}


class _NamingEngine(FakeEngine):
    """An engine that names what it loads by some other way than the archive (the second line's case)."""

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        loaded = super().load(chunks)
        self.tags[VICTIM] = self.tags["planted:new"] = loaded[0]
        return loaded


def test_a_tag_the_engine_applied_anyway_is_undone_by_the_second_line(tmp_path: Path) -> None:
    manifest_path = _export(tmp_path)
    node = _NamingEngine()
    victim = node.add_saved_image(VICTIM)
    lines: list[str] = []
    result = import_manifest(manifest_path, node, report=lines.append)
    assert node.tag_table() == {VICTIM: victim, TAG: result.engine_id}  # no planted, no hold name
    assert any("named planted:new, victim:latest: those tags are put back" in line for line in lines), lines


class _SharedEngine(_NamingEngine):
    """While the load runs, another client of the engine tags and moves names of its own."""

    bystander = ""

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        loaded = super().load(chunks)
        self.tags["theirs:new"] = self.tags["theirs:moved"] = self.bystander
        return loaded


def test_the_second_line_undoes_only_names_of_what_the_load_loaded(tmp_path: Path) -> None:
    manifest_path = _export(tmp_path)
    node = _SharedEngine()
    victim = node.add_saved_image(VICTIM)
    before = node.add_saved_image("theirs:moved")
    node.bystander = node.add_saved_image("theirs:other")
    result = import_manifest(manifest_path, node, report=lambda _: None)
    assert before != node.bystander
    assert node.tag_table() == {
        VICTIM: victim,
        TAG: result.engine_id,
        "theirs:other": node.bystander,
        "theirs:new": node.bystander,  # another client's names: left as that client made them
        "theirs:moved": node.bystander,
    }


@pytest.mark.parametrize("compression", list(Compression))
def test_a_real_export_reaches_the_engine_as_the_tar_export_wrote(tmp_path: Path, compression: Compression) -> None:
    manifest_path = _export(tmp_path, compression)
    node = FakeEngine()
    import_manifest(manifest_path, node, report=lambda _: None)
    assert node.received == [_plain_tar(manifest_path)]  # rewritten members included: they named nothing


class _CountingEngine(FakeEngine):
    """Counts what the engine was sent before the stream stopped."""

    sent = 0

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        for chunk in chunks:
            self.sent += len(chunk)
        msg = "the stream was not stopped"
        raise AssertionError(msg)


def _bomb(plain_tar: bytes, compression: str, zeros: int = 64 << 20) -> bytes:
    """The tar's members and one more of ``zeros`` bytes: a small archive, a huge tar.

    One gzip member (zstd frame) per MiB of zeros, as ``cat a.gz b.gz`` makes: both readers go on.
    """
    member = tarfile.TarInfo("bomb")
    member.size = zeros

    def compress(data: bytes) -> bytes:
        return zstandard.ZstdCompressor().compress(data) if compression == "zstd" else gzip.compress(data, 9, mtime=0)

    head = plain_tar[: len(plain_tar) - len(TAR_END)] + member.tobuf(tarfile.USTAR_FORMAT)
    return compress(head) + compress(bytes(1 << 20)) * (zeros >> 20) + compress(TAR_END)


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
def test_a_bomb_is_stopped_right_past_its_declared_size_with_exit_7(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], compression: str
) -> None:
    manifest_path = _export(tmp_path, Compression(compression), size=1 << 12)
    declared = len(_plain_tar(manifest_path))
    bomb = _bomb(_plain_tar(manifest_path), compression)
    assert len(bomb) < (64 << 20) // 500  # a small archive, 64 MiB of tar
    _replace_archive(manifest_path, bomb, declared=declared)
    node = _CountingEngine()
    victim = node.add_saved_image(VICTIM)
    monkeypatch.setattr(DockerEngine, "from_env", classmethod(lambda cls, timeout=600: node))
    assert main(["import", str(manifest_path)]) == 7
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == (
        f"imagebuild: error: archive {manifest_path.parent / str(_manifest(manifest_path)['archive'])}: decompresses "
        f"past the {declared} bytes its manifest declares; nothing was loaded; copy it again"
    )
    assert node.sent < declared  # no byte past the bound, nor the tar's end blocks
    assert node.image_ids() == {victim}
    assert node.tag_table() == {VICTIM: victim}


def test_a_version_1_archive_is_bounded_by_a_multiple_of_its_size(tmp_path: Path) -> None:
    manifest_path = _export(tmp_path, size=1 << 12)
    bomb = _bomb(_plain_tar(manifest_path), "zstd", zeros=80 << 20)
    assert 32 * len(bomb) < 64 << 20  # so the bound is the 64 MiB floor
    _replace_archive(manifest_path, bomb, declared=None, format_version=1)
    with pytest.raises(IntegrityError, match=r"decompresses past 67108864 bytes, 32 times its size \(a version 1 manifest declares no size\)"):
        import_manifest(manifest_path, FakeEngine(), report=lambda _: None)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(lambda raw: raw[: len(raw) - len(TAR_END)], r"the tar ends early \(at byte \d+, before its end-of-archive blocks\)", id="truncated"),
        pytest.param(lambda raw: raw[:148] + b"0000000\0" + raw[156:], r"the tar header at byte 0 has a wrong checksum", id="bad-checksum"),
    ],
)
def test_a_damaged_tar_with_a_matching_manifest_is_refused_with_exit_7(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    damage: Callable[[bytes], bytes], message: str,
) -> None:  # fmt: skip
    manifest_path = _export(tmp_path)
    raw = damage(_plain_tar(manifest_path))
    _replace_archive(manifest_path, zstandard.ZstdCompressor().compress(raw), declared=len(raw))
    node = FakeEngine()
    monkeypatch.setattr(DockerEngine, "from_env", classmethod(lambda cls, timeout=600: node))
    assert main(["import", str(manifest_path)]) == 7
    assert re.search(message, capsys.readouterr().err)
    assert node.images == []


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
def test_the_stream_stops_within_a_chunk_past_the_declared_size(tmp_path: Path, compression: str) -> None:
    """What reaches the engine ends less than a chunk before the bound: the stop is the bound, not earlier."""
    manifest_path = _export(tmp_path, Compression(compression), size=1 << 12)
    bomb = _bomb(_plain_tar(manifest_path), compression)
    declared = 5 << 20
    _replace_archive(manifest_path, bomb, declared=declared)
    manifest = parse_manifest(_manifest(manifest_path), "m.json")
    sent: list[int] = []

    def send_all() -> None:
        chunks = iter([bomb[i : i + CHUNK_SIZE] for i in range(0, len(bomb), CHUNK_SIZE)])
        sent.extend(len(chunk) for chunk in engine_tar(chunks, manifest, Path("a")))

    with pytest.raises(IntegrityFailure, match=f"decompresses past the {declared} bytes"):
        send_all()
    assert declared - 2 * CHUNK_SIZE < sum(sent) <= declared
