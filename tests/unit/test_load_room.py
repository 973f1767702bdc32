"""A load that cannot fit on the engine's disk fails before a byte is read, naming the node, the
directory and the numbers; where the room cannot be known for sure, the check says so and is skipped."""

from __future__ import annotations

import io
import json
import socket
import tarfile
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.distribute.local_import import import_manifest
from imagebuild.errors import ExitCode, ImageBuildError
from imagebuild.importer import containerd_root, load_room
from imagebuild.importer.dockerd_process import engine_tmpdir
from imagebuild.importer.failures import BadInput, NoRoom
from imagebuild.importer.load_places import docker_disk, podman_disk
from imagebuild.importer.load_room import LoadDisk, Place
from imagebuild.importer.manifest import parse_manifest, read_manifest
from imagebuild.testing import FakeEngine
from tests.unit.export_support import exported, manifest_document, node_holding, plain_tar

MB = 1 << 20


def _free(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """The disk's free bytes as this machine would report them (statvfs)."""
    monkeypatch.setattr(load_room, "free_bytes", lambda _path: count)


def test_export_lists_each_layer_file_s_size_as_the_archive_holds_it(tmp_path: Path) -> None:
    path, _ = exported(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(plain_tar(path))) as tar:
        sizes = {member.name: member.size for member in tar if member.isfile()}
    layers = json.loads(path.read_text())["layers"]
    assert [layer["size"] for layer in layers] == [sizes[layer["file"]] for layer in layers]
    assert all(layer["size"] > MB for layer in layers)


def test_a_node_without_twice_the_layers_it_is_sent_fails_at_once_and_loads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = exported(tmp_path)
    sent = sum(layer.size for layer in read_manifest(path).layers)
    node = FakeEngine(data_root=str(tmp_path))
    _free(monkeypatch, 2 * sent - 1)
    with pytest.raises(ImageBuildError) as raised:
        import_manifest(path, node, report=lambda _: None)
    message = str(raised.value)
    assert raised.value.exit_code == ExitCode.FAILED
    assert message.startswith(f"not enough disk on {socket.gethostname()} for this load: {tmp_path} has ")
    assert f"needs {2 * sent / 1e9:.2f} GB there ({sent / 1e9:.2f} GB of layers, twice in {tmp_path}: the engine's copy" in message
    assert "nothing was loaded" in message
    assert "\n" not in message
    assert node.loads == 0

    _free(monkeypatch, 2 * sent)
    assert not import_manifest(path, node, report=lambda _: None).already_present


def test_the_layers_a_node_holds_need_no_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, diff_ids = exported(tmp_path)
    top = read_manifest(path).layers[-1].size
    node = node_holding(diff_ids[:2], data_root=str(tmp_path))
    _free(monkeypatch, 2 * top)  # room for the build layer alone
    import_manifest(path, node, report=lambda _: None)
    _free(monkeypatch, 2 * top - 1)
    with pytest.raises(ImageBuildError, match=r"GB of layers, the 2 layer files the engine holds left out, twice in "):
        import_manifest(path, node_holding(diff_ids[:2], data_root=str(tmp_path)), report=lambda _: None)


def test_the_check_can_be_switched_off_for_a_tmpdir_on_another_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = exported(tmp_path)
    _free(monkeypatch, 0)
    monkeypatch.setenv(load_room.SWITCH, "off")
    assert import_manifest(path, FakeEngine(data_root=str(tmp_path)), report=lambda _: None).image_id


def test_imagebuild_import_refuses_a_room_switch_it_does_not_know_before_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = exported(tmp_path)
    monkeypatch.setenv(load_room.SWITCH, "false")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert main(["import", str(path)]) == ExitCode.BAD_INPUT
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "IMAGEBUILD_IMPORT_ROOM='false': give off (skip the free-space check before a load) or on, or leave it unset"
    )


def test_what_is_sent_counts_each_file_once_and_is_unknown_only_when_a_version_2_manifest_leaves_some_out() -> None:
    layer = {"diff_id": "sha256:" + "a" * 64, "file": "x/layer.tar", "size": 700}
    other = {"diff_id": "sha256:" + "b" * 64, "file": "y/layer.tar", "size": 300}
    sized = parse_manifest(manifest_document(format_version=3, layers=[layer, {**layer, "diff_id": "sha256:" + "c" * 64}, other]), "m")
    assert load_room.bytes_sent(sized, frozenset()) == 1000
    assert load_room.bytes_sent(sized, frozenset({"x/layer.tar"})) == 300
    unsized = parse_manifest(manifest_document(layers=[{"diff_id": layer["diff_id"], "file": "x/layer.tar"}], uncompressed_size=5000), "m")
    assert load_room.bytes_sent(unsized, frozenset()) == 5000  # sent whole: the archive's tar
    assert load_room.bytes_sent(unsized, frozenset({"x/layer.tar"})) is None
    assert load_room.bytes_sent(parse_manifest(manifest_document(uncompressed_size=42), "m"), frozenset()) == 42


def test_a_version_3_manifest_must_give_every_layer_its_size() -> None:
    layer = {"diff_id": "sha256:" + "a" * 64, "file": "x/layer.tar"}
    for bad in (layer, {**layer, "size": 0}, {**layer, "size": True}, {**layer, "size": "7"}):
        with pytest.raises(BadInput, match=r"'layers' must list .*\"size\": its bytes"):
            parse_manifest(manifest_document(format_version=3, layers=[bad]), "m")
    with pytest.raises(BadInput, match=r"a clean path inside the archive\}"):  # version 2: no size
        parse_manifest(manifest_document(layers=[{**layer, "size": 7}]), "m")


def _mountinfo(tmp_path: Path, *mounts: tuple[str, str]) -> Path:
    lines = [f"{20 + i} 1 0:{i} / {point} rw,relatime shared:1 - {kind} none rw" for i, (point, kind) in enumerate(mounts)]
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_filesystem_is_the_longest_mount_point_above_the_directory_the_last_mount_winning(tmp_path: Path) -> None:
    table = _mountinfo(
        tmp_path, ("/", "ext4"), ("/var/lib", "xfs"), ("/var/lib/docker\\040x", "zfs"), ("/var/lib", "btrfs"), ("/var/li", "tmpfs")
    )
    assert load_room.filesystem_type("/var/lib/docker", table) == "btrfs"
    assert load_room.filesystem_type("/var/lib/docker x/overlay2", table) == "zfs"
    assert load_room.filesystem_type("/srv", table) == "ext4"
    assert load_room.filesystem_type("/srv", tmp_path / "absent") == ""


def test_on_a_filesystem_that_may_compress_the_check_is_said_and_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = parse_manifest(manifest_document(uncompressed_size=10**12), "m")
    _free(monkeypatch, 0)
    said: list[str] = []
    table = _mountinfo(tmp_path, ("/", "zfs"))
    here = LoadDisk((Place(str(tmp_path), 2, "copies"),))
    load_room.check_room(manifest, frozenset(), here, said.append, mountinfo=table)
    assert said == [f"free space not checked: {tmp_path} is on zfs, which may compress what it stores"]
    with pytest.raises(NoRoom, match=r"needs 2000.00 GB there \(1000.00 GB of layers, twice in "):
        load_room.check_room(manifest, frozenset(), here, said.append, mountinfo=_mountinfo(tmp_path, ("/", "ext4")))
    load_room.check_room(manifest, frozenset(), docker_disk({}, "tcp://n:2376"), said.append)
    assert said[-1] == "free space not checked: the engine at tcp://n:2376 is not on this machine"


def test_the_room_is_checked_where_the_engine_writes_a_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(containerd_root, "DEFAULT_ROOT", tmp_path / "no-system-containerd")
    info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlay2"}
    no_processes = tmp_path / "proc-empty"
    no_processes.mkdir()
    assert _where(docker_disk(info, "unix:///var/run/docker.sock", proc=no_processes)) == [("/var/lib/docker", 2)]
    assert docker_disk(info, "tcp://node2:2376").unknown == "the engine at tcp://node2:2376 is not on this machine"
    assert docker_disk({}, "unix:///var/run/docker.sock").unknown == "the engine does not say where its data root is"
    assert _where(podman_disk(_podman_info("/var/lib/containers/storage", "/var/tmp"), 3)) == [("/var/tmp", 3), ("/var/lib/containers/storage", 1)]
    assert podman_disk(_podman_info("", "/var/tmp"), 2).unknown

    # The containerd store: the containerd dockerd started, under the data root...
    containerd = {"DockerRootDir": str(tmp_path / "docker"), "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}
    proc = tmp_path / "proc"
    proc.mkdir()
    (tmp_path / "docker" / "containerd" / "daemon").mkdir(parents=True)
    found = docker_disk(containerd, "unix:///var/run/docker.sock", proc=proc)
    assert _where(found) == [(str(tmp_path / "docker" / "containerd" / "daemon"), 2)]
    # ... or the system's, when it is the one root on one filesystem; two filesystems: not known.
    (proc / "7").mkdir()
    (proc / "7" / "comm").write_text("containerd\n")
    (proc / "7" / "cmdline").write_bytes(b"containerd\0--root\0/proc\0")
    assert docker_disk(containerd, "unix:///var/run/docker.sock", proc=proc).unknown == "the containerd store's root is not known for sure"


def test_places_on_one_filesystem_add_up_and_each_filesystem_needs_its_own_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Podman: its image copy directory and its storage, on one disk or on two."""
    manifest = parse_manifest(manifest_document(uncompressed_size=10**9), "m")
    (tmp_path / "tmp").mkdir()
    (tmp_path / "storage").mkdir()
    one_disk = podman_disk(_podman_info(str(tmp_path / "storage"), str(tmp_path / "tmp")), 2)
    _free(monkeypatch, 3 * 10**9)
    load_room.check_room(manifest, frozenset(), one_disk, _never)
    _free(monkeypatch, 3 * 10**9 - 1)
    with pytest.raises(NoRoom) as raised:
        load_room.check_room(manifest, frozenset(), one_disk, _never)
    assert f"{tmp_path}/tmp and {tmp_path}/storage have 3.00 GB free, and loading a.tar.zst needs 3.00 GB there" in str(raised.value)
    assert f"(1.00 GB of layers, twice in {tmp_path}/tmp: Podman's copies while it loads them; once in {tmp_path}/storage" in str(raised.value)
    assert "(remove images this node no longer runs)" in str(raised.value)  # the storage is on that disk
    # Two filesystems (the storage here, the copy directory in /proc's): each needs its own copies only.
    two_disks = LoadDisk((Place("/proc", 2, "copies", temporary=True), Place(str(tmp_path / "storage"), 1, "unpacked")))
    _free(monkeypatch, 2 * 10**9)
    load_room.check_room(manifest, frozenset(), two_disks, _never)
    _free(monkeypatch, 2 * 10**9 - 1)
    with pytest.raises(NoRoom, match=r"^not enough disk on .*: /proc has .*\(the load's temporary copies alone go there: make room on that disk\)"):
        load_room.check_room(manifest, frozenset(), two_disks, _never)


def _podman_info(storage: str, copy_dir: str) -> dict[str, object]:
    """What `podman info --format json` and Podman's /libpod/info say of its storage."""
    return {"store": {"graphRoot": storage, "imageCopyTmpDir": copy_dir}}


def _where(disk: LoadDisk) -> list[tuple[str, int]]:
    return [(place.directory, place.copies) for place in disk.places]


def _never(line: str) -> None:
    raise AssertionError(line)


def _dockerd(proc: Path, pid: int, open_file: str, environ: bytes) -> None:
    """A dockerd in a stand-in /proc: its name, one open file, its environment."""
    (proc / str(pid) / "fd").mkdir(parents=True)
    (proc / str(pid) / "comm").write_text("dockerd\n")
    (proc / str(pid) / "fd" / "14").symlink_to(open_file)
    (proc / str(pid) / "environ").write_bytes(environ)


def test_a_graph_driver_engine_s_docker_tmpdir_takes_its_copy_of_the_load(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _dockerd(proc, 40, "/var/lib/docker2/volumes/metadata.db", b"DOCKER_TMPDIR=/scratch/other\0")  # another root
    _dockerd(proc, 41, "/var/lib/docker/volumes/metadata.db", b"PATH=/usr/bin\0DOCKER_TMPDIR=/scratch/docker-tmp\0")
    assert engine_tmpdir("/var/lib/docker", proc=proc) == "/scratch/docker-tmp"
    info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlay2"}
    assert _where(docker_disk(info, "unix:///var/run/docker.sock", proc=proc)) == [("/scratch/docker-tmp", 1), ("/var/lib/docker", 1)]
    (proc / "41" / "environ").write_bytes(b"PATH=/usr/bin\0")  # none set: its data root's tmp/
    assert engine_tmpdir("/var/lib/docker", proc=proc) == ""
    assert _where(docker_disk(info, "unix:///var/run/docker.sock", proc=proc)) == [("/var/lib/docker", 2)]
    assert engine_tmpdir("/srv/docker", proc=proc) is None  # no dockerd of that root here


def _containerd(proc: Path, pid: int, parent: int, argv: list[str], *, listening: str = "") -> None:
    """A containerd in a stand-in /proc: its name, parent, command line and the socket it accepts on."""
    (proc / str(pid) / "fd").mkdir(parents=True)
    (proc / str(pid) / "net").mkdir()
    (proc / str(pid) / "comm").write_text("containerd\n")
    (proc / str(pid) / "stat").write_text(f"{pid} (containerd) S {parent} {pid} {pid} 0 -1 4194304\n")
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(arg.encode() for arg in argv) + b"\0")
    (proc / str(pid) / "fd" / "7").symlink_to(f"socket:[{pid}00]")
    table = "Num       RefCount Protocol Flags    Type St Inode Path\n"
    if listening:  # the listening socket, and a connection it accepted there (not listening)
        table += f"0000000012f12c7e: 00000002 00000000 00010000 0001 01 {pid}00 {listening}\n"
        table += f"000000001c8fa5f2: 00000003 00000000 00000000 0001 03 {pid}01 {listening}\n"
    (proc / str(pid) / "net" / "unix").write_text(table)


def test_the_containerd_store_s_room_is_asked_of_the_root_of_the_containerd_its_dockerd_uses(tmp_path: Path) -> None:
    """Several containerds on several disks (a node running Docker and a Kubernetes containerd, the
    engine matrix): the dockerd's own process says which is its, so the check need not be skipped."""
    proc, data_root = tmp_path / "proc", tmp_path / "docker"
    (data_root / "containerd" / "daemon").mkdir(parents=True)
    info = {"DockerRootDir": str(data_root), "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}
    (tmp_path / "system").mkdir()
    _containerd(proc, 5, 1, ["containerd", "--root", "/proc"], listening="/run/k3s/containerd/containerd.sock")
    _containerd(proc, 6, 1, ["containerd", "--root", str(tmp_path / "system")], listening="/run/containerd/containerd.sock")
    _dockerd(proc, 40, str(data_root / "volumes" / "metadata.db"), b"")
    (proc / "40" / "cmdline").write_bytes(b"dockerd\0--config-file=" + str(tmp_path / "none.json").encode() + b"\0")
    # Docker CE's layout: dockerd on the machine's containerd, at the default address...
    assert containerd_root.engine_root(str(data_root), proc=proc) == tmp_path / "system"
    assert _where(docker_disk(info, "unix:///var/run/docker.sock", proc=proc)) == [(str(tmp_path / "system"), 2)]
    # ... or at the one its daemon.json names (the `--containerd` flag wins over it)...
    (tmp_path / "daemon.json").write_text(json.dumps({"containerd": "/run/k3s/containerd/containerd.sock"}))
    (proc / "40" / "cmdline").write_bytes(b"dockerd\0--config-file\0" + str(tmp_path / "daemon.json").encode() + b"\0")
    assert containerd_root.engine_root(str(data_root), proc=proc) == Path("/proc")
    (proc / "40" / "cmdline").write_bytes(
        b"dockerd\0--containerd=unix:///run/containerd/containerd.sock\0--config-file=" + str(tmp_path / "daemon.json").encode() + b"\0"
    )
    assert containerd_root.engine_root(str(data_root), proc=proc) == tmp_path / "system"
    # ... or the one it started itself, its root under the data root (from its config's `root`).
    (tmp_path / "managed.toml").write_text(f'version = 2\nroot = "{data_root}/containerd/daemon"\n[grpc]\n  root = "/x"\n')
    _containerd(proc, 41, 40, ["containerd", "--config", str(tmp_path / "managed.toml"), "--log-level", "info"])
    assert _where(docker_disk(info, "unix:///var/run/docker.sock", proc=proc)) == [(str(data_root / "containerd" / "daemon"), 2)]
    # A dockerd not ours to read: the roots it may have, which lie on two disks here: not known.
    (proc / "40" / "fd" / "14").unlink()
    assert containerd_root.engine_root(str(data_root), proc=proc) is None
    assert docker_disk(info, "unix:///var/run/docker.sock", proc=proc).unknown == "the containerd store's root is not known for sure"


def test_an_engine_that_names_its_containerd_s_address_needs_no_dockerd_read(tmp_path: Path) -> None:
    """Engines newer than Docker 26 say where their containerd listens (`GET /info`'s Containerd)."""
    proc = tmp_path / "proc"
    (tmp_path / "k8s").mkdir()
    _containerd(proc, 5, 1, ["containerd", "--root", str(tmp_path / "k8s")], listening="/run/k3s/containerd.sock")
    _containerd(proc, 6, 1, ["containerd", "--root", "/proc"], listening="/run/containerd/containerd.sock")
    info = {
        "DockerRootDir": "/var/lib/docker",
        "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]],
        "Containerd": {"Address": "/run/k3s/containerd.sock", "Namespaces": {"Containers": "moby"}},
    }
    assert _where(docker_disk(info, "unix:///var/run/docker.sock", proc=proc)) == [(str(tmp_path / "k8s"), 2)]
    info["Containerd"] = {"Address": "/run/nothing-there.sock"}
    assert docker_disk(info, "unix:///var/run/docker.sock", proc=proc).unknown == "the containerd store's root is not known for sure"


def test_nothing_listening_where_the_dockerd_connects_leaves_its_containerd_unknown(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _containerd(proc, 6, 1, ["containerd"], listening="/run/other.sock")
    _dockerd(proc, 40, "/var/lib/docker/volumes/metadata.db", b"")
    (proc / "40" / "cmdline").write_bytes(b"dockerd\0--containerd\0/run/containerd/containerd.sock\0")
    assert containerd_root.engine_root("/var/lib/docker", proc=proc) is None
    (tmp_path / "bad.json").write_text("{not json")  # a daemon.json that cannot be read: not guessed
    (proc / "40" / "cmdline").write_bytes(b"dockerd\0--config-file=" + str(tmp_path / "bad.json").encode() + b"\0")
    assert containerd_root.engine_root("/var/lib/docker", proc=proc) is None
