"""Debian trixie's docker.io and containerd for the engine matrix: fetched with apt through a temporary
sources list into the state dir (nothing is configured or installed on the host), each .deb checked
against the sha256 trixie's Packages index lists, and unpacked with `dpkg -x`, once.

Their dockerd and containerd run on bookworm's glibc; trixie's runc needs glibc 2.38, so the private bin
dir, first on the dockerd process's PATH, holds no runc and the shims find bookworm's /usr/sbin/runc.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sampleworld import log, proc
from sampleworld.errors import SampleWorldError
from sampleworld.layout import StateDir

SUITE = "trixie"
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


def dist_dir(state: StateDir) -> Path:
    """Where the trixie packages are fetched and unpacked (shared by both Docker 26 engines)."""
    return state.engines / f"dist-{SUITE}"


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


def parse_packages(text: str, wanted: tuple[str, ...], arch: str = ARCH) -> dict[str, dict[str, str]]:
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
        msg = f"trixie's Packages index lists no {', '.join(missing)} for {arch}"
        raise SampleWorldError(msg)
    return found


def _packages_index(dist: Path) -> str:
    lists = dist / "apt" / "lists"
    found = sorted(lists.glob(f"*_dists_{SUITE}_main_binary-{ARCH}_Packages*"))
    if not found:
        msg = f"apt-get update left no {SUITE} main {ARCH} Packages index in {lists}"
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


def fetched(state: StateDir) -> dict[str, dict[str, str]] | None:
    """What the last fetch unpacked (package -> version, sha256, filename), when it is all there."""
    dist = dist_dir(state)
    try:
        record: dict[str, dict[str, str]] = json.loads(_marker(dist).read_text())
    except (OSError, ValueError):
        return None
    links_ok = all((dist / "bin" / name).resolve().is_file() for name in BINARIES)
    return record if links_ok and set(record) == set(PACKAGES) else None


def fetch(state: StateDir) -> dict[str, dict[str, str]]:
    """trixie's docker.io and containerd, verified and unpacked into the state dir (once)."""
    record = fetched(state)
    if record is not None:
        return record
    dist = dist_dir(state)
    apt = dist / "apt"
    for path in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial", dist / "debs"):
        path.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {MIRROR} {SUITE} main\n")
    options = _apt_options(dist)
    with log.step(f"engines: apt-get update ({SUITE} main, private lists)"):
        proc.run(["apt-get", *options, "update"], timeout=600)
    index = parse_packages(_packages_index(dist), PACKAGES)
    with log.step(f"engines: apt-get download {' '.join(f'{p}/{SUITE}' for p in PACKAGES)}"):
        proc.run(["apt-get", *options, "download", *(f"{p}/{SUITE}" for p in PACKAGES)], cwd=dist / "debs")
    record = {}
    for name, fields in index.items():
        deb = dist / "debs" / Path(fields["Filename"]).name
        if not deb.is_file():
            msg = f"apt-get download left no {deb.name} in {deb.parent}"
            raise SampleWorldError(msg)
        actual = _sha256(deb)
        if actual != fields["SHA256"]:
            deb.unlink()
            msg = f"{deb.name}: sha256 {actual}, but trixie's Packages index lists {fields['SHA256']}"
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
