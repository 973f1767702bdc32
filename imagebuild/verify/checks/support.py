"""What the check modules share: the context file the runner wrote, what the probe is handed, how a check fails."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from imagebuild.inputs.layout import (
    APT_PACKAGES_FILE,
    BUILD_CONSTRAINT_FILE,
    CHECK_TOOL,
    CONSTRAINT_FILE,
    LAUNCHER,
    PYTHON_PACKAGES_FILE,
    ROUTER,
    SECRET_SCAN_MAX_FILE_BYTES,
    VERSIONS_FILE,
)
from imagebuild.verify.checks_file import EMPTY, ChecksFile
from imagebuild.verify.expectations import Expectations
from imagebuild.verify.image_facts import (
    ABSENT_PATHS,
    EMPTY_DIRS,
    GRAFT_DIRS,
    GRAFT_PACKAGES,
    REPINNED_PIN,
    TMP_LEFTOVERS,
    TUNED_CONFIG_ROOTS,
)

CONTEXT_ENV = "IMAGEBUILD_VERIFY_CONTEXT"
RESULTS_ENV = "IMAGEBUILD_VERIFY_RESULTS"
COLLECTED_ENV = "IMAGEBUILD_VERIFY_COLLECTED"  # verify --list: where the collected items are written
CUSTOM_MODULE = "test_custom.py"  # the project's own checks (checks.toml); not collected when there are none


class CheckFailure(AssertionError):
    """A failed check, with what it expected and what it found (both shown in the report)."""

    def __init__(self, what: str, *, expected: object, found: object) -> None:
        self.what = what
        self.expected = expected
        self.found = found
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.what}\nexpected: {self.expected}\nfound:    {self.found}"


def expect(ok: bool, what: str, *, expected: object, found: object) -> None:
    if not ok:
        raise CheckFailure(what, expected=expected, found=found)


@dataclass(frozen=True, kw_only=True)
class ImageConfig:
    """The image's config as the runner inspected it (host side, through the Engine)."""

    id: str
    labels: dict[str, str]
    env: dict[str, str]
    entrypoint: list[str] | None
    cmd: list[str] | None
    workdir: str
    user: str
    exposed_ports: list[str]
    history: list[str]


@cache
def _context() -> dict[str, Any]:
    path = os.environ.get(CONTEXT_ENV)
    if not path:
        msg = f"{CONTEXT_ENV} is not set: these checks run under `imagebuild verify`, not on their own"
        raise RuntimeError(msg)
    data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return data


def expectations() -> Expectations:
    return Expectations.from_json(_context()["expectations"])


def project_checks() -> ChecksFile:
    """The project's own checks the runner was given (none: an empty file)."""
    data = _context().get("checks")
    return ChecksFile.from_json(data) if data else EMPTY


def probe_request(exp: Expectations) -> dict[str, Any]:
    """The one JSON argument of probe.py, which runs in the image without imagebuild: the paths it
    looks at (read here from where they are defined) and what of the expectations it needs."""
    return {
        "versions_file": VERSIONS_FILE,
        "apt_packages_file": APT_PACKAGES_FILE,
        "python_packages_file": PYTHON_PACKAGES_FILE,
        "constraints_file": CONSTRAINT_FILE,
        "build_constraints_file": BUILD_CONSTRAINT_FILE,
        "empty_dirs": EMPTY_DIRS,
        "absent_paths": ABSENT_PATHS,
        "tmp_leftovers": TMP_LEFTOVERS,
        "site_packages": exp.python.site_packages,
        "graft_packages": GRAFT_PACKAGES,
        "graft_dirs": GRAFT_DIRS,
        "tuned_configs": exp.graft.tuned_configs,
        "tuned_config_roots": TUNED_CONFIG_ROOTS,
        "repinned_dist": REPINNED_PIN,
        "check_tool": CHECK_TOOL,
        "router": ROUTER,
        "layer_libraries": exp.layer_libraries,
        "launcher": LAUNCHER,
        "launcher_cases": [dataclasses.asdict(case) for case in exp.launcher_cases],
        "secret_scan_roots": exp.secret_scan_roots,
        "secret_scan_max_file_bytes": SECRET_SCAN_MAX_FILE_BYTES,
    }


def image_config() -> ImageConfig:
    return ImageConfig(**_context()["image"])


def redact(text: str, start: int, end: int) -> str:
    """A finding around text[start:end] that names the token's kind but never shows it whole."""
    token = text[start:end]
    before = text[max(0, start - 30) : start].replace("\n", " ")
    return f"...{before}{token[:4]}<redacted {len(token) - 4} chars>"
