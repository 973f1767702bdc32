"""The bad inputs of test_error_matrix.py: the verbs as the matrix runs them, and every case that breaks
the project's inputs (each pin's string fields, the pins file itself, stage, arch, constraint and
python-lock files). test_error_matrix.py adds each verb's bad arguments and the engine's address."""

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
