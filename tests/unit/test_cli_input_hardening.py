"""Paths and streams the command line cannot use: one line on stderr, the documented exit code, nothing
replaced, created or half-written, and never a traceback.

Output files that are devices, FIFOs or sockets; names the file system refuses (ENAMETOOLONG); empty
values that would name the working directory; a project whose stages/ cannot be searched; a stdout that
fails (a full disk). DOCKER_HOST names a socket that does not exist, so a check made after the engine
was asked would be exit 3 instead.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.errors import ConfigError
from imagebuild.project import find_project
from tests import REPO
from tests.unit.cli_support import one_error_line

LOCKED_PINS = REPO / "tests" / "data" / "build_streams" / "pins.toml"  # every identity filled
DIGEST_REF = "127.0.0.1:5000/kimi-k3@sha256:" + "a" * 64
SLURM = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/k3", "--image", DIGEST_REF]
TOO_LONG = "b" * 300  # one path component over NAME_MAX (255)




# 1. An output file that is a device, a FIFO or a socket is refused, and left as it is -------------------


def _fifo(directory: Path) -> Path:
    os.mkfifo(directory / "fifo")
    return directory / "fifo"


def _socket(directory: Path) -> Path:
    path = directory / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
    return path


@pytest.mark.parametrize("make", [_fifo, _socket], ids=["fifo", "socket"])
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([*SLURM, "-o"], "argument -o/--output"),
        (["build", "--pins", str(LOCKED_PINS), "--record"], "argument --record"),
        (["build", "--pins", str(LOCKED_PINS), "--iidfile"], "argument --iidfile"),
        (["verify", "kimi-k3:x", "--junit"], "argument --junit"),
        (["publish", "-t", "127.0.0.1:5000/x", "--record"], "argument --record"),
        (["export", "-o", "out", "--record"], "argument --record"),
    ],
)
def test_an_output_file_that_is_no_regular_file_is_refused_and_kept(
    argv: list[str], flag: str, make: object, dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert callable(make)
    path: Path = make(dead_engine)
    mode = path.lstat().st_mode
    assert main(["-C", str(REPO), *argv, str(path)]) == 2
    line = one_error_line(capsys)
    assert f"{flag}: '{path}' is not a regular file (a device, a FIFO or a socket)" in line
    assert "name a file to write" in line
    assert path.lstat().st_mode == mode  # still the FIFO or socket: nothing was renamed over it
    assert not (dead_engine / "out").exists()


def test_a_device_is_refused_before_anything_is_written(dead_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(REPO), *SLURM, "-o", os.devnull]) == 2
    assert "'/dev/null' is not a regular file" in one_error_line(capsys)
    assert stat.S_ISCHR(Path(os.devnull).stat().st_mode)


def test_a_symlink_to_a_regular_file_is_written_as_before(dead_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The link is taken (its target is a regular file); the script replaces the link, not its target."""
    target = dead_engine / "target.sbatch"
    target.write_text("old\n")
    (dead_engine / "link.sbatch").symlink_to(target)
    assert main(["-C", str(REPO), *SLURM, "-o", str(dead_engine / "link.sbatch")]) == 0
    capsys.readouterr()
    assert (dead_engine / "link.sbatch").read_text().startswith("#!")
    assert target.read_text() == "old\n"


def test_publish_and_export_refuse_a_directory_as_record_before_the_engine(
    dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["publish", "-t", "127.0.0.1:5000/x"], ["export", "-o", str(dead_engine / "out")]):
        assert main(["-C", str(REPO), *argv, "--record", str(dead_engine)]) == 2
        assert f"argument --record: '{dead_engine}' is a directory; name a file to write" in one_error_line(capsys)
    assert not (dead_engine / "out").exists()


# 2. A name the file system refuses (ENAMETOOLONG) is the argument's error ------------------------------


def _too_long(tmp: Path) -> list[tuple[list[str], str]]:
    long = f"{tmp}/{TOO_LONG}"
    return [
        (["-C", long, "plan"], "argument -C/--project"),
        (["-C", str(REPO), *SLURM, "-o", long], "argument -o/--output"),
        (["-C", str(REPO), "render", "--allow-unpinned", "-o", f"{long}/x"], "argument -o/--output"),
        (["-C", str(REPO), "build", "--record", long], "argument --record"),
        (["-C", str(REPO), "build", "--compile-cache", long], "argument --compile-cache"),
        (["-C", str(REPO), "verify", "--junit", long], "argument --junit"),
        (["-C", str(REPO), "verify", "--checks", long, "--list"], "argument --checks"),
        (["-C", str(REPO), "import", long], "argument manifest"),
        (["-C", str(REPO), *SLURM[:-2], "--archive", long], "argument --archive"),
        (["-C", str(REPO), "diff", long, "x"], "argument IMAGE_A"),
        (["init", long], "argument DIR"),
    ]


@pytest.mark.parametrize("index", range(len(_too_long(Path("/t")))), ids=[c[1] for c in _too_long(Path("/t"))])
def test_a_name_too_long_is_one_line_naming_the_argument(
    index: int, dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, flag = _too_long(dead_engine)[index]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert f"{flag}: " in line
    assert f"cannot look at it ({os.strerror(errno.ENAMETOOLONG)}); name a path you can reach" in line
    assert TOO_LONG not in line  # shown cut, as every long value
    assert sorted(p.name for p in dead_engine.iterdir()) == []


# 6. Empty values never stand for the working directory --------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-C", "", "plan"], "argument -C/--project: '' is empty; give the project's directory"),
        (
            ["-C", str(REPO), "build", "--compile-cache", "", "--network", "host"],
            "argument --compile-cache: '': empty: name a directory for the objects",
        ),
        (["-C", str(REPO), "export", "-o", ""], "argument -o/--output: '' is empty; name a directory"),
        (["-C", str(REPO), "import", ""], "argument manifest: '' is empty"),
        (["-C", str(REPO), "build", "--record", ""], "argument --record: '' is empty; name a file to write"),
    ],
    ids=["-C", "--compile-cache", "export -o", "import", "--record"],
)
def test_an_empty_value_is_refused(
    argv: list[str], expected: str, dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert expected in one_error_line(capsys)
    assert list(dead_engine.iterdir()) == []


# 8. --scan-root names itself, not an internal key --------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--list"]], ids=["run", "list"])
def test_a_relative_scan_root_names_the_option(
    extra: list[str], dead_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-C", str(REPO), "verify", "--scan-root", "relative/path", *extra]) == 2
    line = one_error_line(capsys)
    assert "argument --scan-root: 'relative/path' is not an absolute path; give a directory inside the image" in line
    assert "'root'" not in line


# 3. A project whose stages/ cannot be searched --------------------------------------------------------


def test_an_unreadable_stages_directory_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "proj"
    (project / "stages").mkdir(parents=True)
    (project / "stages" / "image.toml").write_text("")
    real_is_file = Path.is_file

    def is_file(self: Path) -> bool:  # as stat answers for stages/ at mode 000, even for root's tests
        if self.parent == project / "stages":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    with pytest.raises(ConfigError, match=r"proj/stages: cannot be read \(Permission denied\)"):
        find_project(project, search_parents=False)
    assert main(["-C", str(project), "plan", "--json"]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"imagebuild: error: {project}/stages: cannot be read (Permission denied); make {project} and its "
        "stages/ readable, or give another project with -C DIR"
    ]
    assert '"exit_code": 2' in out


# 4. A stdout that fails ------------------------------------------------------------------------------


class FullStdout:
    """A stdout on a full disk, as `> /dev/full` is."""

    def __init__(self) -> None:
        self.attempts = 0

    def write(self, text: str) -> int:
        self.attempts += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "no descriptor")  # io.UnsupportedOperation's kind: not redirected


@pytest.mark.parametrize("argv", [["plan"], ["plan", "--json"], ["render", "--allow-unpinned", "-o", "-"]])
def test_a_full_stdout_is_one_line_and_exit_1(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stdout = FullStdout()
    monkeypatch.setattr("sys.stdout", stdout)
    assert main(["-C", str(REPO), *argv]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "imagebuild: error: could not write the output to stdout: No space left on device; free space there "
        "or redirect it elsewhere"
    ]
    assert stdout.attempts >= 1
