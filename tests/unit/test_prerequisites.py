"""A missing prerequisite skips on a developer's machine and fails in CI; every such skip goes through
tests.prerequisites.skip_or_fail, so no docker-tier test can skip quietly in a CI run."""

from __future__ import annotations

import ast

import pytest

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
