"""Each verb checks its own arguments and input files before it contacts the engine or the network.

DOCKER_HOST points at a socket that does not exist (and the network guard refuses the internet), so
a check that came after the connection would be reported as "no Docker socket" or a lock failure:
each bad value must instead be one line, exit 2, naming the argument.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.cli import main
from tests import REPO

LOCKED_PINS = REPO / "tests" / "data" / "build_streams" / "pins.toml"  # every identity filled
SLURM = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/k3", "--image"]
DIGEST_REF = "127.0.0.1:5000/kimi-k3@sha256:" + "a" * 64


@pytest.fixture
def dead_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    (tmp_path / "a-file").write_text("not a directory\n")
    return tmp_path


def bad_values(tmp: Path) -> list[tuple[list[str], str]]:
    """(argv after `imagebuild -C REPO`, what the message must name)."""
    build = ["build", "--pins", str(LOCKED_PINS)]
    return [
        ([*build, "--build-arg", "MAX_JOBS"], "argument --build-arg: 'MAX_JOBS': expected NAME=VALUE"),
        ([*build, "--build-arg", "GH_TOKEN=abc"], "--build-arg GH_TOKEN: refused"),
        ([*build, "--tag", "Kimi/K3:gfx942"], "argument -t/--tag: 'Kimi/K3:gfx942'"),
        ([*build, "--tag", "kimi-k3:bad tag"], "argument -t/--tag: 'kimi-k3:bad tag'"),
        ([*build, "--tag", f"kimi-k3@sha256:{'a' * 64}"], "argument -t/--tag"),
        ([*build, "--network", "host; reboot"], "argument --network: 'host; reboot'"),
        ([*build, "--record", f"{tmp}/missing/r.json"], f"argument --record: {tmp}/missing/r.json"),
        ([*build, "--record", str(tmp)], "argument --record"),
        ([*build, "--iidfile", f"{tmp}/a-file/iid"], f"argument --iidfile: {tmp}/a-file/iid"),
        ([*build, "--progress", "fancy"], "argument --progress"),
        ([*build, "--arch", "gfx9999"], "gfx9999"),
        (["verify", "Not An Image!"], "argument image: 'Not An Image!'"),
        (["verify", "--junit", f"{tmp}/missing/junit.xml"], "argument --junit"),
        (["publish", "--repository", "kimi-k3"], "--repository 'kimi-k3'"),
        (["publish", "--repository", "registry.example.com/k3", "--tag", "a/b"], "--tag 'a/b'"),
        (["publish", "Not An Image!", "--repository", "registry.example.com/k3"], "argument image"),
        (["export", "--output", f"{tmp}/a-file/out"], f"--output {tmp}/a-file/out"),
        (["export", "--output", str(tmp), "--compress", "xz"], "argument --compress"),
        (["import", f"{tmp}/missing.json"], f"{tmp}/missing.json"),
        ([*SLURM, DIGEST_REF, "-o", f"{tmp}/missing/job.sbatch"], "argument -o/--output"),
        ([*SLURM, "kimi-k3:latest"], "--image"),
        (["lock", "--jobs", "0"], "--jobs"),
        (["lock", "--timeout", "-1"], "--timeout"),
        (["lock", "--only", "pins", "-P", "vlm"], "no pin named 'vlm'"),
    ]


CASES = bad_values(Path("/TMP"))


@pytest.mark.parametrize("index", range(len(CASES)), ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CASES])
def test_a_bad_value_is_reported_as_itself_before_the_engine(
    index: int, dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, named = bad_values(dead_engine)[index]
    assert main(["-C", str(REPO), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert named in err
    assert "Docker" not in err
    assert "socket" not in err


def test_valid_arguments_do_reach_the_dead_engine(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the same command lines with good values fail at the engine, so the checks above
    really ran before it."""
    argv = [
        "build",
        "--pins",
        str(LOCKED_PINS),
        "--tag",
        "kimi-k3:x",
        "--record",
        str(dead_engine / "r.json"),
    ]
    assert main(["-C", str(REPO), *argv]) == 3
    assert f"no Docker socket at {dead_engine}/dead.sock" in capsys.readouterr().err
    assert main(["-C", str(REPO), "verify", "kimi-k3:x", "--junit", str(dead_engine / "j.xml")]) == 3
    assert main(["export", "--output", str(dead_engine / "out")]) == 3
    assert not (dead_engine / "r.json").exists()
    assert not (dead_engine / "j.xml").exists()
