"""Gathers every file-system fact the checks need, in ONE exec inside the container.

Runs on the image's python3 with the standard library only (imagebuild is not
in the image) and prints one JSON document. It never imports mori or aiter:
an `import mori` would leave the JIT lock files the scrub check looks for.
It scans the image's files for credentials with imagebuild/secrets.py itself,
handed over as source (that module needs only the standard library), so the
image is judged by the same detector as the build's inputs, and a finding is
redacted before it leaves the container.
Usage: python3 -c "<this file>" '<json of support.probe_request()>' "<source of imagebuild/secrets.py>"
"""

from __future__ import annotations

import base64
import csv
import glob
import hashlib
import importlib.util
import json
import os
import re
import site
import stat
import subprocess
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

LIMIT = 20  # entries listed per finding; enough to act on, small enough to read
TIMEOUT_S = 30
BINARY_SNIFF_BYTES = 8192  # a NUL in the first 8 KiB: a binary, not scanned (as git and grep decide)
SCAN_BUDGET_BYTES = 1024**3  # read at most this much in all: a scan must end in the checks' time


def _run(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"rc": None, "stdout": "", "stderr": f"{type(e).__name__}: {e}"}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _dir_state(path: str) -> dict[str, Any]:
    p = Path(path)
    entries = sorted(str(c.relative_to(p)) for c in p.rglob("*"))[:LIMIT] if p.is_dir() else []
    return {"exists": p.exists(), "is_dir": p.is_dir(), "entries": entries}


def _tmp_wheels(root: str = "/tmp") -> list[str]:
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("proc", "sys")]
        found += [str(Path(top, f)) for f in files if f.endswith(".whl")]
        if len(found) >= LIMIT:
            break
    return sorted(found)[:LIMIT]


def _find(roots: list[Path], names: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {n: [] for n in names}
    for root in roots:
        for top, _, files in os.walk(root):
            for f in files:
                if f in found:
                    found[f].append(str(Path(top, f)))
    return found


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_infos(dist: str, paths: list[str]) -> list[dict[str, Any]]:
    infos, seen = [], set()
    for entry in paths:
        d = Path(entry)
        if not d.is_dir() or d.resolve() in seen:
            continue
        seen.add(d.resolve())
        for child in sorted(d.glob("*.dist-info")):
            name = child.name[: -len(".dist-info")].rsplit("-", 1)[0]
            if _norm(name) != _norm(dist):
                continue
            version = ""
            for line in (_read(str(child / "METADATA")) or "").splitlines():
                if line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
                    break
            infos.append({"path": str(child), "version": version})
    return infos


def _hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _record(dist_info: Path) -> dict[str, Any]:
    """Every RECORD entry against the file on disk, and files in the dist's packages RECORD lacks."""
    root = dist_info.parent
    text = _read(str(dist_info / "RECORD"))
    if text is None:
        return {"error": f"{dist_info}/RECORD is missing"}
    recorded: dict[Path, str] = {}
    for row in csv.reader(text.splitlines()):
        if row and len(row) >= 2 and row[1]:
            recorded[(root / row[0]).resolve()] = row[1]
    mismatched, missing = [], []
    for path, want in sorted(recorded.items()):
        if not path.exists():
            missing.append(str(path.relative_to(root)))
        elif _hash(path) != want:
            mismatched.append(str(path.relative_to(root)))
    tops = {Path(row[0]).parts[0] for row in csv.reader(text.splitlines()) if row and row[0]}
    foreign = []
    for top in sorted(t for t in tops if not t.endswith((".dist-info", ".data"))):
        if (root / top).is_dir():
            foreign += [
                str(p.relative_to(root))
                for p in sorted((root / top).rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts and p.resolve() not in recorded
            ]
    return {
        "files": len(recorded),
        "mismatched": mismatched[:LIMIT],
        "mismatched_count": len(mismatched),
        "missing": missing[:LIMIT],
        "missing_count": len(missing),
        "foreign": foreign[:LIMIT],
        "foreign_count": len(foreign),
    }


def _spec_location(name: str) -> str | None:
    spec = importlib.util.find_spec(name)  # locates without importing the package
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return str(next(iter(spec.submodule_search_locations)))
    return spec.origin


def _launcher(exp: dict[str, Any]) -> list[dict[str, Any]]:
    runs = []
    for case in exp["launcher_cases"]:
        # A clean environment: the comparison is of the launcher and its recipes, not of the image ENV.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **case["env"]}
        done = _run([sys.executable, exp["launcher"], "--dry-run", "--json"], env=env)
        argv = None
        if done["rc"] == 0:
            try:
                argv = json.loads(done["stdout"])["argv"]
            except (ValueError, KeyError, TypeError):
                argv = None
        runs.append({"name": case["name"], "rc": done["rc"], "argv": argv, "stderr": done["stderr"][-2000:]})
    return runs


def _installed(dist: str, paths: list[str]) -> list[dict[str, str]]:
    """Every installed ``dist`` on ``paths``, in path order, as importlib.metadata finds it
    (dist-info, and the egg-info Debian's own packages still use); the first one imports."""
    import importlib.metadata

    found = []
    for entry in paths:
        for d in importlib.metadata.distributions(path=[entry]):
            if _norm(d.metadata["Name"] or "") == _norm(dist):
                found.append({"path": str(getattr(d, "_path", entry)), "version": d.version})
    return found


def _load_secrets(source: str) -> Any:
    """imagebuild/secrets.py, from its source (imagebuild is not installed in the image)."""
    module = types.ModuleType("imagebuild_secrets")
    sys.modules[module.__name__] = module  # dataclasses looks its module up
    exec(compile(source, "imagebuild/secrets.py", "exec"), module.__dict__)  # our own module, as shipped
    return module


def _read_text(path: str, size: int) -> str | None:
    """A text file's content; None for a binary or an unreadable file."""
    try:
        with open(path, "rb") as f:  # noqa: PTH123  os.walk gives strings
            head = f.read(BINARY_SNIFF_BYTES)
            if b"\0" in head:
                return None
            data = head + f.read(size)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace")


def _scan_files(roots: list[str], max_bytes: int, secrets: Any) -> dict[str, Any]:
    """Credentials in the regular files under ``roots``: path, line, kind and a redacted finding."""
    findings: list[dict[str, Any]] = []
    counts = {"scanned": 0, "binary": 0, "too_large": 0, "unread": 0, "over_budget": 0}
    budget = SCAN_BUDGET_BYTES
    for root in roots:
        for top, dirs, files in os.walk(root):  # symlinked directories are not followed
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(top, name)  # noqa: PTH118
                try:
                    info = os.lstat(path)
                except OSError:
                    counts["unread"] += 1
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue  # symlinks (their targets are scanned where they live), devices, FIFOs
                if info.st_size > max_bytes:
                    counts["too_large"] += 1
                    continue
                if info.st_size > budget:
                    counts["over_budget"] += 1
                    continue
                text = _read_text(path, info.st_size)
                if text is None:
                    counts["binary"] += 1
                    continue
                budget -= info.st_size
                counts["scanned"] += 1
                for found in secrets.find_secrets(text):
                    line = text.count("\n", 0, found.start) + 1
                    findings.append({"path": path, "line": line, "kind": found.kind, "shown": found.shown})
    return {"roots": roots, "findings": findings[: LIMIT * 5], "found": len(findings), **counts}


def gather(exp: dict[str, Any], secrets: Any) -> dict[str, Any]:
    site_packages = Path(exp["site_packages"])
    paths = [p for p in sys.path if p]
    dist_infos = _dist_infos(exp["repinned_dist"], [*paths, str(site_packages)])
    local = [d for d in dist_infos if Path(d["path"]).parent == site_packages]
    router = Path(exp["router"])
    return {
        "python": {
            "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "python3_version": _run(["python3", "--version"])["stdout"].strip(),
            "executable": sys.executable,
            "sys_path": paths,
            "site_packages": site.getsitepackages(),
            "purelib": sysconfig.get_paths()["purelib"],
            "locations": {p: _spec_location(p) for p in exp["graft_packages"]},
        },
        "versions": _read(exp["versions_file"]),
        "packages": {"apt": _read(exp["apt_packages_file"]), "python": _read(exp["python_packages_file"])},
        "constraints": _read(exp["constraints_file"]),
        "build_constraints": _read(exp["build_constraints_file"]),
        "empty_dirs": {p: _dir_state(p) for p in exp["empty_dirs"]},
        "absent": {p: sorted(glob.glob(p))[:LIMIT] for p in exp["absent_paths"]},  # noqa: PTH207  absolute patterns
        "tmp_leftovers": [p for p in exp["tmp_leftovers"] if os.path.lexists(p)],
        "tmp_wheels": _tmp_wheels(),
        "graft": {
            "packages": {p: (site_packages / p).is_dir() for p in exp["graft_packages"]},
            "dirs": {d: (site_packages / d).is_dir() for d in exp["graft_dirs"]},
            "configs": _find([site_packages / r for r in exp["tuned_config_roots"]], exp["tuned_configs"]),
            "dist_infos": dist_infos,
            "record": _record(Path(local[0]["path"])) if len(local) == 1 else None,
            "check_tool": _run([exp["check_tool"], "check-record", exp["repinned_dist"]]),
        },
        "router": {
            "exists": router.is_file(),
            "executable": os.access(router, os.X_OK),
            "help": _run([str(router), "--help"]) if os.access(router, os.X_OK) else None,
        },
        "launcher": {"exists": Path(exp["launcher"]).is_file(), "runs": _launcher(exp)},
        # ldd with the image's environment: a library whose dependency (UCX for RIXL) is missing shows "not found".
        "layer_libraries": {
            p: {"exists": Path(p).is_file(), "ldd": _run(["ldd", p]) if Path(p).is_file() else None}
            for p in exp["layer_libraries"]
        },
        # Every setuptools on python3's path, in import order: the first is what a no-isolation build uses.
        "setuptools": _installed("setuptools", paths),
        "secret_files": _scan_files(exp["secret_scan_roots"], exp["secret_scan_max_file_bytes"], secrets),
    }


if __name__ == "__main__":
    json.dump(gather(json.loads(sys.argv[1]), _load_secrets(sys.argv[2])), sys.stdout)
