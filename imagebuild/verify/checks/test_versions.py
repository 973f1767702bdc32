"""/app/versions.txt: one line per pin with its exact SHA or version, the graft and scrub lines."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.inputs.layout import APT_PACKAGES_FILE, PYTHON_PACKAGES_FILE, VERSIONS_FILE
from imagebuild.verify.checks.support import expect, expectations
from imagebuild.verify.expectations import VersionLine, parse_versions
from imagebuild.verify.image_facts import REPINNED_PIN

EXP = expectations()


def _versions(facts: dict[str, Any]) -> str:
    text = facts["versions"]
    expect(text is not None, f"{VERSIONS_FILE} must exist", expected="the file", found="no such file")
    return str(text)


@pytest.mark.parametrize("line", EXP.versions.lines, ids=lambda line: line.key)
def test_version_line(facts: dict[str, Any], line: VersionLine) -> None:
    found = [text for key, _, text in parse_versions(_versions(facts)) if key == line.key]
    origin = f"pin [{line.pin}] of {EXP.pins_path}" if line.pin else line.step
    expect(
        found == [line.text],
        f"{VERSIONS_FILE}: exactly one {line.key} line ({origin})",
        expected=line.text,
        found=" | ".join(found) or f"no {line.key} line",
    )


def test_no_forbidden_text(facts: dict[str, Any]) -> None:
    text = _versions(facts)
    bad = [line for line in text.splitlines() if any(f in line for f in EXP.versions.forbidden_text)]
    expect(
        not bad,
        f"{VERSIONS_FILE} records a layer that must not be built (WITH_NIXL=0)",
        expected=f"no line containing {' or '.join(EXP.versions.forbidden_text)}",
        found=" | ".join(bad),
    )


def test_os_packages_are_the_locked_versions(facts: dict[str, Any]) -> None:
    """Every package apt.lock.toml locks is installed at its locked version (dpkg's list, step 17)."""
    if not EXP.apt_packages:
        pytest.skip("no apt.lock.toml for this image's arch")
    text = facts["packages"]["apt"] or ""
    installed = {
        line.split("=", 1)[0].split(":", 1)[0] + "=" + line.split("=", 1)[-1] for line in text.splitlines()
    }
    missing = [p for p in EXP.apt_packages if p not in installed]
    expect(
        not missing,
        f"{APT_PACKAGES_FILE}: the OS packages at apt.lock.toml's versions",
        expected=" ".join(EXP.apt_packages),
        found="missing or at another version: " + " ".join(missing),
    )


@pytest.mark.parametrize("kind", ["apt", "python"])
def test_installed_packages_are_recorded(facts: dict[str, Any], kind: str) -> None:
    """Step 17 lists what apt and Python installed, so imagebuild diff shows drift the pins do not cover."""
    path = APT_PACKAGES_FILE if kind == "apt" else PYTHON_PACKAGES_FILE
    text = facts["packages"][kind]
    expect(
        bool(text and text.strip()),
        f"{path}: what {kind} installed, one name and version a line (step 17)",
        expected="a non-empty list",
        found="no such file" if text is None else "an empty file",
    )
    if kind == "python" and EXP.graft.repinned is not None:
        line = f"{REPINNED_PIN}=={EXP.python.repinned_version}"
        listed = str(text).splitlines()
        expect(
            line in listed,
            f"{path} records the re-pinned {REPINNED_PIN}",
            expected=line,
            found=" | ".join(x for x in listed if x.startswith(f"{REPINNED_PIN}==")) or "no such line",
        )
