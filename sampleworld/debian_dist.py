"""Docker engines newer than bookworm's for the engine matrix: a Debian suite's docker.io and containerd,
fetched with apt through a temporary sources list into the state dir (nothing is configured or installed
on the host), each .deb checked against the sha256 the suite's Packages index lists, and unpacked with
`dpkg -x`, once per suite:

  trixie  Debian 13: docker.io 26.1.5, containerd 1.7.24
  forky   Debian testing: docker.io 28.5.2, containerd 2.1.9 (2026-12). Testing moves: the matrix runs
          what it has, and `sampleworld engines status` says which version that is.

Their dockerd and containerd run on bookworm's glibc (they need 2.34); trixie's runc needs glibc 2.38, so
the private bin dir, first on the dockerd process's PATH, holds no runc and the shims find bookworm's
/usr/sbin/runc.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sampleworld import log, proc
from sampleworld.errors import SampleWorldError
from sampleworld.layout import StateDir

SUITES = ("trixie", "forky")
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("docker.io", "containerd")
ARCH = "amd64"
# What the private bin dir links, from the unpacked packages. Deliberately no runc (see the module doc).
BINARIES = {
    "dockerd": "usr/sbin/dockerd",
    "docker-proxy": "usr/sbin/docker-proxy",
    "containerd": "usr/bin/containerd",
    "containerd-shim-runc-v2": "usr/bin/containerd-shim-runc-v2",
    "ctr": "usr/bin/ctr",
}


def dist_dir(state: StateDir, suite: str) -> Path:
    """Where the suite's packages are fetched and unpacked (shared by the engines that run them)."""
    if suite not in SUITES:
        msg = f"no Debian suite {suite!r} for the engine matrix; it fetches {', '.join(SUITES)}"
        raise SampleWorldError(msg)
    return state.engines / f"dist-{suite}"


def _apt_options(dist: Path) -> list[str]:
    apt = dist / "apt"
    return [
        "-o",
        f"Dir::Etc::sourcelist={apt / 'sources.list'}",
        "-o",
        "Dir::Etc::sourceparts=-",
        "-o",
        f"Dir::State::Lists={apt / 'lists'}",
        "-o",
        f"Dir::Cache={apt / 'cache'}",  # not the host's pkgcache.bin
        "-o",
        "APT::Sandbox::User=root",  # the downloads land in a root-owned dir
        "-q",
    ]


def parse_packages(text: str, wanted: tuple[str, ...], suite: str, arch: str = ARCH) -> dict[str, dict[str, str]]:
    """Package name -> its stanza's fields (Version, Filename, SHA256, Size, ...) in a Packages index."""
    found: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                if key:
                    fields[key] += "\n" + line.strip()
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        name = fields.get("Package")
        if name in wanted and fields.get("Architecture") in (arch, "all"):
            found[name] = fields
    missing = [name for name in wanted if name not in found]
    if missing:
        msg = f"{suite}'s Packages index lists no {', '.join(missing)} for {arch}"
        raise SampleWorldError(msg)
    return found


def _packages_index(dist: Path, suite: str) -> str:
    lists = dist / "apt" / "lists"
    found = sorted(lists.glob(f"*_dists_{suite}_main_binary-{ARCH}_Packages*"))
    if not found:
        msg = f"apt-get update left no {suite} main {ARCH} Packages index in {lists}"
        raise SampleWorldError(msg)
    # apt keeps the index compressed (.lz4, .gz, ...); its helper decompresses any of them.
    return proc.run(["/usr/lib/apt/apt-helper", "cat-file", str(found[0])], timeout=120)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _marker(dist: Path) -> Path:
    return dist / "root" / ".fetched.json"


def fetched(state: StateDir, suite: str) -> dict[str, dict[str, str]] | None:
    """What the suite's last fetch unpacked (package -> version, sha256, filename), when it is all there."""
    dist = dist_dir(state, suite)
    try:
        record: dict[str, dict[str, str]] = json.loads(_marker(dist).read_text())
    except (OSError, ValueError):
        return None
    links_ok = all((dist / "bin" / name).resolve().is_file() for name in BINARIES)
    return record if links_ok and set(record) == set(PACKAGES) else None


def fetch(state: StateDir, suite: str) -> dict[str, dict[str, str]]:
    """The suite's docker.io and containerd, verified and unpacked into the state dir (once)."""
    record = fetched(state, suite)
    if record is not None:
        return record
    dist = dist_dir(state, suite)
    apt = dist / "apt"
    for path in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial", dist / "debs"):
        path.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {MIRROR} {suite} main\n")
    options = _apt_options(dist)
    with log.step(f"engines: apt-get update ({suite} main, private lists)"):
        proc.run(["apt-get", *options, "update"], timeout=600)
    index = parse_packages(_packages_index(dist, suite), PACKAGES, suite)
    with log.step(f"engines: apt-get download {' '.join(f'{p}/{suite}' for p in PACKAGES)}"):
        proc.run(["apt-get", *options, "download", *(f"{p}/{suite}" for p in PACKAGES)], cwd=dist / "debs")
    record = {}
    for name, fields in index.items():
        deb = dist / "debs" / Path(fields["Filename"]).name
        if not deb.is_file():
            msg = f"apt-get download left no {deb.name} in {deb.parent}"
            raise SampleWorldError(msg)
        actual = _sha256(deb)
        if actual != fields["SHA256"]:
            deb.unlink()
            msg = f"{deb.name}: sha256 {actual}, but {suite}'s Packages index lists {fields['SHA256']}"
            raise SampleWorldError(msg)
        record[name] = {"version": fields["Version"], "sha256": actual, "filename": deb.name}
    root = dist / "root"
    staging = dist / "root.partial"
    for path in (root, staging):
        if path.exists():
            shutil.rmtree(path)
    with log.step("engines: dpkg -x (not installed)"):
        for fields in record.values():
            proc.run(["dpkg", "-x", str(dist / "debs" / fields["filename"]), str(staging)], timeout=300)
    staging.rename(root)
    bin_dir = dist / "bin"
    if bin_dir.exists():
        shutil.rmtree(bin_dir)
    bin_dir.mkdir()
    for name, relative in BINARIES.items():
        (bin_dir / name).symlink_to(root / relative)
    _marker(dist).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    for fields in record.values():  # the unpacked tree is what runs; the .debs are not needed again
        (dist / "debs" / fields["filename"]).unlink()
    return record
