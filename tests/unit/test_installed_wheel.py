"""The wheel, installed into a fresh venv, is a working imagebuild outside any checkout.

Built from this checkout, installed with its dependencies from the configured index (PyPI: hence
``network``), run from a directory that is no checkout: ``init`` writes a project from the package
data alone, and ``render`` there gives this repository's committed docker/gfx942/ byte for byte.
No docker.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from imagebuild.render.context import read_context_dir
from tests import REPO

pytestmark = [pytest.mark.network, pytest.mark.slow]
# Not copied for the build: setuptools writes build/ and *.egg-info into the tree it builds, and this
# checkout's build/ holds build records; the rest is state, caches or not part of the package.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", ".sampleworld", ".state", "__pycache__", "*.egg-info", ".*_cache"
)


def run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The imagebuild console script of a fresh venv holding the wheel built from this checkout."""
    root = tmp_path_factory.mktemp("wheel")
    dist, source = root / "dist", root / "source"
    # The definition's links stay links: the wheel must turn them into copies itself.
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_SOURCES)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)], root)
    (wheel,) = dist.glob("imagebuild-*.whl")
    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], root)
    return root / "venv" / "bin" / "imagebuild"


def test_installed_imagebuild_inits_and_renders_the_committed_context(
    installed: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = subprocess.run(
        [str(installed), "render"], cwd=elsewhere, capture_output=True, text=True, timeout=120, check=False
    )
    assert outside.returncode == 2
    assert "`imagebuild init DIR` writes one" in outside.stderr
    run([str(installed), "init", "team-image"], elsewhere)
    project = elsewhere / "team-image"
    assert not any(p.is_symlink() for p in project.rglob("*")), "the wheel ships copies, not links"
    run([str(installed), "-C", str(project), "render", "--allow-unpinned"], tmp_path)
    rendered = {f.path: (f.data, f.mode) for f in read_context_dir(project / "docker" / "gfx942")}
    committed = {f.path: (f.data, f.mode) for f in read_context_dir(REPO / "docker" / "gfx942")}
    assert rendered == committed
    run([str(installed), "render", "--check"], project / "stages")
    # Nothing came from this checkout: the installed package is the venv's own.
    where = run(
        [str(installed.parent / "python"), "-c", "import imagebuild; print(imagebuild.__file__)"], tmp_path
    ).stdout.strip()
    assert not Path(where).is_relative_to(REPO)
