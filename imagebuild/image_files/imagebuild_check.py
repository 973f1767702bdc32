#!/usr/bin/env python3
"""Checks the build runs inside the image (installed as /opt/imagebuild/bin/imagebuild-check).

Standard library only, plus pip's vendored ``packaging``: it runs on the base
image's python before anything else is installed. Each check prints what it
expected and what it found, and exits 1 on failure so the RUN step fails there,
not hours later on a cluster. Nothing here imports the packages it checks: the
real AITER probes the GPU when imported, and build hosts have none, so packages
are checked by their metadata and the files their RECORD lists.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as md
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# imagebuild.layout's CONSTRAINT_FILE and BUILD_CONSTRAINT_FILE (this file cannot import imagebuild).
CONSTRAINT_FILE = Path(os.environ.get("IMAGEBUILD_CONSTRAINT_FILE", "/etc/pip-constraints.txt"))
BUILD_CONSTRAINT_FILE = Path(
    os.environ.get("IMAGEBUILD_BUILD_CONSTRAINT_FILE", "/etc/pip-build-constraints.txt")
)
# The versions.txt key of the guard's record (imagebuild.verify reads it).
GUARD_KEY = "GUARD_SETUPTOOLS"
HASH_OPTION = "--hash=sha256:"


class CheckFailed(Exception):
    pass


def _specifier_for(project: str, constraints: Path = CONSTRAINT_FILE) -> str | None:
    """The combined specifier a constraint file sets for ``project``, if any."""
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

    specs = []
    for line in constraints.read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            req = Requirement(text)
            if canonicalize_name(req.name) == canonicalize_name(project):
                specs.append(str(req.specifier))
    return ",".join(s for s in specs if s) or None


def _satisfies(version: str, specifier: str) -> bool:
    from pip._vendor.packaging.specifiers import SpecifierSet

    return SpecifierSet(specifier).contains(version, prereleases=True)


def _pip_version() -> str:
    return md.version("pip")


def constraint_proof(_: argparse.Namespace) -> str:
    """Read the setuptools version pip put into the probe's isolated build environment."""
    import imagebuild_constraint_probe as probe  # type: ignore[import-not-found]  # built just before

    built_with: str = probe.SETUPTOOLS_VERSION
    # Isolated builds get the build constraint: constraints/ plus the locked build dependencies' versions.
    spec = _specifier_for("setuptools", BUILD_CONSTRAINT_FILE)
    if spec is None:
        msg = f"{BUILD_CONSTRAINT_FILE} constrains no setuptools version; nothing to prove"
        raise CheckFailed(msg)
    if not _satisfies(built_with, spec):
        msg = (
            f"build-toolchain constraint did not hold: pip {_pip_version()} put setuptools {built_with} "
            f"into an isolated build environment, but {BUILD_CONSTRAINT_FILE} says setuptools{spec}. "
            "Isolated builds need PIP_BUILD_CONSTRAINT (pip >= 25.3) or PIP_CONSTRAINT (pip < 26.2)"
        )
        raise CheckFailed(msg)
    return (
        f"BUILD_SETUPTOOLS={built_with} (isolated build, pip {_pip_version()}, constraint setuptools{spec})"
    )


def _installed(dist: str) -> str | None:
    # In a fresh interpreter: this one's metadata cache predates a pip install it ran.
    done = subprocess.run(
        [sys.executable, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _locked_version(lines: list[str], dist: str) -> str:
    """The exact version of ``dist`` in hash-locked requirement lines (``name==version --hash=...``)."""
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

    for line in lines:
        if HASH_OPTION not in line:
            msg = (
                f"requirement {line!r} has no {HASH_OPTION}...: the guard installs only hash-locked packages"
            )
            raise CheckFailed(msg)
        req = Requirement(line.split(" --", 1)[0])
        pinned = [s.version for s in req.specifier if s.operator == "=="]
        if canonicalize_name(req.name) == canonicalize_name(dist) and len(pinned) == 1:
            return pinned[0]
    msg = f"no exact, hash-locked {dist} among the guard's requirements {lines}; regenerate the Dockerfile"
    raise CheckFailed(msg)


def setuptools_guard(args: argparse.Namespace) -> str:
    """Before a --no-build-isolation build: the image's own setuptools must satisfy the constraint.

    When it does not, the guard installs the locked setuptools it is given (exact version, sha256
    checked, no resolution) rather than whatever the constraint resolves to that day. Either way it
    prints the line versions.txt records.
    """
    spec = _specifier_for("setuptools")
    installed = _installed("setuptools")
    if spec is None or (installed is not None and _satisfies(installed, spec)):
        return f"{GUARD_KEY}={installed} (the image's own, satisfies setuptools{spec or ' (no constraint)'})"
    wanted = _locked_version(args.requirements, "setuptools")
    print(
        f"imagebuild-check: setuptools {installed} violates setuptools{spec}; installing the locked {wanted}",
        file=sys.stderr,
    )
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as requirements:
        requirements.write("".join(f"{line}\n" for line in args.requirements))
        requirements.flush()
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-deps"),
                *("--only-binary=:all:", "--require-hashes", "-r", requirements.name),
            ],
            check=True,
        )
    fixed = _installed("setuptools")
    if fixed != wanted or not _satisfies(fixed, spec):
        msg = f"the image's setuptools is {fixed} after installing the locked {wanted}, which setuptools{spec} from {CONSTRAINT_FILE} needs"
        raise CheckFailed(msg)
    return f"{GUARD_KEY}={fixed} (locked, sha256-checked; replaced the image's {installed}, which violates setuptools{spec})"


def require_version(args: argparse.Namespace) -> str:
    try:
        found = md.version(args.dist)
    except md.PackageNotFoundError as e:
        msg = f"{args.dist} is not installed (expected {args.version})"
        raise CheckFailed(msg) from e
    ok = found == args.version if args.exact else found.startswith(args.version)
    if not ok:
        how = "exactly" if args.exact else "starting with"
        msg = f"{args.dist} is {found}, expected {how} {args.version}"
        raise CheckFailed(msg)
    return f"{args.dist} {found}"


def require_env(args: argparse.Namespace) -> str:
    found = os.environ.get(args.name)
    if found != args.value:
        msg = f"effective {args.name} is {found!r}, expected {args.value!r} (an ENV of the base image shadows it?)"
        raise CheckFailed(msg)
    return f"{args.name}={found}"


def _record_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def check_record(args: argparse.Namespace) -> str:
    """Every file of the distribution matches its RECORD, and its packages hold no foreign files."""
    dist = md.distribution(args.dist)
    root = Path(str(dist.locate_file("")))
    recorded: dict[Path, str] = {}
    for f in dist.files or []:
        if f.hash is not None:
            recorded[(root / f).resolve()] = f"{f.hash.mode}={f.hash.value}"
    problems = [
        f"{p.relative_to(root)}: hash differs from RECORD"
        if p.exists()
        else f"{p.relative_to(root)}: missing"
        for p, h in sorted(recorded.items())
        if not p.exists() or _record_hash(p) != h
    ]
    packages = {
        Path(str(f)).parts[0]
        for f in dist.files or []
        if not Path(str(f)).parts[0].endswith((".dist-info", ".data"))
    }
    for package in sorted(packages):
        top = root / package
        if not top.is_dir():
            continue
        for p in sorted(top.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.resolve() not in recorded:
                problems.append(
                    f"{p.relative_to(root)}: not in {args.dist}'s RECORD (left by something else)"
                )
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        msg = f"{args.dist} {dist.version} files do not match its RECORD: {shown}"
        raise CheckFailed(msg)
    return f"{args.dist} {dist.version}: {len(recorded)} files match RECORD"


def require_files(args: argparse.Namespace) -> str:
    """Each path is in the distribution's RECORD and on disk: a directory (ending in /) holds recorded files.

    The file list, not an import: importing the real AITER probes the GPU, and build hosts have none.
    """
    try:
        dist = md.distribution(args.dist)
    except md.PackageNotFoundError as e:
        msg = f"{args.dist} is not installed (expected it to provide {', '.join(args.paths)})"
        raise CheckFailed(msg) from e
    recorded = [str(f) for f in dist.files or []]
    found = []
    for wanted in args.paths:
        matches = (
            [f for f in recorded if f.startswith(wanted)]
            if wanted.endswith("/")
            else [f for f in recorded if f == wanted]
        )
        missing = [f for f in matches if not Path(str(dist.locate_file(f))).is_file()]
        if not matches:
            msg = f"{args.dist} {dist.version} does not provide {wanted} (not in its RECORD); the K3 path needs it"
            raise CheckFailed(msg)
        if missing:
            msg = f"{args.dist} {dist.version}: {wanted} is in its RECORD but {missing[0]} is not on disk"
            raise CheckFailed(msg)
        found.append(f"{wanted} ({len(matches)} file{'s' if len(matches) != 1 else ''})")
    return f"{args.dist} {dist.version} provides {', '.join(found)}"


APT_PACKAGES = "apt-packages.txt"
PYTHON_PACKAGES = "python-packages.txt"


def record_packages(args: argparse.Namespace) -> str:
    """Write what dpkg and Python see installed, sorted, one ``name=version`` per line.

    The pins cover the sources the build fetches; these lists cover the rest
    (the base's and apt's packages, pip's unpinned dependencies), so a rebuild
    that drifts there shows up in `imagebuild diff` as a changed line.
    """
    out = Path(args.dir)
    try:
        dpkg = subprocess.run(
            ["dpkg-query", "--show", "--showformat", "${binary:Package}=${Version}\n"],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        msg = f"cannot list the apt packages with dpkg-query: {e}"
        raise CheckFailed(msg) from e
    apt = sorted(set(dpkg.splitlines()))
    python = sorted({f"{d.metadata['Name']}=={d.version}" for d in md.distributions()}, key=str.lower)
    (out / APT_PACKAGES).write_text("".join(f"{line}\n" for line in apt), encoding="utf-8")
    (out / PYTHON_PACKAGES).write_text("".join(f"{line}\n" for line in python), encoding="utf-8")
    return f"recorded {len(apt)} apt and {len(python)} Python packages in {out}"


# Checks whose result line is a record for versions.txt (stdout); the others print a log line.
RECORDING_CHECKS = ("constraint-proof", "setuptools-guard")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagebuild-check")
    sub = parser.add_subparsers(dest="check", required=True)
    sub.add_parser("constraint-proof").set_defaults(func=constraint_proof)
    p = sub.add_parser("setuptools-guard")
    p.add_argument("requirements", nargs="*", help="hash-locked requirement lines to install when needed")
    p.set_defaults(func=setuptools_guard)
    p = sub.add_parser("require-version")
    p.add_argument("dist")
    p.add_argument("version")
    p.add_argument("--exact", action="store_true")
    p.set_defaults(func=require_version)
    p = sub.add_parser("require-env")
    p.add_argument("name")
    p.add_argument("value")
    p.set_defaults(func=require_env)
    p = sub.add_parser("require-files")
    p.add_argument("dist")
    p.add_argument("paths", nargs="+", help="paths relative to site-packages; a trailing / means a directory")
    p.set_defaults(func=require_files)
    p = sub.add_parser("check-record")
    p.add_argument("dist")
    p.set_defaults(func=check_record)
    p = sub.add_parser("record-packages")
    p.add_argument("dir")
    p.set_defaults(func=record_packages)
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except CheckFailed as e:
        print(f"imagebuild-check {args.check}: FAILED: {e}", file=sys.stderr)
        return 1
    print(result, file=sys.stdout if args.check in RECORDING_CHECKS else sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
