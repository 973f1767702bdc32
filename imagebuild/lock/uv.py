"""Resolve the image's Python packages with uv (``uv pip compile``), not with a resolver of our own.

uv resolves for a target that is not this machine (``--python-version``,
``--python-platform``), reads the previous lock as preferences (so a re-lock
keeps every version that still holds, as pip-tools does) and writes PEP 751.
Wheels only (``--only-binary :all:``): nothing in the lock may be compiled in
the image behind our back. One resolution of every group together keeps one
version per package across the image; one more call per group, with that
resolution as exact constraints, finds which packages each group installs.

:class:`Resolver` is the interface the python lock flow uses; unit tests use a
fake behind it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import tomllib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from imagebuild.errors import LockError
from imagebuild.inputs.python_lock import LockedPackage, PythonLock, render_python_lock
from imagebuild.lock.pypi import target_tags

# The oldest glibc the image's wheels may need. The real base is Ubuntu 22.04 (glibc 2.35) and the
# sample base Debian 12 (2.36); the AITER release wheel itself is manylinux_2_28.
MANYLINUX = "manylinux_2_28"


@dataclass(frozen=True, kw_only=True)
class ResolveRequest:
    groups: Mapping[str, tuple[str, ...]]  # dependency group -> requirements
    constraints: str  # text of constraints/*.txt
    index: str
    python: str  # MAJOR.MINOR
    machine: str  # x86_64, aarch64
    previous: PythonLock | None  # preferences: kept unless upgraded
    upgrade: bool = False
    upgrade_packages: tuple[str, ...] = ()
    timeout: float = 120.0

    @property
    def platform(self) -> str:
        return f"{self.machine}-{MANYLINUX}"


@dataclass(frozen=True, kw_only=True)
class Resolution:
    packages: tuple[LockedPackage, ...]
    resolver: str  # e.g. "uv 0.13.9"


class Resolver(ABC):
    @abstractmethod
    def resolve(self, request: ResolveRequest) -> Resolution:
        """Every package the groups need, each with its groups and the one wheel the target installs."""


def uv_binary() -> str:
    try:
        from uv import find_uv_bin
    except ImportError as e:  # pragma: no cover - uv is a dependency of imagebuild
        msg = "uv is not installed; install imagebuild with its dependencies (pip install -e .)"
        raise LockError(msg) from e
    return find_uv_bin()


def _env(timeout: float) -> dict[str, str]:
    # A user's UV_INDEX_URL, UV_EXTRA_INDEX_URL, UV_CONSTRAINT, ... must not change the lock.
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k == "UV_CACHE_DIR"}
    env["UV_HTTP_TIMEOUT"] = str(int(timeout))
    env["NO_COLOR"] = "1"
    return env


def run_uv(args: Sequence[str], *, cwd: Path, timeout: float) -> str:
    """Run ``uv ARGS`` in ``cwd``; LockError naming the command and uv's explanation on failure."""
    cmd = [uv_binary(), *args]
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(timeout),
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        msg = f"`uv {' '.join(args[:2])}` timed out after {timeout:g}s; check the index and retry"
        raise LockError(msg) from e
    if proc.returncode != 0:
        msg = f"uv could not resolve the image's python packages: {explain(proc.stderr)}"
        raise LockError(msg)
    return proc.stdout


def explain(stderr: str) -> str:
    """uv's multi-line, box-drawn explanation as one line."""
    parts = []
    for raw in stderr.splitlines():
        line = raw.strip().lstrip("\u00d7\u2570\u2500\u25b6\u2502\u251c\u252c\u256d ").strip()  # box drawing
        if line and not line.startswith("warning:") and line not in parts:
            parts.append(line)
    return " ".join(parts) or "uv failed without a message"


class UvResolver(Resolver):
    def resolve(self, request: ResolveRequest) -> Resolution:
        with tempfile.TemporaryDirectory(prefix="imagebuild-pylock-") as tmp:
            work = Path(tmp)
            (work / "constraints.txt").write_text(request.constraints, encoding="utf-8")
            inputs = []
            for group, requirements in request.groups.items():
                (work / f"{group}.in").write_text("".join(f"{r}\n" for r in requirements), encoding="utf-8")
                inputs.append(f"{group}.in")
            if request.previous is not None:
                # uv reads an existing output file as preferences: what held before stays.
                (work / "pylock.toml").write_text(render_python_lock(request.previous), encoding="utf-8")
            upgrade = ["--upgrade"] if request.upgrade else []
            for name in request.upgrade_packages:
                upgrade += ["--upgrade-package", name]
            combined = self._compile(request, work, inputs, "pylock.toml", upgrade)
            (work / "exact.txt").write_text(
                "".join(f"{name}=={pkg['version']}\n" for name, pkg in sorted(combined.items())),
                encoding="utf-8",
            )
            members: dict[str, set[str]] = {name: set() for name in combined}
            for group in request.groups:
                found = self._compile(
                    request, work, [f"{group}.in"], f"pylock.{group}.toml", ["-c", "exact.txt"]
                )
                for name in found:
                    members[name].add(group)
            version = run_uv(["--version"], cwd=work, timeout=30).split()[1]
        tags = target_tags(request.python, request.machine)
        packages = tuple(
            _locked(name, combined[name], tuple(sorted(groups)), tags)
            for name, groups in sorted(members.items())
        )
        return Resolution(packages=packages, resolver=f"uv {version}")

    def _compile(
        self, request: ResolveRequest, work: Path, inputs: list[str], output: str, extra: list[str]
    ) -> dict[str, dict[str, Any]]:
        run_uv(
            [
                "pip",
                "compile",
                *inputs,
                "--constraints",
                "constraints.txt",
                *extra,
                "--output-file",
                output,
                "--format",
                "pylock.toml",
                "--python-version",
                request.python,
                "--python-platform",
                request.platform,
                "--index-url",
                request.index,
                "--only-binary",
                ":all:",
                "--no-config",
                "--no-python-downloads",
                "--no-progress",
                "--quiet",
            ],
            cwd=work,
            timeout=request.timeout,
        )
        data = tomllib.loads((work / output).read_text(encoding="utf-8"))
        return {canonicalize_name(p["name"]): p for p in data.get("packages", [])}


def _locked(name: str, entry: Mapping[str, Any], groups: tuple[str, ...], tags: list[Tag]) -> LockedPackage:
    """The package with the one wheel pip picks on the target: the best-ranked compatible tag."""
    rank = {tag: i for i, tag in enumerate(tags)}
    best: tuple[int, Mapping[str, Any], str] | None = None
    for wheel in entry.get("wheels", []):
        filename = wheel.get("name") or unquote(urlsplit(wheel["url"]).path.rsplit("/", 1)[-1])
        try:
            file_tags = parse_wheel_filename(filename)[3]
        except InvalidWheelFilename:
            continue
        position = min((rank[t] for t in file_tags if t in rank), default=None)
        if position is not None and (best is None or position < best[0]):
            best = (position, wheel, filename)
    if best is None:
        msg = (
            f"python lock: {name}=={entry['version']} has no wheel for the target; "
            "the image installs wheels only: pick a version that ships one"
        )
        raise LockError(msg)
    _, wheel, filename = best
    size = wheel.get("size")
    return LockedPackage(
        name=name,
        version=str(entry["version"]),
        groups=groups,
        filename=filename,
        url=str(wheel["url"]),
        size=int(size) if isinstance(size, int) else None,
        sha256=str(wheel["hashes"]["sha256"]),
    )
