"""The build-toolchain constraint: the files in the image, and the build-time records that it held."""

from __future__ import annotations

from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from imagebuild.image_files.imagebuild_check import GUARD_KEY
from imagebuild.inputs.layout import BUILD_CONSTRAINT_FILE, CONSTRAINT_FILE, VERSIONS_FILE
from imagebuild.verify.checks.support import expect, expectations
from imagebuild.verify.expectations import parse_versions
from imagebuild.verify.image_facts import SETUPTOOLS_KEY

EXP = expectations()


def _one_line(text: str) -> str:
    """A constraint file's lines as one line of the report."""
    return text.strip().replace("\n", " | ")


def test_constraint_file(facts: dict[str, Any]) -> None:
    found = facts["constraints"]
    expect(
        found == EXP.constraint.constraints,
        f"{CONSTRAINT_FILE} must equal constraints/*.txt",
        expected=_one_line(EXP.constraint.constraints),
        found="no such file" if found is None else _one_line(found),
    )


def test_build_constraint_file(facts: dict[str, Any]) -> None:
    found = facts["build_constraints"]
    expect(
        found == EXP.constraint.build_constraints,
        f"{BUILD_CONSTRAINT_FILE} must be constraints/*.txt plus the build dependencies locked in pylock.toml",
        expected=_one_line(EXP.constraint.build_constraints),
        found="no such file" if found is None else _one_line(found),
    )


def test_guard_setuptools(facts: dict[str, Any]) -> None:
    """The no-isolation build's setuptools: the image's own if it satisfied the constraint, else the locked one."""
    lines = [rest for key, rest, _ in parse_versions(facts["versions"] or "") if key == GUARD_KEY]
    spec = EXP.constraint.setuptools_specifier
    expect(
        bool(lines),
        f"{VERSIONS_FILE}: a {GUARD_KEY} line (the setuptools guard before the no-isolation build)",
        expected=f"{GUARD_KEY}=<version> satisfying setuptools{spec}",
        found="no such line",
    )
    for line in lines:
        word = line.split()[0] if line.split() else ""
        try:
            ok = SpecifierSet(spec).contains(Version(word), prereleases=True)
        except InvalidVersion:
            ok = False
        expect(
            ok,
            "the setuptools the guard left must satisfy the constraint",
            expected=f"setuptools{spec}",
            found=line,
        )
        if "locked" in line:
            expect(
                word == EXP.constraint.guard_setuptools,
                "the guard installs exactly the setuptools pylock.toml locks (group guard)",
                expected=str(EXP.constraint.guard_setuptools),
                found=line,
            )
    last = lines[-1].split()[0]
    installed = facts["setuptools"]  # every setuptools on python3's path; the first imports
    expect(
        bool(installed) and installed[0]["version"] == last,
        f"the image's setuptools is the one the last {GUARD_KEY} line records",
        expected=last,
        found=f"setuptools {installed[0]['version']} ({installed[0]['path']})" if installed else "none",
    )


def test_build_setuptools_satisfies(facts: dict[str, Any]) -> None:
    lines = [rest for key, rest, _ in parse_versions(facts["versions"] or "") if key == SETUPTOOLS_KEY]
    spec = EXP.constraint.setuptools_specifier
    expect(
        len(lines) == 1,
        f"{VERSIONS_FILE}: one {SETUPTOOLS_KEY} line (the isolated-build constraint proof)",
        expected=f"{SETUPTOOLS_KEY}=<version> satisfying setuptools{spec}",
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
    spec = EXP.constraint.setuptools_specifier
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
