"""The room a squashfs takes unpacked: counted while the rootfs is flattened, written in its manifest,
and checked by the importer's ``--check-only --unpack-into DIR`` before a byte of the archive is read."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from imagebuild.distribute.rootfs import flatten_layers
from imagebuild.importer import cli, unpack_room
from imagebuild.importer.failures import BadInput, NoRoom
from imagebuild.importer.load_room import SWITCH
from imagebuild.importer.manifest import SQUASHFS, Manifest, parse_manifest
from imagebuild.importer.manifest import UNPACKED_BLOCK as BLOCK
from imagebuild.importer.unpack_room import check_unpack_room

FILES, DIRECTORIES = 3 * BLOCK, 5


def _manifest(*, unpacked: int = FILES, directories: int = DIRECTORIES, kind: str = SQUASHFS) -> Manifest:
    return Manifest(
        archive="kimi-k3-0123456789ab.sqfs", sha256="0" * 64, size=10, compression="zstd", image_id="sha256:" + "1" * 64,
        repo_tags=(), pins={}, labels={}, imagebuild_version="0", manifest_digest="sha256:" + "2" * 64,
        uncompressed_size=10, kind=kind, unpacked_bytes=unpacked if kind == SQUASHFS else 0,
        unpacked_directories=directories if kind == SQUASHFS else 0,
    )  # fmt: skip


def _mountinfo(tmp_path: Path, point: Path, kind: str) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text(f"22 1 0:21 / / rw - ext4 /dev/vda rw\n99 22 0:99 / {point} rw - {kind} {kind} rw\n")
    return path


def _free(monkeypatch: pytest.MonkeyPatch, free: int) -> list[Path]:
    asked: list[Path] = []

    def free_bytes(path: str) -> int:
        asked.append(Path(path))
        return free

    monkeypatch.setattr(unpack_room, "free_bytes", free_bytes)
    return asked


def _info(name: str, *, kind: bytes = tarfile.REGTYPE, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname, info.mode = kind, size, linkname, 0o755
    return info


def test_flattening_counts_files_in_blocks_hard_links_once_and_directories(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        for name in ("opt", "opt/sub"):
            tar.addfile(_info(name, kind=tarfile.DIRTYPE))
        for name, size in (("opt/one", 1), ("opt/sub/block", BLOCK), ("opt/sub/more", BLOCK + 1), ("opt/empty", 0)):
            tar.addfile(_info(name, size=size), io.BytesIO(b"x" * size))
        tar.addfile(_info("opt/link", kind=tarfile.LNKTYPE, linkname="opt/sub/more"))
        tar.addfile(_info("opt/sym", kind=tarfile.SYMTYPE, linkname="one"))
    flattened = flatten_layers([layer], io.BytesIO(), extra={"etc/rc": b"exec \"$@\"\n"})
    # 1 + 1 + 2 blocks of the layer's files (the hard link and the symlink none), 1 for etc/rc;
    # directories: the root, opt, opt/sub and etc (made for etc/rc).
    assert (flattened.file_bytes, flattened.directories) == (5 * BLOCK, 4)
    assert flattened.entries == 10


def test_a_tmpfs_must_hold_the_files_and_one_byte_short_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "enroot" / "data"
    target.mkdir(parents=True)
    mountinfo = _mountinfo(tmp_path, target, "tmpfs")
    lines: list[str] = []
    _free(monkeypatch, FILES)
    check_unpack_room(_manifest(), target, lines.append, mountinfo=mountinfo)
    assert lines == [f"room to unpack: {target} has 0.00 GB free, 0.00 GB needed"]
    _free(monkeypatch, FILES - 1)
    with pytest.raises(NoRoom) as refused:
        check_unpack_room(_manifest(), target, lines.append, mountinfo=mountinfo)
    message = str(refused.value)
    assert f"to unpack kimi-k3-0123456789ab.sqfs: {target} (tmpfs) has" in message
    assert "nothing was unpacked" in message
    assert f"{SWITCH}=off skips this check" in message
    assert "directories" not in message  # a tmpfs's directories take no blocks


def test_another_filesystem_must_also_hold_a_block_per_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mountinfo = _mountinfo(tmp_path, tmp_path / "elsewhere", "tmpfs")  # tmp_path itself: the ext4 root
    _free(monkeypatch, FILES + DIRECTORIES * BLOCK)
    check_unpack_room(_manifest(), tmp_path, lambda _: None, mountinfo=mountinfo)
    _free(monkeypatch, FILES + DIRECTORIES * BLOCK - 1)
    with pytest.raises(NoRoom, match=r"of files in 4 KiB blocks and 5 directories at 4 KiB each"):
        check_unpack_room(_manifest(), tmp_path, lambda _: None, mountinfo=mountinfo)


def test_a_directory_not_made_yet_is_checked_on_its_nearest_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _free(monkeypatch, 0)
    target = tmp_path / "run" / "enroot" / "data" / "user-1001"
    with pytest.raises(NoRoom, match=rf"{tmp_path}, on ext4, has 0.00 GB free, and the image unpacked into {target} takes"):
        check_unpack_room(_manifest(), target, lambda _: None, mountinfo=_mountinfo(tmp_path, Path("/nowhere"), "tmpfs"))
    assert asked == [tmp_path]
    assert not (tmp_path / "run").exists()  # nothing made


def test_what_is_not_checked_is_said_and_bad_input_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _free(monkeypatch, 0)
    lines: list[str] = []
    check_unpack_room(_manifest(unpacked=0), tmp_path, lines.append)  # a manifest from before the sizes
    check_unpack_room(_manifest(), tmp_path, lines.append, mountinfo=_mountinfo(tmp_path, tmp_path, "zfs"))
    assert lines == [
        "room to unpack not checked: kimi-k3-0123456789ab.sqfs's manifest predates the sizes; export the image again",
        f"room to unpack not checked: {tmp_path} is on zfs, which may compress what it stores",
    ]
    monkeypatch.setenv(SWITCH, "off")
    check_unpack_room(_manifest(), tmp_path, lines.append)
    assert len(lines) == 2
    with pytest.raises(BadInput, match=r"--unpack-into: kimi-k3-0123456789ab.sqfs is a docker-archive, not a squashfs"):
        check_unpack_room(_manifest(kind="docker-archive"), tmp_path, lines.append)
    with pytest.raises(BadInput, match=r"--unpack-into 'data': give an absolute path"):
        check_unpack_room(_manifest(), Path("data"), lines.append)


def test_the_manifest_keeps_the_sizes_for_a_squashfs_alone(tmp_path: Path) -> None:
    data = _manifest().to_json()
    assert (data["unpacked_bytes"], data["unpacked_directories"]) == (FILES, DIRECTORIES)
    assert parse_manifest(data, "m.json") == _manifest()
    docker = _manifest(kind="docker-archive").to_json()
    assert "unpacked_bytes" not in docker
    assert "unpacked_directories" not in docker
    with pytest.raises(BadInput, match=r"'unpacked_bytes' must be a squashfs's byte count, not 5"):
        parse_manifest({**docker, "unpacked_bytes": 5}, "m.json")
    for bad in (-1, True, "5"):
        with pytest.raises(BadInput, match=r"'unpacked_directories' must be a squashfs's directory count"):
            parse_manifest({**data, "unpacked_directories": bad}, "m.json")
    old = {k: v for k, v in data.items() if not k.startswith("unpacked_")}  # exported before the sizes
    assert parse_manifest(old, "m.json").unpacked_bytes == 0


def test_the_importer_checks_the_room_before_it_reads_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest_path = tmp_path / "kimi-k3-0123456789ab.sqfs.json"
    manifest_path.write_text(json.dumps(_manifest().to_json()))  # its archive is not there at all
    _free(monkeypatch, 0)
    assert cli.main([str(manifest_path), "--check-only", "--unpack-into", str(tmp_path / "data")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"imagebuild-import: error: not enough disk on {os.uname().nodename} to unpack")
    assert len(err.splitlines()) == 1
    assert cli.main([str(manifest_path), "--unpack-into", str(tmp_path)]) == 2  # before the engine is asked
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("imagebuild-import: error: --unpack-into goes with --check-only")
    monkeypatch.setenv(SWITCH, "no")  # read before anything else: bad input
    assert cli.main([str(manifest_path), "--check-only", "--unpack-into", str(tmp_path)]) == 2
