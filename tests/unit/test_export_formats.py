"""export's other formats on small synthetic images: the rootfs flattener, the OCI layout writer, the
runtime files a squashfs carries, the manifest's kind, and the importer's refusals and --check-only."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.formats import ExportFormat
from imagebuild.distribute.local_import import import_manifest
from imagebuild.distribute.oci_layout import write_oci_layout
from imagebuild.distribute.rootfs import RootfsError, flatten_layers
from imagebuild.distribute.runtime_files import RuntimeFilesError, runtime_files
from imagebuild.distribute.spooled_image import SpooledImage, SpooledLayer
from imagebuild.errors import ConfigError, IntegrityError
from imagebuild.importer import cli
from imagebuild.importer.failures import BadInput
from imagebuild.importer.manifest import parse_manifest
from imagebuild.importer.podman_load import load_failure
from imagebuild.testing import FakeEngine
from tests.prerequisites import skip_or_fail

# (name, type, content or link target); "d" directory, "f" file, "h" hard link, "s" symlink
Entry = tuple[str, str, str]


def _layer(path: Path, entries: Sequence[Entry]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, value in entries:
            info = tarfile.TarInfo(name)
            info.mtime, info.uname = 1700000000, "someone"
            if kind == "d":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "f":
                info.size = len(value.encode())
                tar.addfile(info, io.BytesIO(value.encode()))
            else:
                info.type, info.linkname = (tarfile.LNKTYPE if kind == "h" else tarfile.SYMTYPE), value
                tar.addfile(info)
    return path


def _flat(tmp_path: Path, *layers: Sequence[Entry], extra: dict[str, bytes] | None = None) -> bytes:
    paths = [_layer(tmp_path / f"l{n}.tar", entries) for n, entries in enumerate(layers)]
    out = io.BytesIO()
    flatten_layers(paths, out, extra=extra)
    return out.getvalue()


def _members(data: bytes) -> dict[str, tuple[str, str]]:
    """name -> (what, content or link target)."""
    found: dict[str, tuple[str, str]] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar:
            if m.isreg():
                source = tar.extractfile(m)
                assert source is not None
                found[m.name] = ("file", source.read().decode())
            elif m.islnk():
                found[m.name] = ("hardlink", m.linkname)
            elif m.issym():
                found[m.name] = ("symlink", m.linkname)
            elif m.isdir():
                found[m.name] = ("dir", "")
    return found


BASE: list[Entry] = [
    ("etc", "d", ""), ("etc/keep", "f", "k"), ("etc/gone", "f", "g"),
    ("opt", "d", ""), ("opt/a", "f", "a"), ("opt/sub", "d", ""), ("opt/sub/b", "f", "b"),
    ("srv", "d", ""), ("srv/x", "f", "x"),
]  # fmt: skip


def test_whiteouts_remove_lower_entries_and_opaque_directories_are_emptied(tmp_path: Path) -> None:
    upper: list[Entry] = [
        ("etc/.wh.gone", "f", ""), ("opt/.wh..wh..opq", "f", ""), ("opt/new", "f", "n"), ("srv/.wh.x", "f", ""),
    ]  # fmt: skip
    members = _members(_flat(tmp_path, BASE, upper))
    assert set(members) == {"etc", "etc/keep", "opt", "opt/new", "srv"}
    assert not any(".wh." in name for name in members)


def test_a_whiteout_does_not_hide_an_entry_of_its_own_layer(tmp_path: Path) -> None:
    upper: list[Entry] = [("opt/.wh..wh..opq", "f", ""), ("opt/a", "f", "again"), ("opt/.wh.a", "f", "")]
    members = _members(_flat(tmp_path, BASE, upper))
    assert members["opt/a"] == ("file", "again")
    assert "opt/sub" not in members


def test_a_whited_out_directory_goes_with_everything_under_it(tmp_path: Path) -> None:
    members = _members(_flat(tmp_path, BASE, [("opt/.wh.sub", "f", "")]))
    assert "opt/sub" not in members
    assert "opt/sub/b" not in members
    assert "opt/a" in members


def test_a_file_over_a_directory_replaces_it_and_its_children(tmp_path: Path) -> None:
    members = _members(_flat(tmp_path, BASE, [("opt/sub", "f", "now a file")]))
    assert members["opt/sub"] == ("file", "now a file")
    assert "opt/sub/b" not in members


def test_a_directory_over_a_directory_keeps_the_lower_children(tmp_path: Path) -> None:
    members = _members(_flat(tmp_path, BASE, [("opt", "d", ""), ("opt/c", "f", "c")]))
    assert {"opt/a", "opt/sub/b", "opt/c"} <= set(members)


def test_hard_links_stay_links_to_the_first_name_in_the_output(tmp_path: Path) -> None:
    layer: list[Entry] = [("usr", "d", ""), ("usr/z-file", "f", "shared"), ("usr/a-link", "h", "usr/z-file")]
    data = _flat(tmp_path, layer)
    members = _members(data)
    # Sorted output: a-link comes first, so it holds the content and z-file links to it.
    assert members["usr/a-link"] == ("file", "shared")
    assert members["usr/z-file"] == ("hardlink", "usr/a-link")


def test_a_hard_link_keeps_its_content_when_the_linked_name_is_replaced_later(tmp_path: Path) -> None:
    lower: list[Entry] = [("usr", "d", ""), ("usr/f", "f", "old"), ("usr/h", "h", "usr/f")]
    members = _members(_flat(tmp_path, lower, [("usr/f", "f", "new")]))
    assert members["usr/f"] == ("file", "new")
    assert members["usr/h"] == ("file", "old")


def test_a_hard_link_to_nothing_is_refused_naming_the_layer(tmp_path: Path) -> None:
    with pytest.raises(RootfsError, match=r"layer 0 \(l0.tar\): hard link 'usr/h' names 'usr/missing'"):
        _flat(tmp_path, [("usr", "d", ""), ("usr/h", "h", "usr/missing")])


def test_symlinks_are_kept_as_written(tmp_path: Path) -> None:
    members = _members(_flat(tmp_path, [("bin", "s", "usr/bin"), ("abs", "s", "/etc/keep")]))
    assert members["bin"] == ("symlink", "usr/bin")
    assert members["abs"] == ("symlink", "/etc/keep")


def test_the_output_is_sorted_parents_first_with_fixed_headers_and_the_same_bytes_each_time(tmp_path: Path) -> None:
    first = _flat(tmp_path, BASE, [("etc/.wh.gone", "f", "")])
    assert first == _flat(tmp_path, BASE, [("etc/.wh.gone", "f", "")])
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert {(m.mtime, m.uname, m.gname) for m in members} == {(0, "", "")}


def test_extra_files_replace_entries_and_get_their_parents(tmp_path: Path) -> None:
    members = _members(_flat(tmp_path, BASE, extra={"etc/keep": b"replaced", "ch/environment": b"A=1\n"}))
    assert members["etc/keep"] == ("file", "replaced")
    assert members["ch"] == ("dir", "")
    assert members["ch/environment"] == ("file", "A=1\n")


def _spooled(tmp_path: Path, layers: Sequence[bytes], config: dict[str, object]) -> SpooledImage:
    spooled = []
    for n, data in enumerate(layers):
        path = tmp_path / f"layer{n}.tar"
        path.write_bytes(data)
        spooled.append(SpooledLayer(path=path, diff_id="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data)))
    config = {**config, "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in spooled]}}
    config_bytes = json.dumps(config).encode()
    return SpooledImage(config_bytes=config_bytes, config=config, layers=tuple(spooled))


def test_the_oci_layout_names_every_blob_by_its_digest_and_the_config_is_the_identity(tmp_path: Path) -> None:
    one, two = b"layer one" * 100, b"layer two" * 100
    image = _spooled(tmp_path, [one, two, one], {"config": {"Env": ["A=1"]}})
    out = io.BytesIO()
    layout = write_oci_layout(image, out)
    assert layout.config_digest == image.identity
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        names = [m.name for m in tar.getmembers()]
        assert {(m.mtime, m.uid, m.uname) for m in tar.getmembers()} == {(0, 0, "")}
        for m in tar.getmembers():
            if m.isreg():
                source = tar.extractfile(m)
                assert source is not None
                files[m.name] = source.read()
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert name == "blobs/sha256/" + hashlib.sha256(data).hexdigest()
    assert names[:3] == ["blobs", "blobs/sha256", f"blobs/sha256/{image.identity[7:]}"]
    assert names[-3:] == ["oci-layout", "index.json", "manifest.json"]
    assert len([n for n in names if n.startswith("blobs/sha256/")]) == 4  # config, two layers once each, manifest
    index = json.loads(files["index.json"])
    assert index["manifests"][0]["digest"] == layout.manifest_digest
    manifest = json.loads(files[f"blobs/sha256/{layout.manifest_digest[7:]}"])
    assert manifest["config"]["digest"] == image.identity
    assert [x["digest"] for x in manifest["layers"]] == [x.diff_id for x in image.layers]
    legacy = json.loads(files["manifest.json"])
    assert legacy == [{"Config": f"blobs/sha256/{image.identity[7:]}", "RepoTags": None,
                       "Layers": [f"blobs/sha256/{x.diff_id[7:]}" for x in image.layers]}]  # fmt: skip
    again = io.BytesIO()
    write_oci_layout(image, again)
    assert again.getvalue() == out.getvalue()


def test_runtime_files_carry_env_workdir_entrypoint_and_command_as_enroot_writes_them() -> None:
    config = {"config": {"Env": ["PATH=/usr/bin", "X=a b"], "WorkingDir": "/app dir",
                         "Entrypoint": ["python3", "-u"], "Cmd": ["/opt/serve.py", "--x=it's"],
                         "Volumes": {"/data": {}}}}  # fmt: skip
    files = runtime_files(config)
    assert files["etc/environment"] == b"PATH=/usr/bin\nX=a b\n"
    assert files["ch/environment"] == files["etc/environment"]
    rc = files["etc/rc"].decode()
    assert "cd '/app dir' && unset OLDPWD || exit 1" in rc
    assert "    exec python3 -u \"$@\"\n" in rc
    assert "    exec python3 -u /opt/serve.py '--x=it'\"'\"'s'\n" in rc
    assert files["etc/fstab"] == b"${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
    script = subprocess.run(["bash", "-n"], input=rc, text=True, capture_output=True, check=False)
    assert script.returncode == 0, script.stderr


def test_an_image_without_entrypoint_or_command_starts_a_shell_and_a_newline_in_env_is_refused() -> None:
    assert "    exec /bin/sh\n" in runtime_files({"config": {}})["etc/rc"].decode()
    with pytest.raises(RuntimeFilesError, match="Env entry 'BAD'"):
        runtime_files({"config": {"Env": ["BAD=two\nlines"]}})


TAG = "imagebuild/kimi-k3:gfx942"


def _export(tmp_path: Path, export_format: ExportFormat, compression: Compression = Compression.ZSTD) -> tuple[FakeEngine, Path]:
    source = FakeEngine()
    source.add_saved_image(TAG, labels={"io.imagebuild.arch": "gfx942"})
    result = export_image(
        ExportOptions(image=TAG, output=tmp_path / "out", compression=compression, export_format=export_format),
        source,
        report=lambda _: None,
    )
    return source, result.manifest_path


def _needs_tar2sqfs() -> None:
    if shutil.which("tar2sqfs") is None:
        skip_or_fail("tar2sqfs (squashfs-tools-ng) is not installed")


def test_an_oci_export_imports_into_an_engine_with_the_same_identity(tmp_path: Path) -> None:
    source, manifest_path = _export(tmp_path, ExportFormat.OCI)
    data = json.loads(manifest_path.read_text())
    assert data["kind"] == "oci-archive"
    assert data["archive"].endswith(".oci.tar.zst")
    node = FakeEngine()
    result = import_manifest(manifest_path, node, report=lambda _: None)
    assert result.image_id == source.tags[TAG] == data["image_id"]


def test_a_docker_manifest_has_no_kind_key_and_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path, ExportFormat.DOCKER)
    data = json.loads(manifest_path.read_text())
    assert "kind" not in data
    assert parse_manifest(data, "m.json").kind == "docker-archive"
    with pytest.raises(BadInput, match=r"manifest m\.json: 'kind' must be docker-archive or oci-archive or squashfs"):
        parse_manifest({**data, "kind": "sif"}, "m.json")


def test_a_squashfs_export_is_reproducible_checked_and_refused_by_an_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _needs_tar2sqfs()
    source, manifest_path = _export(tmp_path / "a", ExportFormat.SQUASHFS)
    _, again = _export(tmp_path / "b", ExportFormat.SQUASHFS)
    manifest = parse_manifest(json.loads(manifest_path.read_text()), str(manifest_path))
    archive = manifest_path.parent / manifest.archive
    assert manifest.kind == "squashfs"
    assert archive.name.endswith(".sqfs")
    assert manifest.image_id == source.tags[TAG]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == manifest.sha256
    assert (again.parent / manifest.archive).read_bytes() == archive.read_bytes()
    assert cli.main([str(manifest_path), "--check-only"]) == 0
    assert capsys.readouterr().out.strip() == manifest.image_id
    with pytest.raises(ConfigError, match=rf"archive {archive}: a squashfs .* cannot load"):
        import_manifest(manifest_path, FakeEngine(), report=lambda _: None)
    with archive.open("r+b") as f:  # one byte changed: refused, naming the file
        f.seek(4096)
        f.write(b"\xff")
    assert cli.main([str(manifest_path), "--check-only"]) == 7
    assert f"archive {archive}: sha256 mismatch" in capsys.readouterr().err


def test_check_only_refuses_a_file_with_the_right_bytes_that_is_no_squashfs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, manifest_path = _export(tmp_path, ExportFormat.OCI)
    data = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**data, "kind": "squashfs"}))
    assert cli.main([str(manifest_path), "--check-only"]) == 7
    assert "not a complete squashfs" in capsys.readouterr().err


def test_a_corrupted_oci_archive_is_refused_naming_the_file(tmp_path: Path) -> None:
    _, manifest_path = _export(tmp_path, ExportFormat.OCI, Compression.NONE)
    archive = manifest_path.parent / json.loads(manifest_path.read_text())["archive"]
    with archive.open("r+b") as f:
        f.seek(2048)
        f.write(b"\xff")
    with pytest.raises(IntegrityError, match=rf"archive {archive}: "):
        import_manifest(manifest_path, FakeEngine(), report=lambda _: None)


def test_squashfs_with_compress_none_is_refused_before_the_engine_is_asked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--compress none: a squashfs's blocks are compressed with zstd or gzip"):
        _export(tmp_path, ExportFormat.SQUASHFS, Compression.NONE)
    assert not (tmp_path / "out").exists()


def test_runtime_podman_refuses_a_squashfs_before_reading_it_and_needs_podman(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_tar2sqfs()
    _, squashfs = _export(tmp_path / "s", ExportFormat.SQUASHFS)
    assert cli.main([str(squashfs), "--runtime", "podman"]) == 2
    assert "which the engine at podman cannot load" in capsys.readouterr().err
    _, oci = _export(tmp_path / "o", ExportFormat.OCI)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    assert cli.main([str(oci), "--runtime", "podman"]) == 3
    assert "podman is not installed or not on PATH" in capsys.readouterr().err


# What podman load 4.3 said here of the sample image's docker archive, its storage on a full tmpfs.
PODMAN_FULL_DISK = """Copying blob sha256:eb193ed4029ace75478d5dd6a9a47483313ceee1dc9f39310de0ac3f97844032
Error: payload does not match any of the supported image formats:
 * oci: initializing source oci:/n/a.tar:: open /n/a.tar/index.json: not a directory
 * oci-archive: writing blob: adding layer with blob "sha256:464f": processing tar file(write /usr/lib/x.rlib: no space left on device): exit status 1
 * docker-archive: writing blob: adding layer with blob "sha256:464f": processing tar file(write /usr/lib/y.rlib: no space left on device): exit status 1
 * dir: open /n/a.tar/manifest.json: not a directory
"""


def test_a_failed_podman_load_is_told_by_the_transport_of_the_archive_s_kind() -> None:
    """podman load tries every transport: the failure of the one the archive is for says why."""
    assert load_failure(PODMAN_FULL_DISK, "docker-archive") == (
        'docker-archive: writing blob: adding layer with blob "sha256:464f": processing tar file(write '
        "/usr/lib/y.rlib: no space left on device): exit status 1"
    )
    assert load_failure(PODMAN_FULL_DISK, "oci-archive").startswith("oci-archive: writing blob: ")
    assert load_failure("Error: short read\n", "docker-archive") == "Error: short read"
