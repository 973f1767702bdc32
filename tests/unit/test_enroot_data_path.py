"""Where a pyxis job's step 1 finds enroot's data directory on a node (``enroot_data_path``): enroot's
configuration block run as enroot runs it, against the sample world's stand-in enroot."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.importer.manifest import Manifest
from sampleworld.enroot_standin import write_enroot


@pytest.fixture(scope="module")
def function(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``enroot_data_path`` as `imagebuild slurm --runtime pyxis` writes it into the job."""
    directory = tmp_path_factory.mktemp("export")
    name = "kimi-k3-cdcdcdcdcdcd.sqfs"
    manifest = Manifest(
        archive=name, sha256="ef" * 32, size=1, compression="zstd", image_id="sha256:" + "cd" * 32,
        manifest_digest="sha256:" + "ab" * 32, uncompressed_size=2, repo_tags=(), pins={}, labels={},
        imagebuild_version="0", kind="squashfs", unpacked_bytes=4096, unpacked_directories=1,
    )  # fmt: skip
    (directory / f"{name}.json").write_text(json.dumps(manifest.to_json()))
    (directory / name).write_bytes(b"x")
    (directory / "imagebuild-import.pyz").write_text("# the shipped importer\n")
    job = directory / "job.sbatch"
    argv = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/kimi-k3", "--runtime", "pyxis"]
    assert main([*argv, "--archive", str(directory / f"{name}.json"), "-o", str(job)]) == 0
    text = job.read_text()
    assert "    into=$(enroot_data_path)\n" in text.split("fetch_image() {")[1]
    return "enroot_data_path() {" + text.split("enroot_data_path() {")[1].split("\n}\n")[0] + "\n}\n"


def _run(function: str, bin_dir: Path, env: dict[str, str]) -> tuple[str, str]:
    """The function's output and what it said, run as step 1 runs it (bash -euo pipefail)."""
    script = 'say() { echo "said: $*" >&2; }\n' + function + "enroot_data_path\n"
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": env.pop("HOME", "/home/alice")}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], env={**base, **env}, capture_output=True, text=True, check=True
    )
    return done.stdout.strip(), done.stderr.strip()


def test_the_configuration_file_and_its_expansions_win_over_the_jobs_own_setting(function: str, tmp_path: Path) -> None:
    sysconf = tmp_path / "etc" / "enroot"
    sysconf.mkdir(parents=True)
    (sysconf / "enroot.conf").write_text(
        "# node-local: a tmpfs per user\n"
        f"ENROOT_DATA_PATH {tmp_path}/tmpfs/enroot-data/user-$(id -u)\n"
        "ENROOT_RUNTIME_PATH ${XDG_RUNTIME_DIR}/enroot-run\n"
    )
    enroot = write_enroot(tmp_path / "bin", sysconf)
    # pyxis keeps the job's ENROOT_DATA_PATH from enroot (its deny list): the node's configuration counts.
    into, said = _run(function, enroot.parent, {"ENROOT_DATA_PATH": "/scratch/mine"})
    assert into == f"{tmp_path}/tmpfs/enroot-data/user-{os.getuid()}"
    assert said == ""
    assert not (tmp_path / "tmpfs").exists()  # enroot makes its directories; the check makes nothing


def test_without_a_configuration_the_data_directory_is_under_the_users_xdg_data_home(function: str, tmp_path: Path) -> None:
    enroot = write_enroot(tmp_path / "bin", tmp_path / "no-sysconf")
    assert _run(function, enroot.parent, {"HOME": "/home/bob"})[0] == "/home/bob/.local/share/enroot"
    assert _run(function, enroot.parent, {"XDG_DATA_HOME": "/data/bob"})[0] == "/data/bob/enroot"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no-block", "room to unpack not checked: {enroot} has no configuration block to read ENROOT_DATA_PATH from"),
        ("invalid", "room to unpack not checked: enroot's configuration gave no absolute ENROOT_DATA_PATH (none)"),
        ("relative", "room to unpack not checked: enroot's configuration gave no absolute ENROOT_DATA_PATH (enroot-data)"),
    ],
)
def test_what_cannot_be_read_is_said_and_left_unchecked(function: str, tmp_path: Path, case: str, expected: str) -> None:
    sysconf = tmp_path / "etc"
    sysconf.mkdir()
    enroot = write_enroot(tmp_path / "bin", sysconf)
    if case == "no-block":  # an enroot that is a wrapper, or a binary: nothing to read
        enroot.write_text("#!/bin/sh\nexec /opt/enroot/bin/enroot \"$@\"\n")
    else:
        (sysconf / "enroot.conf").write_text("ENROOT_DATA_PATH $(\n" if case == "invalid" else "ENROOT_DATA_PATH enroot-data\n")
    into, said = _run(function, enroot.parent, {})
    assert into == ""
    assert said == "said: " + expected.format(enroot=enroot)
