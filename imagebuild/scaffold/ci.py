"""``imagebuild init --ci SYSTEM``: the CI file that locks, builds, verifies and publishes a project's image.

The templates are package data (``ci/SYSTEM.yml``), plain files so the linters read what is shipped.
Each runs the same shell commands in the same order (lock --check, load the cached base image, build,
save the base image, verify --junit, publish on the default branch), configured by environment
variables only: tests/unit/test_ci_templates.py and tests/integration/test_ci_workflow.py read them.
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.errors import ConfigError

TEMPLATES = Path(__file__).resolve().parent / "ci"
# Where each CI system reads its configuration, relative to the repository's root.
CI_FILES = {"github": ".github/workflows/image.yml", "gitlab": ".gitlab-ci.yml"}


def ci_systems() -> tuple[str, ...]:
    return tuple(CI_FILES)


def ci_system(text: str) -> str:
    """``--ci``'s value, or the one-line reason it is not one."""
    if text not in CI_FILES:
        msg = f"{text}: not a CI system imagebuild has a template for (known: {', '.join(CI_FILES)})"
        raise ConfigError(msg)
    return text


def ci_file(system: str) -> tuple[str, bytes]:
    """The CI file for ``system``: its path in the project and its bytes."""
    return CI_FILES[ci_system(system)], (TEMPLATES / f"{system}.yml").read_bytes()
