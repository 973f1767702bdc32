"""One pytest session over the check modules (checks/), in a subprocess, with the context they read.

pytest runs in a subprocess, not in-process: the checks get a clean pytest (their own ini, only the
testinfra plugin) whatever pytest configuration or session the caller is in; ``imagebuild verify`` is
itself run from pytest in this project's tests, and a nested in-process pytest.main would share its
plugins, warning filters and imported modules. Both the run and ``verify --list`` (a collection, no
container) go through here.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.util.run import Completed, run_command
from imagebuild.verify import checks
from imagebuild.verify.checks.support import COLLECTED_ENV, CONTEXT_ENV, RESULTS_ENV

PYTEST_TIMEOUT_S = 300
CHECKS_DIR = Path(checks.__file__).resolve().parent
# The checks' own pytest configuration: nothing from the caller's pyproject or plugins.
PYTEST_INI = """\
[pytest]
python_files = test_*.py
addopts = -p no:cacheprovider
junit_family = xunit2
junit_suite_name = imagebuild-verify
junit_logging = no
"""
# pytest's exit codes that mean the session ran (0 all passed, 1 some failed, 5 none selected).
RAN = (0, 1, 5)


@dataclass(frozen=True)
class Session:
    done: Completed
    results: Path  # where the conftest wrote one record per check (absent when nothing ran)
    collected: Path  # with ``collected``: the items the session collected (name, group, file)
    command: tuple[str, ...]
    junit: Path  # with ``junit``: pytest's JUnit XML, in the session's own directory


@contextmanager
def check_session(
    context: Mapping[str, Any],
    args: list[str],
    *,
    keyword: str | None = None,
    collected: bool = False,
    junit: bool = False,
) -> Iterator[Session]:
    """Run pytest over the checks with ``context`` (expectations, image, checks file) and ``args``; the
    session's files live until the ``with`` ends. The JUnit XML is written there, not where the user
    asked: the caller completes it and writes it whole, so a full disk never leaves half of one."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-verify-") as tmp:
        work = Path(tmp)
        if junit:
            args = [*args, f"--junitxml={work / 'junit.xml'}"]
        (work / "context.json").write_text(json.dumps(context), encoding="utf-8")
        (work / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")
        command = [
            sys.executable, "-m", "pytest", str(CHECKS_DIR),
            "-c", str(work / "pytest.ini"), "--rootdir", str(work),
            "-p", "testinfra.plugin", "-q", "--no-header", *args,
        ]  # fmt: skip
        if keyword is not None:
            command += ["-k", keyword]
        env = {
            **os.environ,
            CONTEXT_ENV: str(work / "context.json"),
            RESULTS_ENV: str(work / "results.json"),
            **({COLLECTED_ENV: str(work / "collected.json")} if collected else {}),
            # Only the plugins named above: a caller's plugins must not change how the checks run.
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            # The checks may live in a read-only site-packages.
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        done = run_command(command, env=env, timeout=PYTEST_TIMEOUT_S, check=False)
        yield Session(
            done=done,
            results=work / "results.json",
            collected=work / "collected.json",
            command=tuple(command),
            junit=work / "junit.xml",
        )
