"""Every pip invocation the renderer emits is covered by the constraint mechanism that fits it."""

from __future__ import annotations

import re

from imagebuild.render import CONSTRAINT_FILE, SETUPTOOLS_GUARD, ConstraintMode
from tests.unit.render_support import rendered

PIP_RE = re.compile(r"python3 -m pip (\w+)")


def run_commands(text: str) -> list[str]:
    """Each &&-chained command of every RUN instruction."""
    commands: list[str] = []
    for block in re.findall(r"^RUN (.*?)(?:\n(?! && )|\Z)", text, re.MULTILINE | re.DOTALL):
        commands += [c.strip() for c in block.split(" \\\n && ")]
    return commands


def test_every_pip_call_is_constrained() -> None:
    text = rendered().text
    assert f'ENV PIP_CONSTRAINT="{CONSTRAINT_FILE}"' in text
    assert f'UV_BUILD_CONSTRAINT="{CONSTRAINT_FILE}"' in text
    commands = run_commands(text)
    pip_calls = [(i, c) for i, c in enumerate(commands) if PIP_RE.search(c)]
    assert len(pip_calls) >= 10
    for i, command in pip_calls:
        sub = PIP_RE.search(command)[1]  # type: ignore[index]
        if "--no-build-isolation" in command:
            # The image's own toolchain builds: PIP_BUILD_CONSTRAINT would make pip >= 25.3 refuse,
            # so it is unset, and the guard checked setuptools first.
            assert "env -u PIP_BUILD_CONSTRAINT" in command, command
            assert commands[i - 1] == SETUPTOOLS_GUARD, command
        elif sub in ("install", "download", "wheel"):
            assert command.startswith(f"PIP_BUILD_CONSTRAINT={CONSTRAINT_FILE} "), command
        else:
            assert sub == "uninstall", command


def test_no_isolation_build_is_the_vllm_step() -> None:
    commands = [c for c in run_commands(rendered().text) if "--no-build-isolation" in c]
    assert len(commands) == 1
    assert 'MAX_JOBS="${MAX_JOBS}" NVCC_THREADS="${NVCC_THREADS}"' in commands[0]


def test_constraint_mode_off_removes_the_whole_mechanism() -> None:
    text = rendered(constraint_mode=ConstraintMode.OFF).text
    assert "PIP_BUILD_CONSTRAINT=" not in text
    assert "PIP_CONSTRAINT=" not in text
    assert SETUPTOOLS_GUARD not in text
