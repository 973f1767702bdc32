"""pytest wiring of the image checks: the container's facts, and one result record per check.

The runner starts pytest with ``--hosts=docker://<container>``; the facts of the
container are gathered once per session (one exec of probe.py) so all checks
together stay within seconds.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import testinfra

from imagebuild import secrets
from imagebuild.verify.checks import probe
from imagebuild.verify.checks.support import (
    COLLECTED_ENV,
    CUSTOM_MODULE,
    RESULTS_ENV,
    CheckFailure,
    expectations,
    probe_request,
    project_checks,
)

_RESULTS: list[dict[str, Any]] = []


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    # With no checks.toml entries its empty parameter sets would each report a skipped 'custom' check.
    return True if collection_path.name == CUSTOM_MODULE and project_checks().empty else None


@pytest.fixture(scope="session")
def host(request: pytest.FixtureRequest) -> Any:
    """The container, through testinfra (one host; the name shadows testinfra's parametrized fixture
    so check names do not carry the container id)."""
    hosts = request.config.getoption("hosts")
    if not hosts:
        pytest.fail("no --hosts given: run the checks through `imagebuild verify`")
    return testinfra.get_host(hosts if isinstance(hosts, str) else hosts[0])


@pytest.fixture(scope="session")
def facts(host: Any) -> dict[str, Any]:
    """Everything the file-system checks look at, from one run of probe.py in the container."""
    request = json.dumps(probe_request(expectations()))
    source = Path(probe.__file__).read_text(encoding="utf-8")
    detector = Path(secrets.__file__).read_text(encoding="utf-8")
    done = host.run(f"python3 -c {shlex.quote(source)} {shlex.quote(request)} {shlex.quote(detector)}")
    if done.rc != 0:
        pytest.fail(
            f"the fact probe failed in the container (exit {done.rc}); does the image have python3?\n"
            f"{done.stderr[-2000:]}"
        )
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _message(call: pytest.CallInfo[None]) -> str:
    if call.excinfo is None:
        return ""
    exc = call.excinfo.value
    if isinstance(exc, CheckFailure):
        return str(exc)
    if isinstance(exc, pytest.skip.Exception):
        return str(exc.msg)
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg)
    return f"{call.excinfo.typename}: {str(exc).strip()[:2000]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    # One record per check: its call, or the setup that kept it from running.
    if report.when == "call" or (report.when == "setup" and not report.passed):
        status: str = "error" if report.when == "setup" and report.failed else report.outcome
        group = _group(item)
        _RESULTS.append(
            {
                "name": item.name,
                "group": group,
                "outcome": status,
                "message": _message(call),
                "duration_s": report.duration,
            }
        )


def _group(item: pytest.Item) -> str:
    return Path(str(item.path)).stem.removeprefix("test_")


def pytest_collection_finish(session: pytest.Session) -> None:
    path = os.environ.get(COLLECTED_ENV)
    if path:  # verify --list: what would run, in order
        items = [{"name": i.name, "group": _group(i), "file": str(i.path)} for i in session.items]
        Path(path).write_text(json.dumps(items), encoding="utf-8")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        Path(path).write_text(json.dumps({"finished": time.time(), "results": _RESULTS}), encoding="utf-8")
