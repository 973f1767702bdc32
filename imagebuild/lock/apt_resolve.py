"""Step 4's exact package set: what apt itself plans on the base, from the pinned snapshot only.

Resolved by apt, not re-implemented: a throw-away container of the base by its platform digest
(host network, so a loopback stand-in is reachable) gets the snapshot as its only source, with the
pin's key as ``signed-by``. ``apt-get update`` verifies the snapshot's signed InRelease as in the
build; ``apt-get -s install`` plans against the base's own dpkg status, so the plan holds exactly
what the build's step downloads (dependencies included, nothing the base already has); the .debs'
sha256 come from ``apt-cache show NAME=VERSION``, i.e. from the Packages index that InRelease
signs. A named package apt keeps as the base holds it is ``in_base`` (dpkg-query's version).

This module writes the script and reads its output (pure); apt_lock_file.py runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagebuild.inputs.apt_lock import AptArchitecture, AptPackage
from imagebuild.inputs.debian import DEB_ARCH, DEB_PACKAGE, DEB_VERSION, INST_TO_REQUIREMENT, SNAPSHOT_LIST
from imagebuild.inputs.values import SHA256, shell_word
from imagebuild.pins import AptPin

MARK = "@@imagebuild-apt "  # section markers in the container's output
_INST = re.compile(r"^Inst (\S+) (?:\[[^]]*\] )?\((\S+) ")
_UNLOCATABLE = (
    re.compile(r"^E: Unable to locate package (\S+)"),
    re.compile(r"^E: Package '?([^' ]+)'? has no installation candidate"),
    re.compile(r"^E: Version '[^']*' for '([^']+)' was not found"),
)


class AptResolveError(Exception):
    """What apt said, as the cause and what to do (the caller names the pin and the files)."""

    def __init__(self, cause: str, hint: str) -> None:
        super().__init__(f"{cause}; {hint}")
        self.cause = cause
        self.hint = hint


@dataclass(frozen=True, kw_only=True)
class AptResolveRequest:
    pin: AptPin
    snapshot: str
    image: str  # the base by its platform digest: REPOSITORY@sha256:...
    base: str  # that platform digest, recorded in the lock
    requested: tuple[str, ...]  # the step's apt_packages


def resolve_script(request: AptResolveRequest) -> str:
    """The sh script the container runs: every section after its marker, every failure reported."""
    pin = request.pin
    source = (
        f"deb [signed-by={pin.signed_by} check-valid-until=no] {pin.snapshot_url(request.snapshot)} "
        f"{pin.suite} {pin.components_text}"
    )
    names = " ".join(shell_word(n) for n in request.requested)
    return "\n".join(
        [
            "exec 2>&1",
            "mkdir -p /tmp/imagebuild-aside",
            "if [ -e /etc/apt/sources.list ]; then mv /etc/apt/sources.list /tmp/imagebuild-aside/; fi",
            "find /etc/apt/sources.list.d -mindepth 1 -maxdepth 1 -exec mv -t /tmp/imagebuild-aside/ {} +",
            f"echo {shell_word(source)} > {SNAPSHOT_LIST}",
            f"echo '{MARK}update'",
            f"apt-get update || {{ echo '{MARK}failed update'; exit 0; }}",
            f"echo '{MARK}arch'",
            "dpkg --print-architecture",
            f"apt-get -s install -y --no-install-recommends {names} > /tmp/imagebuild-plan "
            f"|| {{ echo '{MARK}failed plan'; cat /tmp/imagebuild-plan; exit 0; }}",
            f"echo '{MARK}plan'",
            "cat /tmp/imagebuild-plan",
            f"echo '{MARK}base'",
            f"dpkg-query -W -f='${{Package}}=${{Version}} ${{db:Status-Abbrev}}\\n' {names} 2>/dev/null || true",
            f"echo '{MARK}show'",
            f"sed -n '{INST_TO_REQUIREMENT}' /tmp/imagebuild-plan | xargs -r apt-cache show",
            f"echo '{MARK}end'",
        ]
    )


def _sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in output.splitlines():
        if line.startswith(MARK):
            current = line.removeprefix(MARK).strip()
            sections[current] = []
        else:
            sections[current].append(line)
    return sections


def parse_resolution(output: str, request: AptResolveRequest) -> AptArchitecture:
    """The lock entry the container's output gives, or AptResolveError saying what apt refused."""
    sections = _sections(output)
    if "failed update" in sections:
        raise _update_failure(sections.get("update", []), request)
    if "failed plan" in sections:
        raise _plan_failure(sections["failed plan"], request)
    if "end" not in sections:
        tail = " / ".join(output.strip().splitlines()[-3:]) or "no output"
        msg = f"the resolution in the base stopped early ({tail})"
        raise AptResolveError(msg, "check the base image")
    (architecture, *_) = [*sections["arch"], ""]
    DEB_ARCH.check(architecture.strip(), "the base's dpkg --print-architecture", "architecture")
    planned = parse_plan(sections["plan"])
    hashes = parse_show(sections["show"])
    packages = []
    for name, version in planned:
        sha256 = hashes.get((name, version))
        if sha256 is None:
            msg = f"the snapshot's index gives no SHA256 for {name}={version}"
            raise AptResolveError(
                msg,
                "this is no complete apt archive",
            )
        packages.append(AptPackage(name=name, version=version, sha256=sha256))
    held = parse_base(sections["base"])
    installing = {name for name, _ in planned}
    for name in request.requested:
        if name in installing:
            continue
        if name not in held:
            msg = f"apt plans no install of {name} and the base does not hold it"
            raise AptResolveError(msg, "check the name")
        packages.append(AptPackage(name=name, version=held[name], sha256="", in_base=True))
    return AptArchitecture(
        architecture=architecture.strip(),
        base=request.base,
        requested=request.requested,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
    )


def parse_plan(lines: list[str]) -> list[tuple[str, str]]:
    """apt-get -s's Inst lines as (name, version), each checked by Debian's grammar."""
    planned = []
    for line in lines:
        if (m := _INST.match(line)) is not None:
            name, version = m.group(1).split(":")[0], m.group(2)
            DEB_PACKAGE.check(name, "apt-get -s install", "name")
            DEB_VERSION.check(version, "apt-get -s install", "version")
            planned.append((name, version))
    return planned


def parse_show(lines: list[str]) -> dict[tuple[str, str], str]:
    """apt-cache show's stanzas: (Package, Version) -> SHA256."""
    found: dict[tuple[str, str], str] = {}
    fields: dict[str, str] = {}
    for line in [*lines, ""]:
        if not line.strip():
            if {"Package", "Version", "SHA256"} <= fields.keys():
                SHA256.check(fields["SHA256"], "apt-cache show", "SHA256")
                found[(fields["Package"], fields["Version"])] = fields["SHA256"]
            fields = {}
        elif not line[0].isspace() and ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return found


def parse_base(lines: list[str]) -> dict[str, str]:
    """dpkg-query's NAME=VERSION STATUS lines: the packages the base has installed ("ii")."""
    held = {}
    for line in lines:
        requirement, _, status = line.partition(" ")
        name, _, version = requirement.partition("=")
        if status.startswith("ii") and version:
            held[name] = version
    return held


def _update_failure(lines: list[str], request: AptResolveRequest) -> AptResolveError:
    text = "\n".join(lines)
    url = request.pin.snapshot_url(request.snapshot)
    if "NO_PUBKEY" in text or "is not signed" in text or "signature" in text.lower():
        return AptResolveError(
            f"apt could not verify the signature of {url}dists/{request.pin.suite}/InRelease with "
            f"{request.pin.signed_by}",
            "`signed_by` must be the path of the archive's key in the base image",
        )
    if "404" in text or "does not have a Release file" in text:
        return AptResolveError(
            f"the snapshot service has no {request.snapshot} of {request.pin.suite} ({url}): "
            "not published, or older than the service keeps",
            f"move the pin to the newest snapshot with `imagebuild lock -P {request.pin.name}`",
        )
    errors = [line for line in lines if line.startswith(("E:", "Err:"))] or lines[-1:]
    return AptResolveError(
        f"apt-get update from {url} failed: {' '.join(errors).strip()}", "check the archive"
    )


def _plan_failure(lines: list[str], request: AptResolveRequest) -> AptResolveError:
    for line in lines:
        for pattern in _UNLOCATABLE:
            if (m := pattern.match(line)) is not None:
                return AptResolveError(
                    f"snapshot {request.snapshot} of {request.pin.suite} has no package {m.group(1)}",
                    "drop it from apt_packages or choose a snapshot that has it",
                )
    errors = [line for line in lines if line.startswith("E:")] or lines[-2:]
    return AptResolveError(
        f"apt cannot install the step's packages from snapshot {request.snapshot}: {' '.join(errors).strip()}",
        "fix apt_packages in the stage",
    )
