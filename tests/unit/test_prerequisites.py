"""A missing prerequisite skips on a developer's machine and fails in CI; every such skip goes through
tests.prerequisites.skip_or_fail, so no docker-tier test can skip quietly in a CI run."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sampleworld.engine_matrix import ENGINE_NAMES
from tests import REPO
from tests.prerequisites import skip_or_fail

REASON = "no Docker engine answers (connection refused); start one with `bash scripts/ensure-docker.sh`"


@pytest.mark.parametrize("value", ["true", "True", "1"])
def test_in_ci_a_missing_prerequisite_fails_with_its_reason(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception) as failed:
        skip_or_fail(REASON)
    assert str(failed.value).startswith(REASON)
    assert "CI=true" in str(failed.value)


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_outside_ci_it_skips_with_its_reason(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception) as skipped:
        skip_or_fail(REASON)
    assert str(skipped.value) == REASON


def _skips(tree: ast.AST) -> list[int]:
    """Lines that call pytest.skip(...) or use pytest.mark.skipif in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("skip", "skipif"):
            owner = node.value
            named = isinstance(owner, ast.Name) and owner.id == "pytest" and node.attr == "skip"
            marked = isinstance(owner, ast.Attribute) and owner.attr == "mark" and node.attr == "skipif"
            if named or marked:
                found.append(node.lineno)
    return found


def test_no_docker_tier_or_fixture_skips_around_the_helper() -> None:
    """Only the helper skips in the docker tier (integration, verify) and in the fixtures of every tier."""
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        relative = path.relative_to(REPO)
        docker_tier = relative.parts[1] in ("integration", "verify") or path.name == "conftest.py"
        if docker_tier and path.name != "prerequisites.py":
            offenders += [f"{relative}:{line}" for line in _skips(ast.parse(path.read_text(encoding="utf-8")))]
    for path in sorted((REPO / "sampleworld").rglob("*.py")):
        offenders += [f"{path.relative_to(REPO)}:{line}" for line in _skips(ast.parse(path.read_text(encoding="utf-8")))]
    assert offenders == [], "use tests.prerequisites.skip_or_fail: " + ", ".join(offenders)


@pytest.mark.parametrize("ci", ["", "true"])
def test_docker_tests_without_an_engine_skip_or_fail_before_their_fixtures(tmp_path: Path, ci: str) -> None:
    """Plain pytest on a machine without an engine: every docker test skips with one reason (and no
    fixture's own error, or the half-open client a failed docker-py check leaves); in CI they fail."""
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "CI": ci}
    env.pop("DOCKER_CONTEXT", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
         "tests/verify/test_verify_docker.py::test_good_image_passes_within_budget",
         "tests/integration/test_engine_matrix_live.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    output = done.stdout + done.stderr
    tests = 1 + len(ENGINE_NAMES)  # the verify test, and the live check of each engine of the matrix
    assert "needs the Docker engine: no Docker socket at" in output, output
    assert "Traceback" not in output, output
    assert "ResourceWarning" not in output, output
    if ci:
        assert done.returncode == 1, output
        assert f"{tests} errors" in output, output  # at setup, each with the reason
        assert "CI=true" in output, output
    else:
        assert done.returncode == 0, output
        assert f"{tests} skipped" in output, output
