"""A module fixture's directory that goes when the module ends, unless one of its tests failed.

The docker tier's disk peak is the sum of what its modules leave behind: an export is 0.3 GB, a saved
image 1 GB, and pytest keeps a module's or session's tmp dirs to the end. A function's tmp_path goes when
its test passes (tmp_path_retention_policy in pyproject.toml); this does the same for a module's.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def module_scratch(request: pytest.FixtureRequest, factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A new tmp dir named ``name``; removed at the fixture's teardown when no test failed meanwhile."""
    failed_before = request.session.testsfailed
    path = factory.mktemp(name)
    yield path
    if request.session.testsfailed == failed_before:
        shutil.rmtree(path, ignore_errors=True)
