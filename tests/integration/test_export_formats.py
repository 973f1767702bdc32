"""export --format oci and squashfs of the session's sample image, for real.

The OCI archive is loaded by Podman into a storage of its own (a temporary --root and --runroot: no
one else's images are touched) and must come out as the image's identity; the squashfs is exported
twice (the same bytes) and read with squashfs-tools-ng's rdsquashfs: enroot's /etc/rc and
/etc/environment, Charliecloud's /ch/environment, and the launcher. A corrupted archive of every
format is refused by the shipped importer's --check-only, naming the file.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.distribute.shipped_importer import IMPORTER_NAME
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.http_api import HttpEngine
from imagebuild.engine.interface import StoredImage
from imagebuild.inputs.layout import LAUNCHER
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]
FORMATS = ("docker", "oci", "squashfs")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        skip_or_fail(f"{name} is not installed")
    return found


@pytest.fixture(scope="module")
def exports(sample_export: Callable[[str], Path]) -> dict[str, Path]:
    """The sample image exported once in each format (the session's exports): format -> its manifest."""
    _tool("tar2sqfs")
    return {export_format: sample_export(export_format) for export_format in FORMATS}


def _data(manifest: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(manifest.read_text())
    return data


def test_every_format_names_the_image_identity_and_its_kind(
    exports: dict[str, Path], sample_image: dict[str, object]
) -> None:
    kinds = {"docker": None, "oci": "oci-archive", "squashfs": "squashfs"}
    for export_format, manifest in exports.items():
        data = _data(manifest)
        assert data["image_id"] == sample_image["image_id"]
        assert data.get("kind") == kinds[export_format]
        archive = manifest.parent / str(data["archive"])
        assert hashlib.sha256(archive.read_bytes()).hexdigest() == data["sha256"]


def test_the_oci_archive_loads_into_podman_as_the_images_identity(
    exports: dict[str, Path], sample_image: dict[str, object]
) -> None:
    podman = _tool("podman")
    # podman refuses a runroot longer than 50 characters: pytest's tmp_path is longer. --tmpdir too: its
    # default, /run/libpod, is every other podman's on this host.
    scratch = Path(tempfile.mkdtemp(prefix="ib-podman-"))
    store = [podman, "--root", str(scratch / "root"), "--runroot", str(scratch / "run"), "--tmpdir", str(scratch / "tmp")]
    archive = exports["oci"].parent / str(_data(exports["oci"])["archive"])
    began = time.monotonic()
    loaded = subprocess.run([*store, "load", "-i", str(archive)], capture_output=True, text=True, timeout=900, check=False)
    print(f"podman load of the OCI archive: {time.monotonic() - began:.1f}s")
    try:
        assert loaded.returncode == 0, loaded.stderr
        assert f"Loaded image: {sample_image['image_id']}" in loaded.stdout
        inspect = subprocess.run(
            [*store, "image", "inspect", "--format", "{{.Id}}", str(sample_image["image_id"])],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert "sha256:" + inspect.stdout.strip().removeprefix("sha256:") == sample_image["image_id"]
    finally:
        subprocess.run([*store, "rmi", "--all", "--force"], capture_output=True, timeout=300, check=False)
        shutil.rmtree(scratch, ignore_errors=True)


def test_an_oci_export_reads_the_engines_layer_store_and_equals_the_sessions(
    exports: dict[str, Path], sample_image: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The engine here is a local overlay2 one whose data root this process reads: no docker save.
    capsys.readouterr()
    assert main(["export", str(sample_image["image_id"]), "-o", str(tmp_path), "--format", "oci"]) == 0
    assert "read from the engine's layer store" in capsys.readouterr().err
    first = _data(exports["oci"])
    assert _data(tmp_path / f"{first['archive']}.json")["sha256"] == first["sha256"]


def test_the_squashfs_is_reproducible_and_carries_the_runtime_files_and_the_launcher(
    exports: dict[str, Path],
    sample_image: dict[str, object],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rdsquashfs = _tool("rdsquashfs")
    first = _data(exports["squashfs"])
    # The session's export read the engine's layer store; this one reads its save: the same bytes.
    for engine in (DockerEngine, HttpEngine):
        monkeypatch.setattr(engine, "stored_image", lambda _self, _id: StoredImage(unavailable="the test reads the save"))
    capsys.readouterr()
    assert main(["export", str(sample_image["image_id"]), "-o", str(tmp_path), "--format", "squashfs"]) == 0
    assert "read from docker save" in capsys.readouterr().err
    assert _data(tmp_path / f"{first['archive']}.json")["sha256"] == first["sha256"]
    image = exports["squashfs"].parent / str(first["archive"])

    def cat(path: str) -> str:
        return subprocess.run([rdsquashfs, "-c", path, str(image)], capture_output=True, text=True, timeout=60, check=True).stdout

    config = json.loads(subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config}}", str(sample_image["image_id"])],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout)  # fmt: skip
    environment = "".join(f"{line}\n" for line in config["Env"])
    assert cat("/etc/environment") == environment
    assert cat("/ch/environment") == environment
    rc = cat("/etc/rc")
    assert f"cd {config['WorkingDir']} && unset OLDPWD || exit 1" in rc
    assert 'exec "$@"' in rc
    listing = subprocess.run([rdsquashfs, "-l", str(Path(LAUNCHER).parent), str(image)], capture_output=True, text=True,
                             timeout=60, check=True).stdout  # fmt: skip
    assert Path(LAUNCHER).name in listing


@pytest.mark.parametrize("export_format", ["docker", "oci"])
def test_the_shipped_importer_loads_docker_and_oci_exports_into_podman_verified(
    exports: dict[str, Path], sample_image: dict[str, object], export_format: str
) -> None:
    podman = _tool("podman")
    scratch = Path(tempfile.mkdtemp(prefix="ib-podman-"))  # a storage of its own, short paths (podman's limit)
    conf = scratch / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{scratch}/root"\nrunroot = "{scratch}/run"\n')
    # Its own libpod tmp dir: the default, /run/libpod, is every other podman's on this host.
    (scratch / "containers.conf").write_text(f'[engine]\ntmp_dir = "{scratch}/tmp"\n')
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "CONTAINERS_STORAGE_CONF": str(conf),
           "CONTAINERS_CONF": str(scratch / "containers.conf")}  # fmt: skip
    manifest = exports[export_format]
    try:
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(manifest.parent / IMPORTER_NAME), str(manifest), "--runtime", "podman"],
            capture_output=True, text=True, timeout=900, check=False, env=env,
        )  # fmt: skip
        print(f"imagebuild-import --runtime podman ({export_format}): {time.monotonic() - began:.1f}s")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == sample_image["image_id"]
        inspect = subprocess.run([podman, "image", "inspect", "--format", "{{.Id}}", str(sample_image["image_id"])],
                                 capture_output=True, text=True, timeout=60, check=True, env=env)  # fmt: skip
        assert inspect.stdout.strip().removeprefix("sha256:") == str(sample_image["image_id"]).removeprefix("sha256:")
        again = subprocess.run(
            [sys.executable, str(manifest.parent / IMPORTER_NAME), str(manifest), "--runtime", "podman"],
            capture_output=True, text=True, timeout=300, check=False, env=env,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "already present" in again.stderr
    finally:
        subprocess.run([podman, "rmi", "--all", "--force"], capture_output=True, timeout=300, check=False, env=env)
        shutil.rmtree(scratch, ignore_errors=True)


def test_podman_storage_without_room_for_the_layers_is_refused_before_the_archive_is_read(
    exports: dict[str, Path], sample_image: dict[str, object]
) -> None:
    """--runtime podman: its storage on a tmpfs of 256 MB, its image copy directory on another disk."""
    podman = _tool("podman")
    scratch = Path(tempfile.mkdtemp(prefix="ib-podman-"))
    (scratch / "root").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "imagebuild-small-podman", str(scratch / "root")], check=True)
    conf = scratch / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{scratch}/root"\nrunroot = "{scratch}/run"\n')
    (scratch / "containers.conf").write_text(f'[engine]\ntmp_dir = "{scratch}/tmp"\nimage_copy_tmp_dir = "{scratch}"\n')
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "CONTAINERS_STORAGE_CONF": str(conf),
           "CONTAINERS_CONF": str(scratch / "containers.conf")}  # fmt: skip
    manifest = exports["docker"]
    sent = sum(layer["size"] for layer in _data(manifest)["layers"])  # type: ignore[union-attr]
    try:
        done = subprocess.run(
            [sys.executable, str(manifest.parent / IMPORTER_NAME), str(manifest), "--runtime", "podman"],
            capture_output=True, text=True, timeout=300, check=False, env=env,
        )  # fmt: skip
        assert done.returncode == 1
        (line,) = done.stderr.splitlines()  # before "... size and sha256 as the manifest says": nothing read
        assert f"for this load: {scratch}/root has 0.2" in line
        assert f"needs {sent / 1e9:.2f} GB there ({sent / 1e9:.2f} GB of layers, once in {scratch}/root: them unpacked" in line
        listed = subprocess.run([podman, "images", "--quiet"], capture_output=True, text=True, timeout=60, check=True, env=env)
        assert listed.stdout == ""
    finally:
        subprocess.run(["umount", str(scratch / "root")], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.parametrize("export_format", FORMATS)
def test_a_corrupted_archive_of_each_format_is_refused_naming_the_file(
    exports: dict[str, Path], export_format: str, tmp_path: Path
) -> None:
    manifest = exports[export_format]
    data = _data(manifest)
    for name in (str(data["archive"]), manifest.name, IMPORTER_NAME):
        shutil.copy(manifest.parent / name, tmp_path / name)
    archive = tmp_path / str(data["archive"])
    with archive.open("r+b") as f:
        f.seek(int(str(data["size"])) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    done = subprocess.run(
        [sys.executable, str(tmp_path / IMPORTER_NAME), str(tmp_path / manifest.name), "--check-only"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 7, done.stderr
    assert f"archive {archive}: sha256 mismatch" in done.stderr


def test_import_refuses_a_squashfs_for_an_engine_in_one_line(
    exports: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(exports["squashfs"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "a squashfs (export --format squashfs), which the engine at" in err[0]
