"""The build-toolchain constraint: the file in the image, and the build-time proof that it held."""

from __future__ import annotations

from typing import Any

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
