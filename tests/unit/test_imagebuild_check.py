"""The in-image check tool (image_files/imagebuild_check.py) against distributions made on disk here."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import pytest

from imagebuild.image_files import imagebuild_check as check
from imagebuild.inputs import layout

RECORDED = ("aiter/__init__.py", "aiter/ops/__init__.py", "aiter/ops/triton/conv/__init__.py")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages with amd-aiter 0.1.19 installed: files, METADATA and RECORD."""
    for name in RECORDED:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    info = tmp_path / "amd_aiter-0.1.19.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: amd-aiter\nVersion: 0.1.19\n")
    (info / "RECORD").write_text("".join(f"{name},,\n" for name in RECORDED) + f"{info.name}/RECORD,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


def require_files(*paths: str) -> str:
    return check.require_files(argparse.Namespace(dist="amd-aiter", paths=list(paths)))


def test_require_files_finds_a_recorded_directory_without_importing(site: Path) -> None:
    assert (
        require_files("aiter/ops/triton/conv/") == "amd-aiter 0.1.19 provides aiter/ops/triton/conv/ (1 file)"
    )
    assert "aiter" not in sys.modules  # checked by its file list: the real AITER probes the GPU on import


def test_require_files_names_what_the_record_lacks(site: Path) -> None:
    with pytest.raises(
        check.CheckFailed, match=r"amd-aiter 0\.1\.19 does not provide aiter/ops/triton/gemm/"
    ):
        require_files("aiter/ops/triton/conv/", "aiter/ops/triton/gemm/")


def test_require_files_names_a_recorded_file_gone_from_disk(site: Path) -> None:
    (site / "aiter/ops/triton/conv/__init__.py").unlink()
    with pytest.raises(
        check.CheckFailed, match=r"in its RECORD but aiter/ops/triton/conv/__init__\.py is not on disk"
    ):
        require_files("aiter/ops/triton/conv/")


def test_require_files_of_a_missing_distribution(site: Path) -> None:
    with pytest.raises(check.CheckFailed, match="amd-mori is not installed"):
        check.require_files(argparse.Namespace(dist="amd-mori", paths=["mori/"]))


def test_the_guard_installs_only_exact_hash_locked_lines() -> None:
    line = "setuptools==79.0.1 --hash=sha256:" + "e1" * 32
    assert check._locked_version([line], "setuptools") == "79.0.1"
    with pytest.raises(check.CheckFailed, match="has no --hash=sha256:"):
        check._locked_version(["setuptools==79.0.1"], "setuptools")
    with pytest.raises(check.CheckFailed, match="no exact, hash-locked setuptools"):
        check._locked_version(["setuptools<80 --hash=sha256:" + "e1" * 32], "setuptools")


def test_the_tool_reads_the_files_the_context_installs() -> None:
    """The tool runs in the image without imagebuild: its paths are copies of imagebuild.inputs.layout's."""
    assert str(check.CONSTRAINT_FILE) == layout.CONSTRAINT_FILE
    assert str(check.BUILD_CONSTRAINT_FILE) == layout.BUILD_CONSTRAINT_FILE
