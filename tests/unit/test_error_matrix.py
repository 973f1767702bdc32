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
import pathlib
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from imagebuild.cli import main
from tests import REPO

# Each verb as the matrix runs it (all read pins, stages, the arch profile and constraints).
VERBS: dict[str, list[str]] = {
    "render": ["render", "--allow-unpinned"],
    "render --check": ["render", "--check"],
    "plan": ["plan", "--json"],
    "plan --changed": ["plan", "--changed", "mori"],
    "lock --dry-run": ["lock", "--dry-run"],
    "lock --check": ["lock", "--check", "--only", "pins"],
    "build": ["build", "--network", "host", "--tag", "imagebuild-harden/matrix:x"],
    "verify": ["verify", "imagebuild-harden/matrix:x"],
}
ALL = tuple(VERBS)  # the verbs that read the project's inputs
# The verbs that get an image to the nodes read no pins: only their own arguments are bad here.
VERBS |= {
    "publish": ["publish"],
    "export": ["export"],
    "import": ["import"],
    "diff": ["diff"],
    "slurm": ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/k3"],
}
DIGEST_REF = "127.0.0.1:5000/kimi-k3@sha256:" + "a" * 64

Setup = Callable[[Path, pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Case:
    setup: Setup  # breaks something in the project directory
    verbs: tuple[str, ...] = ALL
    extra: dict[str, list[str]] = field(default_factory=dict)  # verb -> arguments added to it
    pins_arg: str | None = None  # --pins, relative to the project directory


def _edit_toml(relative: str, change: Callable[[Any], None]) -> Setup:
    def setup(root: Path, _: pytest.MonkeyPatch) -> None:
        path = root / relative
        doc = tomlkit.parse(path.read_text())
        change(doc)
        path.write_text(tomlkit.dumps(doc))

    return setup


def _write(relative: str, data: bytes) -> Setup:
    def setup(root: Path, _: pytest.MonkeyPatch) -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return setup


def _set(table: str, key: str, value: Any, relative: str = "pins.toml") -> Setup:
    def change(doc: Any) -> None:
        target = doc
        for part in table.split(".") if table else []:
            target = target[part]
        target[key] = value

    return _edit_toml(relative, change)


# Bad values for any string field: line breaks and other controls that would add a Dockerfile
# line, quotes that would end a quoted word, wrong TOML types.
BAD_FOR_ANY_STRING: dict[str, Any] = {
    "newline": "x\nRUN touch /pwned",
    "carriage return": "x\rRUN touch /pwned",
    "NUL": "x\x00y",
    "DEL": "x\x7f",
    "line separator": "x\u2028RUN touch /pwned",
    "escape sequence": "\x1b[31mred",
    "quote injection": 'x"; touch /pwned; echo "',
    "integer": 5,
    "list": ["a"],
    "table": {"a": "b"},
    "boolean": True,
}

CASES: dict[str, Case] = {}


def _pins_field_cases() -> None:
    data = tomllib.loads((REPO / "pins.toml").read_text())
    for pin, table in data.items():
        for key, value in table.items():
            if not isinstance(value, str) or key == "kind":
                continue
            for what, bad in BAD_FOR_ANY_STRING.items():
                if what in ("integer", "boolean") and key in ("digest", "sha256"):
                    continue  # covered by the other fields; keep the matrix at a readable size
                CASES[f"pins [{pin}] {key}: {what}"] = Case(setup=_set(pin, key, bad))


_pins_field_cases()

SEMANTIC: dict[str, tuple[str, str, Any]] = {
    "python is latest": ("base", "python", "latest"),
    "python is 3": ("base", "python", "3"),
    "python is 3.12.1": ("base", "python", "3.12.1"),
    "site_packages relative": ("base", "site_packages", "usr/lib/python3/dist-packages"),
    "site_packages with a space": ("base", "site_packages", "/usr/lib/my python"),
    "image with upper case": ("base", "image", "ROCm/vllm-dev"),
    "image with a tag in it": ("base", "image", "rocm/vllm-dev:latest"),
    "tag with a space": ("donor", "tag", "kimi k3"),
    "digest not hex": ("base", "digest", "sha256:xyz"),
    "git url over plain http": ("mori", "url", "http://github.com/ROCm/mori.git"),
    "git url with user info": (
        "mori",
        "url",
        "https://ghp_abcdefghijklmnopqrstuvwxyz@github.com/ROCm/mori.git",
    ),
    "git url with password": ("mori", "url", "https://user:pass@github.com/ROCm/mori.git"),
    "git url over ssh": ("mori", "url", "ssh://git@github.com/ROCm/mori.git"),
    "git url file://": ("mori", "url", "file:///srv/mori.git"),
    "tag that reads as an option": ("mori", "tag", "--upload-pack=touch /pwned"),
    "branch with ..": ("vllm", "branch", "a..b"),
    "short commit": ("vllm", "commit", "862bfd8"),
    "wheel url with token query": ("aiter", "url", "https://h/x/a-1-py3-none-any.whl?token=abc"),
    "wheel url presigned": ("aiter", "url", "https://h/a-1-py3-none-any.whl?X-Amz-Signature=abc"),
    "wheel url not a wheel": (
        "aiter",
        "url",
        "https://github.com/ROCm/aiter/releases/download/x/aiter.tar.gz",
    ),
    "wheel url %0A in file name": ("aiter", "url", "https://h/a%0ARUN%20x-1-py3-none-any.whl"),
    "wheel size negative": ("aiter", "size", -1),
    "wheel size a string": ("aiter", "size", "10"),
    "wheel version latest": ("aiter", "version", "latest"),
    "pypi version latest": ("flydsl", "version", "latest"),
    "pypi version with a space": ("flydsl", "version", "0.2.4 "),
    "pypi project with a space": ("flydsl", "project", "fly dsl"),
    "pypi index over http": ("flydsl", "index", "http://pypi.org/simple/"),
    "pypi index with a token": ("flydsl", "index", "https://pypi.example.org/simple/?access_token=x"),
    "pypi filename with a slash": ("flydsl", "filename", "../flydsl-0.2.4-py3-none-any.whl"),
    "toolchain version stable": ("rust", "version", "stable"),
    "unknown kind": ("rust", "kind", "toolchian"),
    "unknown key": ("mori", "comit", "x"),
}
for _name, (_pin, _key, _value) in SEMANTIC.items():
    CASES[f"pins: {_name}"] = Case(setup=_set(_pin, _key, _value))


def _pins_file_cases() -> None:
    def symlink_loop(root: Path, _: pytest.MonkeyPatch) -> None:
        (root / "loop.toml").symlink_to("loop.toml")

    def dangling(root: Path, _: pytest.MonkeyPatch) -> None:
        (root / "gone.toml").symlink_to("nowhere.toml")

    def fifo(root: Path, _: pytest.MonkeyPatch) -> None:
        os.mkfifo(root / "fifo.toml")

    def unreadable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # Tests run as root, where chmod 000 still reads: make this one path fail as it would.
        target = root / "secret.toml"
        shutil.copy(root / "pins.toml", target)
        real = pathlib.Path.read_bytes

        def read_bytes(self: Path) -> bytes:
            if self == target:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)

    nothing: Setup = lambda root, mp: None  # noqa: E731
    for name, setup, arg in [
        ("missing file", nothing, "absent.toml"),
        ("a directory", nothing, "stages"),
        ("an empty string", nothing, ""),
        ("a symlink loop", symlink_loop, "loop.toml"),
        ("a dangling symlink", dangling, "gone.toml"),
        ("a FIFO", fifo, "fifo.toml"),
        ("an unreadable file", unreadable, "secret.toml"),
        ("a file inside a file", nothing, "pins.toml/x.toml"),
    ]:
        CASES[f"--pins is {name}"] = Case(setup=setup, pins_arg=arg)
    # lock --only pins locks what a pins file has: an empty one has nothing to lock, which is fine.
    CASES["pins file: empty"] = Case(
        setup=_write("pins.toml", b""), verbs=tuple(v for v in ALL if v != "lock --check")
    )
    for name, data in [
        ("not UTF-8", b'[base]\nkind = "image"\nimage = "\xff\xfe"\n'),
        ("Latin-1 comment", b"# caf\xe9\n[base]\n"),
        ("bad TOML syntax", b"[base\nkind = image\n"),
        ("a top-level string", b'base = "image"\n'),
        ("an upper-case pin name", b'[Base]\nkind = "image"\n'),
        ("a pin name with a newline", b'["a\\nb"]\nkind = "image"\n'),
        ("binary junk", bytes(range(256))),
        ("a UTF-16 file", "[base]\n".encode("utf-16")),
    ]:
        CASES[f"pins file: {name}"] = Case(setup=_write("pins.toml", data))


_pins_file_cases()

STAGE_CASES: dict[str, Setup] = {
    "stage not UTF-8": _write("stages/06-aiter-jit.toml", b'title = "\xff"\n'),
    "stage bad TOML": _write("stages/06-aiter-jit.toml", b"title = \n"),
    "stage a directory": lambda root, _: (root / "stages" / "19-dir.toml").mkdir(),
    "stage env value newline": _set("env", "BUILD_UMBP", 'OFF"\nRUN touch /pwned', "stages/04-mori.toml"),
    "stage env value command substitution": _set(
        "env", "BUILD_UMBP", "$(touch /pwned)", "stages/04-mori.toml"
    ),
    "stage env name lower case": _set("env", "build_umbp", "OFF", "stages/04-mori.toml"),
    "stage env value a list": _set("env", "BUILD_UMBP", ["OFF"], "stages/04-mori.toml"),
    "stage title newline": _set("", "title", "x\nRUN touch /pwned", "stages/06-aiter-jit.toml"),
    "stage why NUL": _set("", "why", "x\x00", "stages/06-aiter-jit.toml"),
    "stage title an integer": _set("", "title", 6, "stages/06-aiter-jit.toml"),
    "stage commands a string": _set("", "commands", "rm -rf /", "stages/06-aiter-jit.toml"),
    "stage command with CR": _set("", "commands", ["rm -rf /x\rRUN touch /p"], "stages/06-aiter-jit.toml"),
    "stage command an integer": _set("", "commands", [1], "stages/06-aiter-jit.toml"),
    "stage WORKDIR relative": _set("", "path", "app", "stages/02-workdir.toml"),
    "stage WORKDIR with a space": _set("", "path", "/my app", "stages/02-workdir.toml"),
    "stage COPY src escapes the context": _set("", "src", "../secrets/", "stages/18-launcher.toml"),
    "stage COPY dest with ..": _set("", "dest", "/opt/../etc/", "stages/18-launcher.toml"),
    "stage unknown instruction": _set("", "instruction", "ADD", "stages/18-launcher.toml"),
    "stage into with a semicolon": _edit_toml(
        "stages/04-mori.toml",
        lambda d: next(c for c in d["commands"] if isinstance(c, dict) and "git" in c).__setitem__(
            "into", "/tmp/mori; touch /pwned"
        ),
    ),
    "stage into relative": _edit_toml(
        "stages/05-aiter.toml",
        lambda d: next(c for c in d["commands"] if isinstance(c, dict) and "fetch" in c).__setitem__(
            "into", "tmp/aiter"
        ),
    ),
    "stage pip env value quote": _edit_toml(
        "stages/07-vllm.toml",
        lambda d: next(c for c in d["commands"] if isinstance(c, dict) and "env" in c)["env"].__setitem__(
            "NVCC_THREADS", '8" touch "/pwned'
        ),
    ),
    "stage python_packages with a URL": _set(
        "", "python_packages", ["x @ https://example.org/x.whl"], "stages/04-mori.toml"
    ),
    "image.toml tunable with a space": _set("args", "MAX_JOBS", "1 2", "stages/image.toml"),
    "image.toml tunable with $(...)": _set("args", "MAX_JOBS", "$(nproc)", "stages/image.toml"),
    "image.toml tunable newline": _set("args", "MAX_JOBS", "32\nRUN touch /pwned", "stages/image.toml"),
    "image.toml tunable an integer": _set("args", "MAX_JOBS", 32, "stages/image.toml"),
    "image.toml donor stage name": _set("donor_stage", "name", "Proven K3", "stages/image.toml"),
    "image.toml entrypoint newline": _set("final_stage", "entrypoint", ["a\nb"], "stages/image.toml"),
    "image.toml not UTF-8": _write("stages/image.toml", b"\xc3\x28"),
    "arch value with a space": _set("", "gfx_arch", "gfx 942", "stages/arch/gfx942.toml"),
    "arch value newline": _set("", "rocm_arch", "gfx942\nRUN touch /pwned", "stages/arch/gfx942.toml"),
    "arch description ESC": _set("", "description", "\x1b]0;title\x07", "stages/arch/gfx942.toml"),
    "arch not UTF-8": _write("stages/arch/gfx942.toml", b"description = '\xff'\n"),
    "arch bad TOML": _write("stages/arch/gfx942.toml", b"= x\n"),
    "constraints not UTF-8": _write("constraints/build.txt", b"setuptools<80 # \xff\n"),
    "constraints a directory": lambda root, _: (root / "constraints" / "extra.txt").mkdir(),
    "constraints control character": _write("constraints/build.txt", b"setuptools<80\x00\n"),
    "constraints bad specifier": _write("constraints/build.txt", b"setuptools<<80\n"),
    "constraints missing": lambda root, _: shutil.rmtree(root / "constraints"),
}
for _name, _setup in STAGE_CASES.items():
    CASES[_name] = Case(setup=_setup)

# The python lock beside the pins file: read by lock and by plan --changed for a package.
PYLOCK_VERBS = ("lock --dry-run", "plan --changed")
for _name, _data in [
    ("not UTF-8", b"lock-version = '\xff'\n"),
    ("bad TOML", b"[[packages]\n"),
    ("wrong version", b'lock-version = "2.0"\n'),
]:
    CASES[f"pylock.toml {_name}"] = Case(
        setup=_write("pylock.toml", _data),
        verbs=PYLOCK_VERBS,
        extra={"plan --changed": ["--changed", "tqdm"]},
    )
CASES["pylock.toml a directory"] = Case(
    setup=lambda root, _: (root / "pylock.toml").mkdir(),
    verbs=PYLOCK_VERBS,
    extra={"plan --changed": ["--changed", "tqdm"]},
)

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
