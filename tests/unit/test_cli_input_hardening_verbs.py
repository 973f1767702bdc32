"""export, import, attestations and render --check: their inputs checked before the engine or the
registry is asked, no directory left behind by a refused or failed run, and messages that say what
the user passed.

DOCKER_HOST names a socket that does not exist and the unit tier refuses the network, so a check made
after the engine or the registry was asked would be exit 3 or 8 instead.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from imagebuild.cli import main
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.errors import UnknownImageError
from imagebuild.testing import FakeEngine
from tests import REPO
from tests.unit.cli_support import one_error_line

LOCKED_PINS = REPO / "tests" / "data" / "build_streams" / "pins.toml"  # every identity filled
TAG = "imagebuild/kimi-k3:gfx942"
REF = "registry.example.com/ml/kimi@sha256:" + "a" * 64




# export: everything checked first; its directory made only once the export proceeds ----------------


def test_export_refusing_its_key_creates_no_directory(dead_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (dead_engine / "rsa.pem").write_bytes(pem)
    out = dead_engine / "ex"
    assert main(["-C", str(REPO), "export", "-o", str(out), "--sign-key", str(dead_engine / "rsa.pem")]) == 2
    assert "a RSA key" in one_error_line(capsys)
    assert not out.exists()


def test_export_without_an_engine_creates_no_directory(dead_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = dead_engine / "deep" / "er" / "dir"
    assert main(["-C", str(REPO), "export", "-o", str(out)]) == 3
    assert "no Docker socket" in one_error_line(capsys)
    assert not (dead_engine / "deep").exists()


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("a-file", "--output {tmp}/a-file: not a directory"),
        ("a-file/out", "--output {tmp}/a-file/out: cannot create it (Not a directory)"),
    ],
)
def test_export_refuses_an_output_it_cannot_make_before_the_engine(
    output: str, expected: str, dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dead_engine / "a-file").write_text("")
    assert main(["-C", str(REPO), "export", "-o", str(dead_engine / output)]) == 2
    assert expected.format(tmp=dead_engine) in one_error_line(capsys)


def test_an_export_the_engine_refuses_leaves_no_directory(tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    with pytest.raises(UnknownImageError):
        export_image(ExportOptions(image=TAG, output=out), FakeEngine(), report=lambda _: None)
    assert not (tmp_path / "new").exists()


def test_a_failed_export_keeps_a_directory_that_was_there(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(UnknownImageError):
        export_image(ExportOptions(image=TAG, output=tmp_path / "out"), FakeEngine(), report=lambda _: None)
    assert (tmp_path / "out").is_dir()


# import: the archive's absence or size is the input's fault when the engine cannot be asked -------------


def _exported(tmp_path: Path) -> tuple[FakeEngine, Path, Path]:
    """(the engine holding the image, its manifest, its archive)."""
    source = FakeEngine()
    source.add_saved_image(TAG, size=4096)
    result = export_image(ExportOptions(image=TAG, output=tmp_path / "out"), source, report=lambda _: None)
    return source, result.manifest_path, result.manifest_path.parent / result.manifest.archive


def test_import_of_a_missing_archive_without_an_engine_is_bad_input(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, manifest, archive = _exported(dead_engine)
    archive.unlink()
    assert main(["import", str(manifest)]) == 2
    line = one_error_line(capsys)
    assert f"archive {archive}: not found (named by {manifest})" in line
    assert "nor could the engine be asked whether it holds the image already: no Docker socket" in line


def test_import_of_an_archive_of_another_size_without_an_engine_is_an_integrity_failure(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, manifest, archive = _exported(dead_engine)
    size = archive.stat().st_size
    with archive.open("ab") as file:
        file.write(b"x")
    assert main(["import", str(manifest)]) == 7
    assert f"archive {archive}: {size + 1} bytes, the manifest says {size}" in one_error_line(capsys)


def test_import_of_an_intact_archive_without_an_engine_is_the_engines_failure(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, manifest, _ = _exported(dead_engine)
    assert main(["import", str(manifest)]) == 3
    assert "no Docker socket" in one_error_line(capsys)


def test_import_of_a_present_image_needs_no_archive(
    dead_engine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/distribution.md: a node whose engine holds the image may lack the archive."""
    source, manifest, archive = _exported(dead_engine)
    archive.unlink()

    @contextlib.contextmanager
    def opened(cls: object) -> Iterator[FakeEngine]:
        yield source

    monkeypatch.setattr("imagebuild.engine.docker.DockerEngine.opened", classmethod(opened))
    assert main(["import", str(manifest), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already_present"] is True


# attestations --download: the directory checked before the registry, made only to write into ----------


def test_attestations_download_into_a_file_is_refused_before_the_registry(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dead_engine / "a-file").write_text("kept\n")
    assert main(["attestations", REF, "--download", str(dead_engine / "a-file")]) == 2
    assert f"--download {dead_engine}/a-file: not a directory" in one_error_line(capsys)
    assert (dead_engine / "a-file").read_text() == "kept\n"


def test_attestations_download_makes_no_directory_when_the_registry_fails(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["attestations", REF, "--download", str(dead_engine / "att")]) == 8
    capsys.readouterr()
    assert not (dead_engine / "att").exists()


# render --check of a directory that is not there --------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "hint_extra"), [([], ""), (["--allow-unpinned"], " --allow-unpinned")], ids=["locked", "as-passed"]
)
def test_render_check_of_a_missing_directory_names_it_once_and_repeats_the_command(
    extra: list[str], hint_extra: str, dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = dead_engine / "ctx"
    argv = ["-C", str(REPO), "render", "--check", "--pins", str(LOCKED_PINS), "-o", str(target), *extra]
    assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{target}/: missing, nothing was rendered there",
        f"{target}/ is stale; regenerate it with: imagebuild -C {REPO} render --arch gfx942 --pins {LOCKED_PINS} "
        f"--output {target}{hint_extra}",
    ]
    assert not target.exists()


def test_render_check_of_unpinned_pins_hints_allow_unpinned(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checkout's pins.toml is not locked: a plain render refuses it, so the hint needs the flag."""
    target = dead_engine / "ctx"
    assert main(["-C", str(REPO), "render", "--check", "-o", str(target)]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{target}/ is stale; regenerate it with: imagebuild -C {REPO} render --arch gfx942 --output {target} --allow-unpinned"
    )
