"""The shell a CI template runs, read out of the file: its environment and its commands, in order.

GitHub Actions runs each ``run:`` of a job's steps with ``bash -e -o pipefail`` in the checkout, the
workflow's ``env:`` (then the job's, the step's) set; GitLab runs a job's ``script:`` lines in one
shell with its ``variables:``. A test runs what this returns as one bash script, so what it proves is
what the CI system would run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

EXPRESSION_RE = re.compile(r"\$\{\{.*?\}\}")  # a GitHub expression: the CI system's, not the shell's


@dataclass(frozen=True, kw_only=True)
class CiStep:
    name: str
    command: str  # the shell text, as the CI system hands it to bash
    condition: str = ""  # GitHub's ``if:`` / the GitLab job's rules, as written ('' runs always)


@dataclass(frozen=True, kw_only=True)
class CiScript:
    env: dict[str, str]
    steps: tuple[CiStep, ...]

    def bash(self, *, skip: frozenset[str] = frozenset()) -> str:
        """One bash script running every step but the ``skip``ped ones, each in a subshell as a CI step."""
        lines = ["set -euo pipefail"]
        for step in self.steps:
            if step.name in skip:
                lines.append(f"echo {shlex.quote('skipped: ' + step.name)}")
                continue
            lines.append(f"echo {shlex.quote('== ' + step.name)}")
            lines.append(f"(set -eo pipefail\n{step.command}\n)")
        return "\n".join(lines) + "\n"


def load_yaml(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def github_script(path: Path, job: str) -> CiScript:
    """The workflow's and ``job``'s env, and every ``run:`` step of ``job`` (``uses:`` steps are GitHub's)."""
    workflow = load_yaml(path)
    spec = workflow["jobs"][job]
    env = {**_strings(workflow.get("env")), **_strings(spec.get("env"))}
    steps = []
    for number, step in enumerate(spec["steps"], 1):
        if "run" in step:
            assert not step.get("env"), (
                f"{path}: step {number} has its own env; the test reads only the job's"
            )
            steps.append(
                CiStep(
                    name=str(step.get("name", number)),
                    command=str(step["run"]),
                    condition=str(step.get("if", "")),
                )
            )
    return CiScript(env=env, steps=tuple(steps))


def gitlab_script(path: Path) -> CiScript:
    """The file's variables, and every job's script lines in stage order, one step per line."""
    document = load_yaml(path)
    env = _strings(document.get("variables"))
    stages = document.get("stages", [])
    jobs = [(name, spec) for name, spec in document.items() if isinstance(spec, dict) and "script" in spec]
    jobs.sort(key=lambda job: stages.index(job[1].get("stage", "test")))
    steps = []
    for name, spec in jobs:
        condition = " || ".join(str(rule.get("if", "")) for rule in spec.get("rules", []))
        steps.extend(
            CiStep(name=f"{name}: {line}", command=str(line), condition=condition) for line in spec["script"]
        )
    return CiScript(env=env, steps=tuple(steps))


def _strings(mapping: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (mapping or {}).items()}
