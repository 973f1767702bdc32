"""Values checked by their kind before the engine: image references without credentials, build
tunables as numbers and switches, and [args] keys named as keys.

Each CLI case runs ``imagebuild.cli.main`` in-process with DOCKER_HOST on a dead socket: a value that
got past its check would reach the engine and exit 3, not 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.errors import ConfigError
from imagebuild.inputs.layers import layer_enabled
from imagebuild.inputs.references import (
    USERINFO_PROBLEM,
    image_problem,
    tag_reference_problem,
    userinfo_problem,
)
from imagebuild.inputs.schema import Table
from imagebuild.inputs.stages import load_stages
from imagebuild.inputs.values import ENV_NAME
from tests import REPO
from tests.unit.error_matrix_support import VERBS

SECRET = "s3cretpw"
DIGEST = "sha256:" + "a" * 64


@pytest.fixture
def root(project: Path, dead_engine: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The checkout's inputs as the working directory, and an engine nothing answers for."""
    monkeypatch.setenv("NO_COLOR", "1")
    return project


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a refused command (exit 2); nothing on stdout."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert line.startswith("imagebuild: error: ")
    assert "Traceback" not in err
    assert SECRET not in out + err
    return line


# Image references ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        f"user:{SECRET}@host/repo:tag",
        f"user:{SECRET}@reg.example.com/ml/kimi-k3@{DIGEST}",
        f"user:{SECRET}@reg.example.com:5000/x:1",
        f"user:{SECRET}@reg.example.com",  # no path: the ':' is no tag, no digest follows
        f"user:pa/{SECRET}@host/repo",  # a '/' in the password
        "user@reg.example.com/x",  # a user name alone
    ],
)
def test_user_info_in_a_reference_is_refused_by_every_parser(text: str) -> None:
    assert userinfo_problem(text) == USERINFO_PROBLEM
    assert tag_reference_problem(text) == USERINFO_PROBLEM
    assert image_problem(text) == USERINFO_PROBLEM


@pytest.mark.parametrize(
    "text",
    [
        f"ubuntu@{DIGEST}",
        f"ubuntu:22.04@{DIGEST}",
        f"reg.example.com:5000/ml/kimi-k3:gfx942@{DIGEST}",
        "reg.example.com/ml/kimi-k3:gfx942",
    ],
)
def test_a_digest_is_not_user_info(text: str) -> None:
    assert userinfo_problem(text) is None
    assert image_problem(text) is None


def test_a_bad_digest_still_says_digest() -> None:
    assert image_problem("ubuntu@latest") == "digest 'latest' is not 'sha256:' and 64 hex digits"


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--network", "host", "-t", f"user:{SECRET}@host/repo:tag"],
        ["verify", f"user:{SECRET}@reg.example/img:tag"],
        ["diff", f"user:{SECRET}@reg.example.com/x:1", "a"],
        ["export", f"user:{SECRET}@reg.example.com/x:1"],
    ],
)
def test_a_reference_with_a_password_is_refused_and_never_echoed(
    root: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    line = _one_line(argv, capsys)
    assert USERINFO_PROBLEM in line
    assert "'<redacted>@" in line
    assert "user:" not in line


def test_slurm_image_with_a_password_is_never_echoed(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line([*VERBS["slurm"], "--image", f"user:{SECRET}@reg.example.com/ml/kimi-k3@{DIGEST}"], capsys)
    assert "--image '<redacted>@reg.example.com/ml/kimi-k3@" in line


def test_slurm_image_with_a_long_password_names_the_problem_and_leaks_none_of_it(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shown value is cut at about 75 characters: redacted after the cut, the '@host' that marks
    a password would be gone and its first characters shown."""
    password = SECRET * 20
    line = _one_line([*VERBS["slurm"], "--image", f"user:{password}@reg.example.com/ml/kimi-k3@{DIGEST}"], capsys)
    assert USERINFO_PROBLEM in line
    assert SECRET[:4] not in line


# Build tunables -------------------------------------------------------------------------------------------

JOBS = "is not a number of parallel jobs: a whole number from 1 to 1024"
SWITCH = "is not 0 or 1; 0 leaves the optional layer out, 1 builds it"


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("MAX_JOBS=", f"--build-arg: 'MAX_JOBS' = '' {JOBS}"),  # `make -j`: no limit
        ("MAX_JOBS=-1", f"--build-arg: 'MAX_JOBS' = '-1' {JOBS}"),
        ("MAX_JOBS=08", f"--build-arg: 'MAX_JOBS' = '08' {JOBS}"),
        ("MAX_JOBS=1025", f"--build-arg: 'MAX_JOBS' = '1025' {JOBS}"),
        ("NVCC_THREADS=0", f"--build-arg: 'NVCC_THREADS' = '0' {JOBS}"),
        ("WITH_NIXL=yes", f"--build-arg: 'WITH_NIXL' = 'yes' {SWITCH}"),
        ("WITH_NIXL=", f"--build-arg: 'WITH_NIXL' = '' {SWITCH}"),
    ],
)
@pytest.mark.parametrize("verb", ["build", "plan", "verify"])
def test_a_tunable_of_the_wrong_kind_is_refused_before_the_engine(
    root: Path, capsys: pytest.CaptureFixture[str], verb: str, arg: str, expected: str
) -> None:
    line = _one_line([*VERBS[verb], "--build-arg", arg], capsys)
    assert line == f"imagebuild: error: {expected}"


@pytest.mark.parametrize("arg", ["MAX_JOBS=1", "MAX_JOBS=1024", "NVCC_THREADS=16", "WITH_NIXL=0"])
def test_a_tunable_of_its_kind_plans(root: Path, capsys: pytest.CaptureFixture[str], arg: str) -> None:
    assert main(["plan", "--build-arg", arg]) == 0


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('MAX_JOBS = "32"', 'MAX_JOBS = ""', f"'MAX_JOBS' = '' {JOBS}"),
        ('NVCC_THREADS = "8"', 'NVCC_THREADS = "0"', f"'NVCC_THREADS' = '0' {JOBS}"),
        ('WITH_NIXL = "0"', 'WITH_NIXL = "no"', f"'WITH_NIXL' = 'no' {SWITCH}"),
    ],
)
@pytest.mark.parametrize("verb", ["render", "plan"])
def test_an_image_toml_default_of_the_wrong_kind_is_refused(
    root: Path, capsys: pytest.CaptureFixture[str], *, verb: str, old: str, new: str, expected: str
) -> None:
    image_toml = root / "stages" / "image.toml"
    _edit(image_toml, old, new)
    line = _one_line([*VERBS[verb], "-o", "out"] if verb == "render" else VERBS[verb], capsys)
    assert line == f"imagebuild: error: {image_toml} [args]: {expected}"
    assert not (root / "out").exists()


def test_an_arch_profile_arg_of_the_wrong_kind_is_refused(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = root / "stages" / "arch" / "gfx942.toml"
    profile.write_text(profile.read_text() + '\n[args]\nWITH_NIXL = "true"\nMAX_JOBS = "4"\n')
    line = _one_line(["plan", "--arch", "gfx942"], capsys)
    assert line == f"imagebuild: error: {profile} [args]: 'WITH_NIXL' = 'true' {SWITCH}"


def test_an_optional_layer_is_on_only_for_1() -> None:
    (step,) = [s for s in load_stages(REPO / "stages").steps if s.layer is not None]
    assert layer_enabled(step, {step.layer.arg: "1"})  # type: ignore[union-attr]
    for value in ("0", "yes", "", "01"):
        assert not layer_enabled(step, {step.layer.arg: value})  # type: ignore[union-attr]


# [args] keys ----------------------------------------------------------------------------------------------


def test_a_bad_args_key_is_named_as_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        Table({"args": {"max jobs": "32"}}, "stages/image.toml").string_map("args", names=ENV_NAME)
    assert str(e.value) == "stages/image.toml: [args] key 'max jobs' is not an UPPER_SNAKE_CASE name"


def test_a_bad_args_key_in_image_toml_is_one_line(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    image_toml = root / "stages" / "image.toml"
    _edit(image_toml, 'MAX_JOBS = "32"', '"max jobs" = "32"')
    line = _one_line(VERBS["plan"], capsys)
    assert line == f"imagebuild: error: {image_toml}: [args] key 'max jobs' is not an UPPER_SNAKE_CASE name"


def test_a_long_password_is_redacted_before_the_value_is_cut() -> None:
    from imagebuild.inputs.values import HTTPS_URL

    password = "Q" * 150  # longer than a message shows: a cut would drop the '@host' that marks it
    with pytest.raises(ConfigError) as e:
        HTTPS_URL.check(f"https://deploy:{password}@git.example.com/r.git", "pins.toml [x]", "url")
    assert "QQQQ" not in str(e.value)
    assert "'https://deploy:<redacted>@git.example.com/r.git' carries credentials" in str(e.value)
