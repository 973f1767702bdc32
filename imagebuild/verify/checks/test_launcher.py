"""The bundled serve launcher plans the same K3 argv as the launcher in this checkout."""

from __future__ import annotations

import difflib
from typing import Any

import pytest

from imagebuild.inputs.layout import LAUNCHER
from imagebuild.verify.checks.support import expect, expectations
from imagebuild.verify.launcher_cases import LauncherCase

EXP = expectations()


def test_launcher_present(facts: dict[str, Any]) -> None:
    expect(facts["launcher"]["exists"], "serve launcher", expected=LAUNCHER, found="missing")


@pytest.mark.parametrize("case", EXP.launcher_cases, ids=lambda c: c.name)
def test_dry_run_argv(facts: dict[str, Any], case: LauncherCase) -> None:
    run = next(r for r in facts["launcher"]["runs"] if r["name"] == case.name)
    env = " ".join(f"{k}={v}" for k, v in case.env.items())
    expect(
        run["rc"] == 0 and run["argv"] is not None,
        f"{env} {LAUNCHER} --dry-run --json",
        expected="exit 0 with a JSON plan",
        found=f"exit {run['rc']}: {run['stderr'].strip()[-500:]}",
    )
    found = tuple(run["argv"])
    diff = [d for d in difflib.ndiff(case.argv, found) if d[:1] in "+-"]
    expect(
        found == case.argv,
        f"{case.name} argv of the image's launcher vs this checkout's (imagebuild/launcher)",
        expected=" ".join(case.argv),
        found=f"{' '.join(found)}\ndiff (- checkout, + image): {' '.join(diff)}",
    )
