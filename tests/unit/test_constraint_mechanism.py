"""Every pip call the renderer emits: hash-locked or a source tree, resolving nothing, constrained as it needs."""

from __future__ import annotations

import re
import shlex

from imagebuild.inputs.python_lock import require_python_lock
from imagebuild.project import find_project
from imagebuild.render import (
    BUILD_CONSTRAINT_FILE,
    CONSTRAINT_FILE,
    SETUPTOOLS_GUARD,
    ConstraintMode,
    build_constraint_text,
)
from tests import REPO
from tests.unit.render_support import rendered

PIP_RE = re.compile(r"python3 -m pip (\w+)")
# A requirement line fed to `pip install --require-hashes -r /dev/stdin`, one double-quoted shell
# word (imagebuild.inputs.values.shell_word): a locked package, or a pinned wheel file with the ARG holding
# its sha256.
LOCKED_LINE_RE = re.compile(
    r'^"(?P<name>[a-z0-9-]+)==(?P<version>[^"\\$` ]+) --hash=sha256:(?P<sha>[0-9a-f]{64})"$'
)
WHEEL_LINE_RE = re.compile(
    r'^"/[^" ]+\.whl --hash=sha256:\$\{[A-Z_]+_SHA256\}"$|^"/tmp/[a-z]+/\$\{[A-Z_]+_FILE\} --hash=sha256:\$\{[A-Z_]+_SHA256\}"$'
)
HASH_LOCKED_TAIL = "--no-deps --only-binary=:all: --require-hashes -r /dev/stdin"


def run_commands(text: str) -> list[str]:
    """Each &&-chained command of every RUN instruction."""
    commands: list[str] = []
    for block in re.findall(r"^RUN (.*?)(?:\n(?! && | {4})|\Z)", text, re.MULTILINE | re.DOTALL):
        commands += [c.strip() for c in block.split(" \\\n && ")]
    return commands


def fed_lines(command: str) -> list[str]:
    """The requirement lines a `printf '%s\\n' LINE ... | pip ... -r /dev/stdin` command feeds pip."""
    head, _, _ = command.partition("\n    | ")
    return [line.strip().removesuffix("\\").strip() for line in head.splitlines()[1:]]


def test_every_pip_install_is_hash_locked_or_a_source_tree() -> None:
    lock = require_python_lock(REPO / "pylock.toml")
    locked = {p.name: p for p in lock.packages}
    commands = run_commands(rendered().text)
    pip_calls = [(i, c) for i, c in enumerate(commands) if PIP_RE.search(c)]
    assert len(pip_calls) >= 8
    hash_locked, source_trees, installed = 0, 0, set()
    for i, command in pip_calls:
        sub = PIP_RE.search(command)[1]  # type: ignore[index]
        if sub == "uninstall":
            continue
        assert sub == "install", command
        if "--require-hashes" in command:
            # Every line names one exact version and its sha256 (from the lock), or a pinned wheel.
            assert command.startswith("printf '%s\\n' \\\n"), command
            assert command.endswith(HASH_LOCKED_TAIL), command
            lines = fed_lines(command)
            assert lines, command
            for line in lines:
                match = LOCKED_LINE_RE.match(line)
                if match is None:
                    assert WHEEL_LINE_RE.match(line), line
                    continue
                package = locked[match["name"]]
                assert (match["version"], match["sha"]) == (package.version, package.sha256), line
                installed.add(match["name"])
            hash_locked += 1
            continue
        # A source tree: no hash pip could check, so nothing resolved and local paths only.
        words = shlex.split(command.split("python3 -m pip ", 1)[1])
        assert "--no-deps" in words, command
        targets = [w for w in words[1:] if not w.startswith("-")]
        assert targets, command
        assert all(t.startswith(("/", ".")) and not t.endswith((".whl", ".tar.gz")) for t in targets), command
        if "--no-build-isolation" in command:
            assert "env -u PIP_BUILD_CONSTRAINT" in command, command
            guard = commands[i - 1]
            assert guard.startswith(f'{SETUPTOOLS_GUARD} "setuptools=='), guard
            assert all(LOCKED_LINE_RE.match(arg) for arg in re.findall(r'"[^"]+"', guard)), guard
        else:
            # Isolated: the build dependencies pip installs come at the build constraint's exact versions.
            build = f"PIP_CONSTRAINT={BUILD_CONSTRAINT_FILE} PIP_BUILD_CONSTRAINT={BUILD_CONSTRAINT_FILE} "
            assert command.startswith(build), command
        source_trees += 1
    assert hash_locked >= 3  # step 4's tools, the AITER wheel, flydsl
    assert source_trees == 3  # the constraint probe, MoRI, vLLM
    # Every package a step declares is installed from the lock (the build group goes to the constraint).
    steps = {p.name for p in lock.packages if set(p.groups) - {"build", "guard"}}
    assert installed == steps


def test_the_build_constraint_pins_every_locked_build_dependency_exactly() -> None:
    inputs = find_project(REPO).load("gfx942")
    lock = require_python_lock(REPO / "pylock.toml")
    text = build_constraint_text(inputs.constraints, lock)
    assert "setuptools<80" in text
    for package in lock.group("build"):
        assert f"\n{package.name}=={package.version}\n" in text
    assert "--hash" not in text  # a constraint cannot carry one


def test_no_isolation_build_is_the_vllm_step() -> None:
    commands = [c for c in run_commands(rendered().text) if "--no-build-isolation" in c]
    assert len(commands) == 1
    assert 'MAX_JOBS="${MAX_JOBS}" NVCC_THREADS="${NVCC_THREADS}"' in commands[0]


def test_the_guard_installs_only_the_locked_setuptools_and_records_it() -> None:
    lock = require_python_lock(REPO / "pylock.toml")
    setuptools = next(p for p in lock.group("guard") if p.name == "setuptools")
    guards = [c for c in run_commands(rendered().text) if c.startswith(SETUPTOOLS_GUARD)]
    assert guards == [f'{SETUPTOOLS_GUARD} "{setuptools.requirement}" >> /app/versions.txt']


def test_constraint_mode_off_removes_the_whole_mechanism_but_not_the_hashes() -> None:
    text = rendered(constraint_mode=ConstraintMode.OFF).text
    assert "PIP_BUILD_CONSTRAINT=" not in text
    assert "PIP_CONSTRAINT=" not in text
    assert SETUPTOOLS_GUARD not in text
    assert f'"{CONSTRAINT_FILE}"' not in text
    assert "--require-hashes" in text
