"""Every verb over a matrix of bad inputs: exit 2, one line `imagebuild: error: ...`, no traceback.

The inputs are generated: every string field of every pin with each kind of
bad value, the paths `--pins` can name that are not a readable UTF-8 file,
broken stage, arch, constraint and python-lock files, and each verb's bad
arguments. Each case runs ``imagebuild.cli.main`` in-process for every verb
that reads the broken input, and asserts the exit code, that stderr is one
line, and that the pins file is byte-identical afterwards. DOCKER_HOST
points at a dead socket and the unit tier refuses network connections: a
verb that reached the engine or the network before reporting bad input fails
here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from imagebuild.cli import main
from tests import REPO
from tests.unit.error_matrix_support import CASES, DIGEST_REF, VERBS, Case, Setup

# Each verb's own bad arguments (the inputs are fine).
nothing: Setup = lambda root, mp: None  # noqa: E731
ARGUMENTS: dict[str, tuple[str, list[str]]] = {
    "--arch unknown": ("render", ["--arch", "gfx90a"]),
    "--arch with a newline": ("plan", ["--arch", "gfx942\nx"]),
    "--arch a path": ("render", ["--arch", "../../etc/passwd"]),
    "unknown flag": ("render", ["--bogus"]),
    "--changed with a newline": ("plan --changed", ["--changed", "mori\nRUN"]),
    "--changed unknown": ("plan --changed", ["--changed", "morri"]),
    "--jobs 0": ("lock --dry-run", ["--jobs", "0"]),
    "--jobs not a number": ("lock --dry-run", ["--jobs", "many"]),
    "--timeout nan": ("lock --check", ["--timeout", "nan"]),
    "--timeout negative": ("lock --check", ["--timeout", "-1"]),
    "--deadline inf": ("lock --check", ["--deadline", "inf"]),
    "--only bogus": ("lock --check", ["--only", "bogus"]),
    "-P unknown pin": ("lock --check", ["-P", "nosuch"]),
    "--build-arg with a space": ("build", ["--build-arg", "MAX_JOBS=1 2"]),
    "--build-arg with $(...)": ("build", ["--build-arg", "MAX_JOBS=$(nproc)"]),
    "--build-arg with a newline": ("build", ["--build-arg", "MAX_JOBS=32\nRUN touch /pwned"]),
    "--build-arg undecodable": ("build", ["--build-arg", "MAX_JOBS=\udcff"]),
    "--build-arg not a tunable": ("build", ["--build-arg", "FOO=1"]),
    "--build-arg without =": ("build", ["--build-arg", "MAX_JOBS"]),
    "--build-arg without a name": ("build", ["--build-arg", "=1"]),
    "--build-arg secret name": ("build", ["--build-arg", "GH_TOKEN=abc"]),
    "--build-arg secret value": ("build", ["--build-arg", "MAX_JOBS=ghp_abcdefghijklmnopqrstu"]),
    "--build-arg lower-case name": ("build", ["--build-arg", "max_jobs=1"]),
    "--tag upper case": ("build", ["--tag", "Image:Tag"]),
    "--tag with a space": ("build", ["--tag", "image: tag"]),
    "--tag that reads as an option": ("build", ["--tag=--rm"]),
    "--network with a space": ("build", ["--network", "host; rm"]),
    "--record a directory": ("build", ["--record", "stages"]),
    "--record inside a file": ("build", ["--record", "pins.toml/record.json"]),
    "--record with a newline": ("build", ["--record", "a\nb.json"]),
    "--progress bogus": ("build", ["--progress", "fancy"]),
    "verify image with a space": ("verify", ["an image"]),
    "verify image with a newline": ("verify", ["img\nx"]),
    "--junit a directory": ("verify", ["--junit", "stages"]),
    "--scan-root relative": ("verify", ["--scan-root", "etc"]),
    "--scan-root with ..": ("verify", ["--scan-root", "/etc/../root"]),
    "publish --repository without a registry": ("publish", ["--repository", "kimi k3"]),
    "export --output a file": ("export", ["--output", "pins.toml"]),
    "export --compress bogus": ("export", ["--output", "out", "--compress", "bogus"]),
    "import a missing manifest": ("import", ["absent.json"]),
    "import a directory": ("import", ["stages"]),
    "import the pins file": ("import", ["pins.toml"]),
    "import without a manifest": ("import", []),
    "render --output with a newline": ("render", ["--output", "ctx\ndir"]),
    "diff an image with a newline": ("diff", ["img\nx", "imagebuild-harden/matrix:x"]),
    "diff an image with a space": ("diff", ["imagebuild-harden/matrix:x", "an image"]),
    "diff a directory": ("diff", ["stages", "imagebuild-harden/matrix:x"]),
    "diff a missing archive": ("diff", ["absent.tar", "imagebuild-harden/matrix:x"]),
    "diff one operand": ("diff", ["imagebuild-harden/matrix:x"]),
    "diff a file that is no archive": ("diff", ["pins.toml", "imagebuild-harden/matrix:x"]),
    "diff two files that are no archives": ("diff", ["pins.toml", "constraints/build.txt"]),
    "slurm --nodes 0": ("slurm", ["--nodes", "0", "--image", DIGEST_REF]),
    "slurm --variant with a newline": ("slurm", ["--variant", "a\nb", "--image", DIGEST_REF]),
    "slurm --model-path relative": ("slurm", ["--model-path", "models/k3", "--image", DIGEST_REF]),
    "slurm --image a tag": ("slurm", ["--image", "kimi-k3:latest"]),
    "slurm --image and --archive": ("slurm", ["--image", DIGEST_REF, "--archive", "m.json"]),
    "slurm --archive a directory": ("slurm", ["--archive", "stages"]),
    "slurm -o a directory": ("slurm", ["--image", DIGEST_REF, "-o", "stages"]),
    "slurm -o in a missing directory": ("slurm", ["--image", DIGEST_REF, "-o", "absent/job.sbatch"]),
    # Output files checked up front, operands that are no regular file, empty names.
    "--record in /proc": ("build", ["--record", "/proc/x.json"]),
    "--record in a read-only directory": ("build", ["--record", "/proc/sys/x.json"]),
    "--changed empty": ("plan --changed", ["--changed", ""]),
    "--changed blank": ("plan --changed", ["--changed", "  "]),
    "diff /dev/zero": ("diff", ["/dev/zero", "imagebuild-harden/matrix:x"]),
    "diff /dev/null": ("diff", ["imagebuild-harden/matrix:x", "/dev/null"]),
    # Registry references: credentials are refused (and never echoed), ports are TCP ports.
    "publish -t with a password": ("publish", ["-t", "alice:hunter2@127.0.0.1:5000/x"]),
    "publish -t with a user": ("publish", ["-t", "alice@127.0.0.1:5000/x"]),
    "publish --repository with a password": ("publish", ["--repository", "alice:hunter2@127.0.0.1:5000/x"]),
    "publish -t port 99999": ("publish", ["-t", "127.0.0.1:99999/x"]),
    "publish -t port 0": ("publish", ["-t", "127.0.0.1:0/x"]),
    "publish --repository port 99999": ("publish", ["--repository", "127.0.0.1:99999/x"]),
    "publish -t with U+202E": ("publish", ["-t", "127.0.0.1:5000/x\u202e"]),
    # The launcher's character set: bidi overrides and isolates, C1 controls, overlong values.
    "slurm --model-path with U+202E": ("slurm", ["--model-path", "/models/\u202ek3", "--image", DIGEST_REF]),
    "slurm --model-path with U+2066": ("slurm", ["--model-path", "/models/\u2066k3", "--image", DIGEST_REF]),
    "slurm --model-path with a C1 control": ("slurm", ["--model-path", "/models/\x9bk3", "--image", DIGEST_REF]),
    "slurm --model-path 5000 characters": ("slurm", ["--model-path", "/" + "m" * 5000, "--image", DIGEST_REF]),
    "slurm --job-name with U+202E": ("slurm", ["--job-name", "k3\u202ebad", "--image", DIGEST_REF]),
    "slurm --env value with U+202E": ("slurm", ["--env", "PERF_TAGS=a\u202eb", "--image", DIGEST_REF]),
    "slurm --benchmark-cmd with U+2028": ("slurm", ["--benchmark-cmd", "run\u2028x", "--image", DIGEST_REF]),
}
for _name, (_verb, _args) in ARGUMENTS.items():
    CASES[f"argument {_name}"] = Case(setup=nothing, verbs=(_verb,), extra={_verb: _args})


def _docker_host(value: str) -> Setup:
    def setup(_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("DOCKER_HOST", value)

    return setup


# The engine's address is input too: a bad one is exit 2 on one line, whichever verb opens the engine.
ENGINE_VERBS = {
    "diff": ["imagebuild-harden/matrix:x", "imagebuild-harden/matrix:y"],
    "publish": ["imagebuild-harden/matrix:x", "-t", "127.0.0.1:5000/x"],
}
for _name, _value in [
    ("a newline", "unix:///var/run/docker.sock\nx"),
    ("ESC", "unix:///var/run/\x1b[31mdocker.sock"),
    ("U+202E", "unix:///var/run/docker.sock\u202e"),
    ("no port", "tcp://127.0.0.1"),
]:
    CASES[f"DOCKER_HOST with {_name}"] = Case(setup=_docker_host(_value), verbs=tuple(ENGINE_VERBS), extra=ENGINE_VERBS)


def _fifo_operand(root: Path, _: pytest.MonkeyPatch) -> None:
    os.mkfifo(root / "image.tar")  # reading it would block for ever


CASES["argument diff a FIFO"] = Case(
    setup=_fifo_operand, verbs=("diff",), extra={"diff": ["image.tar", "imagebuild-harden/matrix:x"]}
)


def _run(case: Case, verb: str, root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = [*VERBS[verb], *case.extra.get(verb, [])]
    if case.pins_arg is not None:
        argv += ["--pins", case.pins_arg]
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("stages", "constraints", "docker"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "pins.toml", tmp_path / "pins.toml")
    monkeypatch.chdir(tmp_path)
    # No engine here: a verb that asked it before checking its input would fail with exit 3.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def test_a_fifo_given_as_a_manifest_is_refused_not_read(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(root / "m.json")  # reading it would block for ever
    for argv in (["import", "m.json"], [*VERBS["slurm"], "--archive", "m.json"]):
        assert main(argv) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert "not a regular file" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["publish", "-t", "alice:hunter2@127.0.0.1:5000/x"],
        ["publish", "img", "--repository", "alice:hunter2@127.0.0.1:5000/x"],
    ],
)
def test_a_password_in_a_registry_reference_is_refused_and_never_echoed(
    root: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "hunter2" not in line
    assert "alice" not in line
    assert "'<redacted>@127.0.0.1:5000/x': a registry address carries no user name or password" in line
    assert "digest" not in line  # the old, wrong reason


def test_a_long_value_is_shown_cut_short(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*VERBS["slurm"], "--model-path", "/" + "m" * 5000, "--image", DIGEST_REF]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "is 5001 characters long (at most 4096)" in line
    assert len(line) < 300


def test_the_matrix_is_over_a_hundred_cases() -> None:
    assert sum(len(c.verbs) for c in CASES.values()) > 500
    assert len(CASES) > 250


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_exit_2_and_leaves_pins_untouched(
    name: str, root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[name]
    case.setup(root, monkeypatch)
    pins = root / "pins.toml"
    before = pins.read_bytes() if pins.is_file() else None
    for verb in case.verbs:
        code, err = _run(case, verb, root, capsys)
        lines = err.splitlines()
        assert "Traceback" not in err, (verb, err)
        assert code == 2, (verb, code, err)
        assert len(lines) == 1, (verb, err)
        assert lines[0].startswith("imagebuild: error: "), (verb, err)
        assert (pins.read_bytes() if pins.is_file() else None) == before, verb
