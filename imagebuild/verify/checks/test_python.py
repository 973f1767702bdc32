"""The base's python: the version pinned, and the grafted packages found in its site-packages."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.verify.checks.support import expect, expectations
from imagebuild.verify.image_facts import GRAFT_PACKAGES

EXP = expectations()


def test_python_version(facts: dict[str, Any]) -> None:
    py = facts["python"]
    words = py["python3_version"].split()
    found = ".".join(words[-1].split(".")[:2]) if words else ""
    expect(
        found == EXP.python.version,
        f"python3 --version (pin [base] python of {EXP.pins_path})",
        expected=f"Python {EXP.python.version}.x",
        found=py["python3_version"] or "python3 --version printed nothing",
    )


def test_site_packages_on_path(facts: dict[str, Any]) -> None:
    py = facts["python"]
    expect(
        EXP.python.site_packages in py["sys_path"],
        "pin [base] site_packages on python3's sys.path (where the graft lands)",
        expected=EXP.python.site_packages,
        found=f"sys.path {py['sys_path']}, pip's purelib {py['purelib']}",
    )


@pytest.mark.parametrize("package", GRAFT_PACKAGES)
def test_resolves_to_site_packages(facts: dict[str, Any], package: str) -> None:
    found = facts["python"]["locations"][package]
    expected = f"{EXP.python.site_packages}/{package}"
    expect(
        found == expected,
        f"python3 finds {package} in the grafted tree (not a shadowing copy elsewhere on sys.path)",
        expected=expected,
        found=found or "not importable",
    )
