"""export and import against a fake engine: archive files, the manifest, and every way an archive fails."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard

from imagebuild import errors
from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.local_import import import_manifest
from imagebuild.distribute.shipped_importer import IMPORTER_NAME, importer_zipapp
from imagebuild.errors import ConfigError, EngineError, IntegrityError
from imagebuild.importer.manifest import FORMAT, FORMAT_VERSION
from imagebuild.testing import FakeEngine

TAG = "imagebuild/kimi-k3:gfx942"
LABELS = {
    "io.imagebuild.pin.mori": "3e4698a12b6488728b8ace490764ca7e00b19278",
    "io.imagebuild.arch": "gfx942",
}


def _export(tmp_path: Path, compression: Compression = Compression.ZSTD) -> tuple[FakeEngine, Path]:
    source = FakeEngine()
    source.add_saved_image(TAG, labels=LABELS)
    result = export_image(
        ExportOptions(image=TAG, output=tmp_path / "out", compression=compression),
        source,
        report=lambda _: None,
    )
    return source, result.manifest_path


def _manifest(path: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(path.read_text())
    return data


def _archive(manifest_path: Path) -> Path:
    return manifest_path.parent / str(_manifest(manifest_path)["archive"])


@pytest.mark.parametrize("compression", list(Compression))
def test_export_then_import_gives_the_same_image_id_and_its_tags(
    tmp_path: Path, compression: Compression
) -> None:
    source, manifest_path = _export(tmp_path, compression)
    node = FakeEngine()
    result = import_manifest(manifest_path, node, report=lambda _: None)
    assert result.image_id == source.tags[TAG]
    assert not result.already_present
    assert node.tags == {TAG: source.tags[TAG]}


def test_export_writes_archive_importer_statement_and_manifest_and_nothing_else(tmp_path: Path) -> None:
    source, manifest_path = _export(tmp_path)
    image_id = source.tags[TAG]
    archive = _archive(manifest_path)
    assert archive.name == f"kimi-k3-{image_id.removeprefix('sha256:')[:12]}.tar.zst"
    assert manifest_path.name == f"{archive.name}.json"
    statement_path = manifest_path.parent / f"{archive.name}.export.intoto.jsonl"
    assert sorted(p.name for p in manifest_path.parent.iterdir()) == sorted(
        [archive.name, manifest_path.name, IMPORTER_NAME, statement_path.name]
    )
    data = _manifest(manifest_path)
    # The statement: the archive is its subject, the image identity its predicate's; the manifest names it.
    statement = json.loads(statement_path.read_text())
    assert statement["subject"] == [{"name": archive.name, "digest": {"sha256": data["sha256"]}}]
    assert statement["predicate"]["image"]["identity"] == image_id
    assert statement["predicate"]["action"] == "export"
    assert data["attestations"] == {statement_path.name: hashlib.sha256(statement_path.read_bytes()).hexdigest()}
    assert statement_path.stat().st_mode & 0o044 == 0o044
    assert data["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert data["size"] == archive.stat().st_size
    assert data["image_id"] == image_id
    assert data["repo_tags"] == [TAG]
    assert data["pins"] == {"mori": LABELS["io.imagebuild.pin.mori"]}
    assert data["labels"] == LABELS
    assert data["compression"] == "zstd"
    assert data["format"] == FORMAT
    assert data["format_version"] == FORMAT_VERSION
    assert str(data["origin"]).endswith(f":{manifest_path.parent}")
    shipped = manifest_path.parent / IMPORTER_NAME
    assert shipped.read_bytes() == importer_zipapp()
    assert os.access(shipped, os.X_OK)
    assert archive.stat().st_mode & 0o044 == 0o044  # readable by the other users' jobs on the nodes


def test_an_interrupted_export_leaves_no_file_behind(tmp_path: Path) -> None:
    source = FakeEngine(interrupt_save_after=3)
    source.add_saved_image(TAG)
    output = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        export_image(ExportOptions(image=TAG, output=output), source, report=lambda _: None)
    assert not output.exists()  # nor the directory the export made


def test_export_refuses_an_unwritable_output_before_asking_the_engine(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    engine = FakeEngine()  # holds no image: reaching it would raise UnknownImageError instead
    with pytest.raises(ConfigError, match=r"--output .*a-file/out: cannot create it \(Not a directory\)"):
        export_image(ExportOptions(image=TAG, output=blocker / "out"), engine, report=lambda _: None)


def test_export_refuses_a_label_holding_a_credential(tmp_path: Path) -> None:
    source = FakeEngine()
    source.add_saved_image(
        TAG, labels={"org.opencontainers.image.source": "https://bot:hunter2@example.com/x.git"}
    )
    with pytest.raises(
        ConfigError, match=r"label org.opencontainers.image.source contains a credential-like"
    ):
        export_image(ExportOptions(image=TAG, output=tmp_path), source, report=lambda _: None)
    assert not list(tmp_path.glob("*.json"))


def test_import_of_a_present_image_only_tags_it(tmp_path: Path) -> None:
    source, manifest_path = _export(tmp_path)
    _archive(manifest_path).unlink()  # a node that has the image does not need the archive
    source.tags.clear()
    result = import_manifest(manifest_path, source, report=lambda _: None)
    assert result.already_present
    assert source.loads == 0
    assert source.tags == {TAG: result.image_id}


def _corrupt_one_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_one_byte_corruption_is_refused_with_nothing_tagged_or_left(tmp_path: Path, where: str) -> None:
    _, manifest_path = _export(tmp_path, Compression.GZIP)
    archive = _archive(manifest_path)
    size = archive.stat().st_size
    _corrupt_one_byte(archive, {"start": 20, "middle": size // 2, "end": size - 1}[where])
    node = FakeEngine()
    with pytest.raises(
        IntegrityError, match=r"sha256 mismatch \(expected [0-9a-f]{64}, got [0-9a-f]{64}\)"
    ) as e:
        import_manifest(manifest_path, node, report=lambda _: None)
    assert f"archive {archive}:" in str(e.value)
    assert "copy it again from" in str(e.value)
    assert e.value.exit_code == 7
    assert node.tags == {}
    assert node.image_ids() == frozenset()


def test_a_truncated_archive_is_refused_before_the_engine_reads_it(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    archive = _archive(manifest_path)
    with archive.open("r+b") as f:
        f.truncate(archive.stat().st_size // 2)
    node = FakeEngine()
    with pytest.raises(
        IntegrityError, match=r"bytes, the manifest says \d+ \(truncated, still being copied, or another archive under its name\)"
    ):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.loads == 0


def test_a_missing_archive_is_bad_input(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    _archive(manifest_path).unlink()
    with pytest.raises(ConfigError, match=r"archive .*: not found \(named by .*\); copy it again from"):
        import_manifest(manifest_path, FakeEngine(), report=lambda _: None)


def test_an_archive_of_another_image_is_refused_and_its_image_removed(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    data = _manifest(manifest_path)
    data["image_id"] = "sha256:" + "ab" * 32  # the manifest of another image beside this archive
    manifest_path.write_text(json.dumps(data))
    node = FakeEngine()
    with pytest.raises(
        IntegrityError, match=r"the engine loaded sha256:[0-9a-f]{64}, but .* says sha256:abab"
    ):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.image_ids() == frozenset()
    assert node.tags == {}


def test_an_image_that_was_present_before_a_refused_load_stays(tmp_path: Path) -> None:
    source, manifest_path = _export(tmp_path)
    data = _manifest(manifest_path)
    data["image_id"] = "sha256:" + "ab" * 32
    manifest_path.write_text(json.dumps(data))
    node = FakeEngine(
        images=list(source.images), saved=dict(source.saved)
    )  # the archive's image is already on the node
    with pytest.raises(IntegrityError):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.image_ids() == source.image_ids()


def test_an_engine_refusal_of_an_intact_archive_is_an_engine_error(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    node = FakeEngine(refuse_load="no space left on device")
    with pytest.raises(EngineError, match="no space left on device"):
        import_manifest(manifest_path, node, report=lambda _: None)


def test_an_image_the_engine_kept_from_a_failed_load_is_removed_so_the_next_import_loads_it(tmp_path: Path) -> None:
    """The containerd store keeps an image it stored and failed to unpack: left, it would pass as present."""
    _, manifest_path = _export(tmp_path)
    node = FakeEngine(manifest_ids=True, fail_unpack="failed to unpack loaded image: no space left on device")
    said: list[str] = []
    with pytest.raises(EngineError, match="failed to unpack loaded image"):
        import_manifest(manifest_path, node, report=said.append)
    digest = _manifest(manifest_path)["manifest_digest"]
    assert f"the engine kept {digest} of the failed load: removed, so the next import loads it again" in said
    assert node.images == []
    node.fail_unpack = None  # room made
    again = import_manifest(manifest_path, node, report=lambda _: None)
    assert not again.already_present
    assert node.loads == 2


def test_an_image_whose_load_broke_off_is_removed_or_loaded_again_never_taken_as_present(tmp_path: Path) -> None:
    """The containerd store keeps the record of an image whose load broke off, part of its content
    missing: inspect finds it, the image list does not, and it cannot run."""
    _, manifest_path = _export(tmp_path)
    digest = str(_manifest(manifest_path)["manifest_digest"])
    node = FakeEngine(manifest_ids=True, break_off_load="unexpected EOF")
    said: list[str] = []
    with pytest.raises(EngineError, match="unexpected EOF"):
        import_manifest(manifest_path, node, report=said.append)
    assert f"the engine kept {digest} of the failed load: removed, so the next import loads it again" in said
    assert not node.has_image(digest)
    # One a plain `docker load` left before: loaded again, which completes it.
    with pytest.raises(EngineError):
        node.load([_archive(manifest_path).read_bytes()])
    assert node.has_image(digest)
    assert digest not in node.image_ids()
    node.break_off_load = None
    said.clear()
    result = import_manifest(manifest_path, node, report=said.append)
    assert not result.already_present
    assert f"the engine holds {digest} with part of its content missing (a load that broke off): loading it again" in said
    assert digest in node.image_ids()
    assert node.tags == {TAG: digest}


def test_a_failed_load_leaves_an_image_that_was_there_before(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    other = FakeEngine()
    other.add_saved_image("other:1", labels={"io.imagebuild.arch": "gfx950"})
    node = FakeEngine(images=list(other.images), refuse_load="no space left on device")
    with pytest.raises(EngineError):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.image_ids() == other.image_ids()


def test_zstd_without_the_zstandard_module_or_the_zstd_tool_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped importer on a bare python3 has no zstandard module: it needs the zstd tool."""
    _, manifest_path = _export(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # `import zstandard` raises ImportError
    node = FakeEngine()
    with pytest.raises(
        EngineError,
        match=r"no zstandard module and no zstd tool is on PATH: install zstd on this node \(apt-get install zstd\), or export with --compress gzip",
    ):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.images == []


def test_an_archive_imports_on_the_containerd_store_by_its_manifest_digest(tmp_path: Path) -> None:
    source, manifest_path = _export(tmp_path)
    manifest = _manifest(manifest_path)
    node = FakeEngine(manifest_ids=True)  # Docker 29's default store: images are named by their manifest
    result = import_manifest(manifest_path, node, report=lambda _: None)
    assert result.image_id == source.tags[TAG] == manifest["image_id"]  # the identity, as exported
    assert result.engine_id == manifest["manifest_digest"] != result.image_id
    assert node.tags == {TAG: result.engine_id}
    assert node.inspect_image(TAG).identity == result.image_id
    again = import_manifest(manifest_path, node, report=lambda _: None)
    assert again.already_present
    assert node.loads == 1


def test_a_version_1_manifest_imports_on_a_graph_driver_store_but_not_on_the_containerd_store(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    old = {k: v for k, v in _manifest(manifest_path).items() if k not in ("manifest_digest", "layers")}
    manifest_path.write_text(json.dumps({**old, "format_version": 1}))
    with pytest.raises(ConfigError, match=r"format version 1 names no OCI manifest, which the containerd image store"):
        import_manifest(manifest_path, FakeEngine(manifest_ids=True), report=lambda _: None)
    assert import_manifest(manifest_path, FakeEngine(), report=lambda _: None).engine_id == old["image_id"]


def test_export_from_the_containerd_store_names_the_archive_by_the_identity(tmp_path: Path) -> None:
    _, first = _export(tmp_path / "a")
    node = FakeEngine(manifest_ids=True)
    import_manifest(first, node, report=lambda _: None)
    result = export_image(ExportOptions(image=TAG, output=tmp_path / "b"), node, report=lambda _: None)
    again = _manifest(first)
    assert result.manifest.image_id == again["image_id"]
    assert result.manifest.manifest_digest == again["manifest_digest"]
    assert result.manifest.archive.endswith(str(again["archive"]).rsplit("-", 1)[1])  # <name>-<identity 12>


def test_an_export_whose_identity_the_store_did_not_give_takes_it_from_the_saved_config(tmp_path: Path) -> None:
    """A containerd store imagebuild cannot read (another user's root, an engine elsewhere): the
    archive is still named by the identity, and its build record's documents travel with it."""
    _, first = _export(tmp_path / "a")
    node = FakeEngine(manifest_ids=True)
    import_manifest(first, node, report=lambda _: None)
    unread = node.inspect_image(TAG)
    node.images[node.images.index(unread)] = replace(unread, config_digest="", identity_unknown="cannot read it")
    lines: list[str] = []
    result = export_image(ExportOptions(image=TAG, output=tmp_path / "b"), node, report=lines.append)
    identity = str(_manifest(first)["image_id"])
    assert result.manifest.image_id == identity
    assert result.manifest.archive.endswith(f"-{identity[7:19]}.tar.zst")  # by the identity, not the engine ID
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(
        [result.manifest.archive, f"{result.manifest.archive}.json", f"{result.manifest.archive}.export.intoto.jsonl", IMPORTER_NAME]
    )
    assert any("its identity, from the config the engine saved" in line for line in lines)


def _with_archive_names(manifest_path: Path, names: list[str], **changes: object) -> None:
    """Rewrite the archive as a hostile one would be: its manifest.json names ``names``; the manifest
    beside it still matches its size and sha256 (whoever writes one can write the other)."""
    import io
    import tarfile

    archive = _archive(manifest_path)
    data = archive.read_bytes()
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(raw)) as source, tarfile.open(fileobj=out, mode="w") as target:
        for member in source:
            content = source.extractfile(member).read() if member.isreg() else None  # type: ignore[union-attr]
            if member.name == "manifest.json" and content is not None:
                entries = json.loads(content)
                entries[0]["RepoTags"] = names
                content = json.dumps(entries).encode()
                member.size = len(content)
            target.addfile(member, io.BytesIO(content) if content is not None else None)
    archive.write_bytes(zstandard.ZstdCompressor().compress(out.getvalue()))
    manifest = _manifest(manifest_path)
    manifest.update(
        sha256=hashlib.sha256(archive.read_bytes()).hexdigest(), size=archive.stat().st_size,
        uncompressed_size=len(out.getvalue()), **changes,
    )  # fmt: skip
    manifest_path.write_text(json.dumps(manifest))


def _victim() -> tuple[FakeEngine, str]:
    node = FakeEngine()
    victim = node.add_saved_image("victim:latest")
    return node, victim


def test_an_archive_naming_another_images_tag_does_not_move_it(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    _with_archive_names(manifest_path, ["victim:latest", "planted:new"])
    node, victim = _victim()
    lines: list[str] = []
    result = import_manifest(manifest_path, node, report=lines.append)
    assert node.tag_table() == {"victim:latest": victim, TAG: result.engine_id}  # no planted, no hold name
    assert node.archive_names == []  # the engine never saw them (tests/unit/test_import_hostile.py: every way)


def test_a_refused_hostile_archive_leaves_the_victim_and_its_tag(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    _with_archive_names(manifest_path, ["victim:latest"], image_id="sha256:" + "9" * 64, manifest_digest="sha256:" + "8" * 64)
    node, victim = _victim()
    with pytest.raises(IntegrityError, match="do not belong together"):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.tag_table() == {"victim:latest": victim}
    assert node.archive_names == []
    assert node.has_image(victim)
    assert len(node.images) == 1  # the loaded image is gone


@pytest.mark.parametrize("kind", ["fifo", "device-link"])
def test_an_archive_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path: Path, kind: str) -> None:
    _, manifest_path = _export(tmp_path)
    archive = _archive(manifest_path)
    archive.unlink()
    if kind == "fifo":
        os.mkfifo(archive)
    else:
        archive.symlink_to("/dev/zero")
    node = FakeEngine()
    with pytest.raises(ConfigError, match="not a regular file"):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.loads == 0


def test_a_manifests_origin_with_control_characters_is_refused_never_printed(tmp_path: Path) -> None:
    """A forged origin could end a line and print a fake success; it never reaches a message or a script."""
    _, manifest_path = _export(tmp_path)
    manifest = _manifest(manifest_path)
    manifest["origin"] = "host:/x\n\x1b[2Kimagebuild-import: imported OK\u202e"
    manifest_path.write_text(json.dumps(manifest))
    _archive(manifest_path).unlink()
    with pytest.raises(ConfigError, match=r"'origin' contains a control character, U\+000A; export the image again$") as e:
        import_manifest(manifest_path, FakeEngine(), report=lambda _: None)
    assert str(e.value).isprintable()


def test_export_to_a_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = FakeEngine()
    source.add_saved_image(TAG, labels=LABELS)
    out = tmp_path / "out"

    def full(*_: object, **__: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("imagebuild.distribute.export.portable_archive", full)
    with pytest.raises(errors.ImageBuildError, match=r"^cannot write the archive in .*\(No space left on device\); free space there") as e:
        export_image(ExportOptions(image=TAG, output=out), source, report=lambda _: None)
    assert "\n" not in str(e.value)
    assert not out.exists()  # nor the directory the export made


def test_an_archive_that_decompresses_past_its_declared_size_is_stopped(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path)
    manifest = _manifest(manifest_path)
    assert isinstance(manifest["uncompressed_size"], int)
    assert manifest["uncompressed_size"] > manifest["size"]  # type: ignore[operator]
    manifest_path.write_text(json.dumps({**manifest, "uncompressed_size": 4096}))
    node = FakeEngine()
    with pytest.raises(IntegrityError, match=r"decompresses past the 4096 bytes its manifest declares"):
        import_manifest(manifest_path, node, report=lambda _: None)
    assert node.images == []
