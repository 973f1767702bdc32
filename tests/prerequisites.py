"""A missing prerequisite: a skip on a developer's machine, a failure in CI.

Outside CI a test whose prerequisite is missing (no Docker engine, no BuildKit, no Python 3.8, no
docker-registry) skips with the reason, so the rest of the suite still runs. In CI (``CI=true``,
as GitHub Actions, GitLab and most runners set it) a skip would turn a broken runner into a green
run, so the same reason fails the test instead. Every such skip goes through ``skip_or_fail``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

CI_ENV = "CI"
# The oldest Python the shipped importer runs on (pyenv's, as CI installs it).
PYTHON38 = Path.home() / ".pyenv/versions/3.8.18/bin/python3.8"


def in_ci() -> bool:
    """Whether this run is a CI run (CI=true or CI=1)."""
    return os.environ.get(CI_ENV, "").strip().lower() in ("true", "1", "yes")


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with ``reason``; in CI, fail with it: no prerequisite may go missing quietly there."""
    if in_ci():
        pytest.fail(f"{reason} ({CI_ENV}=true: a missing prerequisite fails the run instead of skipping)", pytrace=False)
    pytest.skip(reason)
