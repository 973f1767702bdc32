#!/usr/bin/env python3
"""Checks the build runs inside the image (installed as /opt/imagebuild/bin/imagebuild-check).

Standard library only, plus pip's vendored ``packaging``: it runs on the base
image's python before anything else is installed. Each check prints what it
expected and what it found, and exits 1 on failure so the RUN step fails there,
not hours later on a cluster.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as md
import os
import subprocess
import sys
from pathlib import Path

CONSTRAINT_FILE = Path(os.environ.get("IMAGEBUILD_CONSTRAINT_FILE", "/etc/pip-constraints.txt"))


class CheckFailed(Exception):
    pass


def _specifier_for(project: str) -> str | None:
    """The combined specifier the constraint file sets for ``project``, if any."""
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

    specs = []
    for line in CONSTRAINT_FILE.read_text(encoding="utf-8").splitlines():
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
    spec = _specifier_for("setuptools")
    if spec is None:
        msg = f"{CONSTRAINT_FILE} constrains no setuptools version; nothing to prove"
        raise CheckFailed(msg)
    if not _satisfies(built_with, spec):
        msg = (
            f"build-toolchain constraint did not hold: pip {_pip_version()} put setuptools {built_with} "
            f"into an isolated build environment, but {CONSTRAINT_FILE} says setuptools{spec}. "
            "Isolated builds need PIP_BUILD_CONSTRAINT (pip >= 25.3) or PIP_CONSTRAINT (pip < 26.2)"
        )
        raise CheckFailed(msg)
    return (
        f"BUILD_SETUPTOOLS={built_with} (isolated build, pip {_pip_version()}, constraint setuptools{spec})"
    )


def setuptools_guard(_: argparse.Namespace) -> str:
    """Before a --no-build-isolation build: the image's own setuptools must satisfy the constraint."""
    spec = _specifier_for("setuptools")
    try:
        installed = md.version("setuptools")
    except md.PackageNotFoundError:
        installed = None
    if spec is None or (installed is not None and _satisfies(installed, spec)):
        return f"setuptools {installed} satisfies {spec or 'no constraint'}"
    # Bring the image's setuptools into the constraint before compiling anything.
    print(
        f"imagebuild-check: setuptools {installed} violates setuptools{spec}; installing a constrained one",
        file=sys.stderr,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-cache-dir",
            "--constraint",
            str(CONSTRAINT_FILE),
            f"setuptools{spec}",
        ],
        check=True,
    )
    fixed = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('setuptools'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not _satisfies(fixed, spec):
        msg = f"the image's setuptools is {fixed}, which violates setuptools{spec} from {CONSTRAINT_FILE}, and pip could not fix it"
        raise CheckFailed(msg)
    return f"setuptools {installed} replaced by {fixed} to satisfy setuptools{spec}"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagebuild-check")
    sub = parser.add_subparsers(dest="check", required=True)
    sub.add_parser("constraint-proof").set_defaults(func=constraint_proof)
    sub.add_parser("setuptools-guard").set_defaults(func=setuptools_guard)
    p = sub.add_parser("require-version")
    p.add_argument("dist")
    p.add_argument("version")
    p.add_argument("--exact", action="store_true")
    p.set_defaults(func=require_version)
    p = sub.add_parser("require-env")
    p.add_argument("name")
    p.add_argument("value")
    p.set_defaults(func=require_env)
    p = sub.add_parser("check-record")
    p.add_argument("dist")
    p.set_defaults(func=check_record)
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except CheckFailed as e:
        print(f"imagebuild-check {args.check}: FAILED: {e}", file=sys.stderr)
        return 1
    # The proof's line goes to versions.txt (stdout); everything else is a log line.
    print(result, file=sys.stdout if args.check == "constraint-proof" else sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
