"""The self-contained build context: what `imagebuild render` writes, checks and prints."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.build.core import check_build_args
from imagebuild.cli import main
from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import CHECKOUT_LABEL_ARGS, INPUTS_LABEL, PIN_LABEL_PREFIX
from imagebuild.project import Inputs, find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import BuildContext, build_context, read_context_dir
from tests import REPO


def context_of(root: Path, pins: Path | None = None) -> tuple[Inputs, BuildContext]:
    inputs = find_project(root, pins).load("gfx942")
    dockerfile = render_inputs(inputs, RenderOptions(allow_unpinned=True))
    return inputs, build_context(dockerfile, inputs)


def test_render_writes_the_dockerfile_and_every_file_it_copies(project: Path) -> None:
    target = project / "out"
    assert main(["render", "--allow-unpinned", "--output", str(target)]) == 0
    written = {f.path: f for f in read_context_dir(target)}
    _, context = context_of(project)
    assert written == {f.path: f for f in context.files}
    copied = re.findall(r"^COPY (\S+)/ ", context.dockerfile, re.MULTILINE)
    assert copied == ["rootfs", "launcher"]
    assert all(any(path.startswith(f"{d}/") for path in written) for d in copied)
    # What the locked installs and the isolated builds need is in it.
    assert "rootfs/etc/pip-build-constraints.txt" in written
    assert written["rootfs/opt/imagebuild/bin/imagebuild-check"].mode == 0o755
    assert written["launcher/serve.py"].mode == 0o755
    assert main(["render", "--check", "--output", str(target)]) == 0


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        (
            lambda d: (d / "rootfs" / "stale.txt").write_text("x"),
            "rootfs/stale.txt: not part of the context (stale)",
        ),
        (lambda d: (d / "launcher" / "serve.py").unlink(), "launcher/serve.py: missing"),
        (
            lambda d: (d / "rootfs/etc/pip-constraints.txt").write_text("x"),
            "pip-constraints.txt: content differs",
        ),
        (lambda d: (d / "rootfs/opt/imagebuild/bin/imagebuild-check").chmod(0o644), "mode 644, expected 755"),
    ],
)
def test_render_check_covers_content_file_set_and_modes(
    project: Path, capsys: pytest.CaptureFixture[str], spoil: Callable[[Path], object], problem: str
) -> None:
    target = project / "docker" / "gfx942"
    assert main(["render", "--check"]) == 0
    spoil(target)
    assert main(["render", "--check"]) == 1
    err = capsys.readouterr().err
    assert problem in err
    assert "imagebuild render --arch gfx942 --allow-unpinned" in err


def test_output_dash_prints_just_the_dockerfile(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--allow-unpinned", "--output", "-"]) == 0
    out = capsys.readouterr().out
    assert out == (project / "docker" / "gfx942" / "Dockerfile").read_text()


def test_other_pins_never_overwrite_the_committed_context(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = project / "elsewhere" / "pins.toml"
    other.parent.mkdir()
    shutil.copy(project / "pins.toml", other)
    before = (project / "docker" / "gfx942" / "Dockerfile").read_bytes()
    assert main(["render", "--allow-unpinned", "--pins", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("imagebuild: error: --pins ")
    assert "pass --output DIR" in err
    assert (project / "docker" / "gfx942" / "Dockerfile").read_bytes() == before


def test_a_directory_that_is_no_context_is_not_replaced(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = project / "notes"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    assert main(["render", "--allow-unpinned", "--output", str(target)]) == 2
    assert "not a build context" in capsys.readouterr().err
    assert [p.name for p in target.iterdir()] == ["keep.txt"]


def test_labels_fixed_in_the_file_and_the_checkouts_as_build_args() -> None:
    inputs, context = context_of(REPO)
    text = context.dockerfile
    label = text[text.index("\nLABEL ") :]
    for label_name, arg in CHECKOUT_LABEL_ARGS.items():
        assert f'ARG {arg}="unknown"' in text
        assert f'"{label_name}"="${{{arg}}}"' in label
    for pin in inputs.pins:
        assert f'"{PIN_LABEL_PREFIX}{pin.name}"=' in label
    # The inputs digest is of the context without the label block (a file cannot hold its own digest).
    digest = "sha256:" + hashlib.sha256(context.inputs_tar).hexdigest()
    assert context.labels[INPUTS_LABEL] == digest
    assert f'"{INPUTS_LABEL}"="{digest}"' in label
    assert text.rstrip().splitlines()[-1].startswith('      "org.opencontainers.image.version"=')


def test_build_args_override_only_tunables() -> None:
    inputs = find_project(REPO).load("gfx942")
    check_build_args({"MAX_JOBS": "8"}, inputs)
    with pytest.raises(ConfigError, match=r"change the pins file instead"):
        check_build_args({"MORI_COMMIT": "0" * 40}, inputs)
    with pytest.raises(ConfigError, match="Perhaps you meant 'MAX_JOBS'"):
        check_build_args({"MAX_JOB": "8"}, inputs)
    with pytest.raises(ConfigError, match="not a build tunable"):
        check_build_args({"IMAGEBUILD_REVISION": "abc"}, inputs)  # imagebuild passes the checkout's facts
