"""The importer that export ships (imagebuild-import.pyz): the package's own modules, byte-identical from
every export, and runnable by a bare python3 as old as 3.8 without imagebuild."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import zstandard

from imagebuild import importer
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.shipped_importer import IMPORTER_NAME, ZIP_TIME, importer_zipapp
from imagebuild.engine.interface import BuildEvent, classic_build_events
from imagebuild.importer.docker_api import loaded_images, response_error, stream_error
from imagebuild.testing import FakeEngine
from tests.prerequisites import PYTHON38

TAG = "imagebuild/kimi-k3:gfx942"
PYTHONS = [
    pytest.param(Path(sys.executable), id="this-python"),
    pytest.param(
        PYTHON38,
        id="python3.8",
        marks=pytest.mark.skipif(not PYTHON38.exists(), reason=f"no Python 3.8 at {PYTHON38} (pyenv)"),
    ),
]


def _export(output: Path) -> Path:
    source = FakeEngine()
    source.add_saved_image(TAG)
    export_image(ExportOptions(image=TAG, output=output), source, report=lambda _: None)
    return output / IMPORTER_NAME


def test_two_exports_write_byte_identical_importers(tmp_path: Path) -> None:
    first, second = _export(tmp_path / "a"), _export(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes() == importer_zipapp()


def test_the_zipapp_holds_the_package_modules_unchanged_in_a_fixed_order_and_time() -> None:
    data = importer_zipapp()
    assert data.startswith(b"#!/usr/bin/env python3\n")
    package = Path(importer.__file__).parent
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entries = archive.infolist()
        names = [entry.filename for entry in entries]
        assert names == ["__main__.py", *(f"importer/{p.name}" for p in sorted(package.glob("*.py")))]
        for entry in entries[1:]:
            assert archive.read(entry) == (package / Path(entry.filename).name).read_bytes()
    assert {entry.date_time for entry in entries} == {ZIP_TIME}
    assert {entry.compress_type for entry in entries} == {zipfile.ZIP_STORED}
    assert {entry.external_attr >> 16 for entry in entries} == {0o100644}


def _run(python: Path, zipapp: Path, manifest: Path, docker_host: str, **env: str) -> subprocess.CompletedProcess[str]:
    # -I -S: no PYTHON* variables, no site-packages at all: only the zipapp and the standard library.
    return subprocess.run(
        [str(python), "-I", "-S", str(zipapp), str(manifest)],
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": docker_host, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("python", PYTHONS)
def test_the_zipapp_runs_on_a_bare_python_and_refuses_bad_input_before_the_engine(
    tmp_path: Path, python: Path
) -> None:
    zipapp = _export(tmp_path / "shared")
    (manifest_path,) = (tmp_path / "shared").glob("*.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(manifest_path.read_text()), "archive": "../x"}))
    done = _run(python, zipapp, bad, f"unix://{tmp_path}/docker.sock")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        f"imagebuild-import: error: manifest {bad}: 'archive' must be a bare file name beside the "
        "manifest, not '../x'\n"
    )


@pytest.mark.parametrize("python", PYTHONS)
def test_the_zipapp_refuses_a_room_switch_it_does_not_know_before_the_engine(tmp_path: Path, python: Path) -> None:
    zipapp = _export(tmp_path / "shared")
    (manifest_path,) = (tmp_path / "shared").glob("*.json")
    done = _run(python, zipapp, manifest_path, f"unix://{tmp_path}/docker.sock", IMAGEBUILD_IMPORT_ROOM="0\x1b")
    assert done.returncode == 2, done.stderr  # not 3: no engine answers there, and none was asked
    assert done.stderr == (
        "imagebuild-import: error: IMAGEBUILD_IMPORT_ROOM='0\\x1b': give off (skip the free-space check before "
        "a load) or on, or leave it unset\n"
    )


@pytest.mark.parametrize("python", PYTHONS)
def test_the_zipapp_names_a_missing_engine_with_exit_3(tmp_path: Path, python: Path) -> None:
    zipapp = _export(tmp_path / "shared")
    (manifest_path,) = (tmp_path / "shared").glob("*.json")
    done = _run(python, zipapp, manifest_path, f"unix://{tmp_path}/docker.sock")
    assert done.returncode == 3, done.stderr
    assert done.stderr == (
        f"imagebuild-import: error: the Docker engine at unix://{tmp_path}/docker.sock did not answer GET "
        "/info ([Errno 2] No such file or directory); start docker on this node, or point DOCKER_HOST at "
        "its engine\n"
    )


def test_a_stream_error_is_its_detail_and_other_messages_are_none() -> None:
    assert stream_error({"stream": "Loaded image ID: sha256:ab\n"}) is None
    assert stream_error({"errorDetail": {"message": "unexpected EOF "}, "error": "EOF"}) == "unexpected EOF"
    assert stream_error({"error": "no space left on device"}) == "no space left on device"
    assert stream_error({"errorDetail": {}}) == "no detail"


def test_an_error_response_body_is_its_message_or_the_start_of_its_text() -> None:
    assert response_error(b'{"message": "No such image: x "}') == "No such image: x"
    assert response_error(b'{"errorDetail": {"message": "denied"}, "error": "x"}') == "denied"
    assert response_error(b"<html>bad gateway</html>") == "<html>bad gateway</html>"
    assert response_error(b"") == "no detail"


def test_the_build_stream_reads_its_error_as_every_other_stream_does() -> None:
    """One decoder for build, load, push and pull: the engine's build events use stream_error too."""
    chunks = [
        {"stream": "Step 1/2 : FROM x\n"},
        {"errorDetail": {"message": "exit code 1 "}, "error": "exit"},
        {"stream": "never read\n"},
    ]
    assert list(classic_build_events(chunks)) == [
        BuildEvent(text="Step 1/2 : FROM x\n"),
        BuildEvent(error=stream_error(chunks[1])),
    ]
    assert list(classic_build_events([{"errorDetail": {}}])) == [BuildEvent(error="no detail")]


def test_loaded_images_gives_ids_and_looks_up_loaded_names() -> None:
    text = "Loaded image ID: sha256:aa\nLoaded image: x/y:z\nsomething else\n"
    assert loaded_images(text, lambda name: f"id-of-{name}") == ["sha256:aa", "id-of-x/y:z"]


LOAD_STREAM = """
import sys
sys.path.insert(0, sys.argv[1])  # the zipapp: its package is the top-level `importer`
from pathlib import Path
from importer.load_stream import engine_tar
from importer.manifest import read_manifest
manifest_path = Path(sys.argv[2])
manifest = read_manifest(manifest_path)
archive = manifest_path.parent / manifest.archive
with archive.open("rb") as f:
    for chunk in engine_tar(iter(lambda: f.read(1 << 20), b""), manifest, archive):
        sys.stdout.buffer.write(chunk)
"""


@pytest.mark.parametrize("python", PYTHONS)
def test_the_zipapp_sends_a_plain_tar_through_the_zstd_tool_on_a_bare_python(tmp_path: Path, python: Path) -> None:
    """-I -S: no zstandard module, so zstd goes through the tool; the tar is the one export wrote."""
    zipapp = _export(tmp_path / "shared")
    (manifest_path,) = (tmp_path / "shared").glob("*.json")
    archive = manifest_path.parent / json.loads(manifest_path.read_text())["archive"]
    done = subprocess.run(
        [str(python), "-I", "-S", "-c", LOAD_STREAM, str(zipapp), str(manifest_path)],
        env={"PATH": "/usr/bin:/bin"}, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == zstandard.ZstdDecompressor().decompressobj().decompress(archive.read_bytes())
