"""The snapshot service's archive: dated snapshots of real Debian bookworm .debs, signed with a test key.

Two snapshots, a "day" apart, built once per state dir from Debian's own archive (`apt-get download`
with private lists, as engine_matrix.py fetches trixie's packages; nothing is configured on the host):

  SNAPSHOTS[0]  bookworm as it is today                       (published by `up`)
  SNAPSHOTS[1]  bookworm + bookworm-updates + bookworm-security (staged: tests publish it between builds)

each holding the dependency closure of DOWNLOADED (step 4 packages the sample base lacks, so the step
really downloads and checks them) and of MOVING: the first of step 4's packages whose version differs
between the two, picked from the real indexes at setup, so the newer snapshot upgrades it. Indexes are
written by `apt-ftparchive` (apt-utils) and the Release is clear-signed into InRelease by a key generated
for this world (gpg, kept in the state dir, never committed); the base image trusts it at KEYRING_PATH,
the path the sample apt pin's `signed_by` names.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from sampleworld import log, proc
from sampleworld.errors import SampleWorldError
from sampleworld.layout import StateDir
from sampleworld.snapshot_server import ARCHIVE_PATH, published

SUITE = "bookworm"
ARCH = "amd64"
MIRROR = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
SNAPSHOTS = ("20261101T000000Z", "20261102T000000Z")
DOWNLOADED = ("ccache",)  # left out of the base's debootstrap (base_image.py): step 4 fetches them
CANDIDATES = ("curl", "git", "libssl-dev", "cmake", "ca-certificates", "pkg-config")  # the moving one
KEYRING_PATH = "/usr/share/keyrings/sampleworld-snapshot-archive.gpg"  # in the base image
KEY_UID = "sampleworld snapshot archive (test key) <snapshots@sampleworld.invalid>"
_SOURCES = (
    f"deb {MIRROR} {SUITE} main\n",
    f"deb {MIRROR} {SUITE} main\ndeb {MIRROR} {SUITE}-updates main\ndeb {SECURITY} {SUITE}-security main\n",
)


@dataclass(frozen=True)
class ArchiveDirs:
    state: StateDir

    @property
    def root(self) -> Path:
        return self.state.root / "apt"

    @property
    def served(self) -> Path:  # what the snapshot server serves
        return self.root / "served"

    @property
    def staged(self) -> Path:  # built, not yet published
        return self.root / "staged"

    @property
    def gnupg(self) -> Path:
        return self.root / "gnupg"

    @property
    def keyring(self) -> Path:
        return self.root / "archive-keyring.gpg"

    @property
    def manifest(self) -> Path:
        return self.root / "snapshots.json"

    def archive(self) -> Path:
        return self.served / ARCHIVE_PATH.strip("/")


def ensure_key(dirs: ArchiveDirs) -> Path:
    """The world's archive key as a binary keyring (what signed-by takes), generated once."""
    if dirs.keyring.is_file():
        return dirs.keyring
    dirs.gnupg.mkdir(parents=True, exist_ok=True, mode=0o700)
    gpg = ["gpg", "--homedir", str(dirs.gnupg), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    proc.run([*gpg, "--quick-gen-key", KEY_UID, "ed25519", "sign", "never"], timeout=120)
    partial = dirs.keyring.with_suffix(".partial")
    proc.run([*gpg, "--yes", "--output", str(partial), "--export", KEY_UID])
    if not partial.is_file() or partial.stat().st_size == 0:
        msg = f"gpg exported no key from {dirs.gnupg}"
        raise SampleWorldError(msg)
    partial.rename(dirs.keyring)  # a half-made key is never taken for the world's
    return dirs.keyring


def _apt(dist: Path, sources: str) -> list[str]:
    apt = dist / "apt"
    for path in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial"):
        path.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(sources)
    return [
        "-o", f"Dir::Etc::sourcelist={apt / 'sources.list'}",
        "-o", "Dir::Etc::sourceparts=-",
        "-o", f"Dir::State::Lists={apt / 'lists'}",
        "-o", f"Dir::Cache={apt / 'cache'}",
        "-o", f"APT::Architecture={ARCH}",
        "-o", "APT::Sandbox::User=root",
        "-q",
    ]  # fmt: skip


def _candidate(options: list[str], name: str) -> str:
    out = proc.run(["apt-cache", *options, "show", "--no-all-versions", name])
    return next(
        (line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Version:")), ""
    )


def closure(options: list[str], names: tuple[str, ...]) -> list[str]:
    """``names`` and every package they depend on (no recommends), as apt-cache resolves them."""
    out = proc.run(
        [
            "apt-cache", *options, "depends", "--recurse", "--no-recommends", "--no-suggests",
            "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *names,
        ]
    )  # fmt: skip
    return sorted(
        {line.strip() for line in out.splitlines() if line and not line[0].isspace() and "<" not in line}
    )


def _build_snapshot(dirs: ArchiveDirs, snapshot: str, options: list[str], names: tuple[str, ...]) -> None:
    target = dirs.staged / snapshot
    if target.exists():
        shutil.rmtree(target)
    pool = target / "pool" / "main"
    pool.mkdir(parents=True)
    wanted = closure(options, names)
    with log.step(f"apt: snapshot {snapshot}: apt-get download of {len(wanted)} package(s)"):
        proc.run(["apt-get", *options, "download", *wanted], cwd=pool, timeout=1200)
    binary = target / "dists" / SUITE / "main" / f"binary-{ARCH}"
    binary.mkdir(parents=True)
    packages = proc.run(["apt-ftparchive", "packages", "pool/main"], cwd=target)
    (binary / "Packages").write_text(packages)
    (binary / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    fields = {"Origin": "Debian", "Label": "Debian", "Suite": SUITE, "Codename": SUITE}
    fields |= {"Architectures": ARCH, "Components": "main"}
    release_options = [f"-oAPT::FTPArchive::Release::{k}={v}" for k, v in fields.items()]
    release = proc.run(["apt-ftparchive", *release_options, "release", "."], cwd=target / "dists" / SUITE)
    (target / "dists" / SUITE / "Release").write_text(release)
    gpg = ["gpg", "--homedir", str(dirs.gnupg), "--batch", "--yes", "--pinentry-mode", "loopback"]
    suite_dir = target / "dists" / SUITE
    proc.run(
        [*gpg, "--passphrase", "", "--local-user", KEY_UID, "--clearsign", "-o", "InRelease", "Release"],
        cwd=suite_dir,
    )
    proc.run(
        [
            *gpg,
            "--passphrase",
            "",
            "--local-user",
            KEY_UID,
            "--armor",
            "--detach-sign",
            "-o",
            "Release.gpg",
            "Release",
        ],
        cwd=suite_dir,
    )


def ensure_archive(state: StateDir) -> dict[str, str]:
    """Build both snapshots once (cached in the state dir), publish the first; the manifest says what moved."""
    dirs = ArchiveDirs(state)
    try:
        _ensure_signed_archive(dirs)
    finally:
        _stop_gpg_agent(dirs)  # gpg starts one per homedir and leaves it running: it is ours to stop
    if not published(dirs.served):
        publish(state, SNAPSHOTS[0])
    data: dict[str, str] = json.loads(dirs.manifest.read_text())["versions"]
    return data


def _stop_gpg_agent(dirs: ArchiveDirs) -> None:
    if dirs.gnupg.is_dir():
        proc.run(["gpgconf", "--homedir", str(dirs.gnupg), "--kill", "gpg-agent"], timeout=60)


def _ensure_signed_archive(dirs: ArchiveDirs) -> None:
    ensure_key(dirs)
    if not dirs.manifest.is_file():
        dists = [dirs.root / f"lists-{i}" for i in range(len(SNAPSHOTS))]
        options = [_apt(dist, sources) for dist, sources in zip(dists, _SOURCES, strict=True)]
        for opts in options:
            with log.step("apt: apt-get update (private lists)"):
                proc.run(["apt-get", *opts, "update"], timeout=900)
        moving = next((n for n in CANDIDATES if _candidate(options[0], n) != _candidate(options[1], n)), None)
        if moving is None:
            msg = f"none of {', '.join(CANDIDATES)} differs between {SUITE} and its updates today; extend CANDIDATES"
            raise SampleWorldError(msg)
        for snapshot, opts in zip(SNAPSHOTS, options, strict=True):
            _build_snapshot(dirs, snapshot, opts, (*DOWNLOADED, moving))
        versions = [_candidate(opts, moving) for opts in options]
        for dist in dists:
            shutil.rmtree(dist)
        manifest = {"moving": moving, "versions": dict(zip(SNAPSHOTS, versions, strict=True))}
        dirs.manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def moving_package(state: StateDir) -> tuple[str, dict[str, str]]:
    """The package whose version differs between the snapshots, and its version in each."""
    data = json.loads(ArchiveDirs(state).manifest.read_text())
    return data["moving"], data["versions"]


def publish(state: StateDir, snapshot: str) -> None:
    """Make a staged snapshot served (the service imported it)."""
    dirs = ArchiveDirs(state)
    dirs.archive().mkdir(parents=True, exist_ok=True)
    (dirs.staged / snapshot).rename(dirs.archive() / snapshot)


def unpublish(state: StateDir, snapshot: str) -> None:
    """Take a published snapshot back to staged (tests that published it put the world back)."""
    dirs = ArchiveDirs(state)
    if (dirs.archive() / snapshot).is_dir():
        (dirs.archive() / snapshot).rename(dirs.staged / snapshot)
