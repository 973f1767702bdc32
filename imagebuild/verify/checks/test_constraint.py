"""The build-toolchain constraint: the file in the image, and the build-time proof that it held."""

from __future__ import annotations

from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from imagebuild.verify.checks.support import expect, expectations
from imagebuild.verify.expectations import parse_versions

EXP = expectations()


def test_constraint_file(facts: dict[str, Any]) -> None:
    found = facts["constraints"]
    expect(
        found == EXP.constraints,
        f"{EXP.constraints_file} must equal constraints/*.txt",
        expected=EXP.constraints.strip().replace("\n", " | "),
        found="no such file" if found is None else found.strip().replace("\n", " | "),
    )


def test_build_setuptools_satisfies(facts: dict[str, Any]) -> None:
    lines = [rest for key, rest, _ in parse_versions(facts["versions"] or "") if key == EXP.setuptools_key]
    spec = EXP.setuptools_specifier
    expect(
        len(lines) == 1,
        f"{EXP.versions_file}: one {EXP.setuptools_key} line (the isolated-build constraint proof)",
        expected=f"{EXP.setuptools_key}=<version> satisfying setuptools{spec}",
        found=" | ".join(lines) or "no such line",
    )
    word = lines[0].split()[0] if lines[0].split() else ""
    try:
        ok = SpecifierSet(spec).contains(Version(word), prereleases=True)
    except InvalidVersion:
        ok = False
    expect(
        ok,
        "setuptools used by the isolated build must satisfy the constraint",
        expected=f"setuptools{spec}",
        found=f"setuptools {word} ({lines[0]})",
    )


def test_final_setuptools_satisfies(facts: dict[str, Any]) -> None:
    """The setuptools left in the image: a later no-isolation build (or a user's) imports it."""
    found = facts["setuptools"]
    spec = EXP.setuptools_specifier
    if not found or not spec:
        pytest.skip(
            "no setuptools on python3's path" if not found else "constraints/ do not bound setuptools"
        )
    first = found[0]  # the one `import setuptools` loads
    try:
        ok = SpecifierSet(spec).contains(Version(first["version"]), prereleases=True)
    except InvalidVersion:
        ok = False
    expect(
        ok,
        "the image's setuptools must satisfy the build-toolchain constraint",
        expected=f"setuptools{spec}",
        found=f"setuptools {first['version']} ({first['path']})"
        + (f"; also on the path: {', '.join(d['path'] for d in found[1:])}" if found[1:] else ""),
    )
