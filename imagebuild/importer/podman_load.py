"""``--runtime podman``: the archive checked, then loaded with ``podman load``, then its identity checked.

Podman has no daemon to stream into (its Docker-compatible API is a service a compute node rarely
runs), so the archive is checked first (``check_only``: size and sha256, one read), then ``podman
load -i`` reads it (podman decompresses zstd and gzip itself, and reads docker and OCI archives
alike), and the image must then be present under the manifest's identity (podman's image ID is the
config digest). Before the archive is read, Podman's storage and image copy directory must have room
for it (``load_room``). An image podman reports loading under another ID is removed, unless it was there
before. The manifest's tags are applied last. An image already present returns at once. A squashfs
is refused before anything is read. Podman's storage is whatever its own configuration says
(``CONTAINERS_STORAGE_CONF``, the user's storage.conf).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from .check_only import check_archive
from .failures import EngineUnavailable, IntegrityFailure
from .load_places import PODMAN_CLI_COPIES, podman_disk
from .load_room import LoadDisk, check_room
from .manifest import read_manifest
from .text import shown
from .verified_load import refuse_unloadable

TIMEOUT_S = 3 * 3600
LOADED = re.compile(r"Loaded image(?:\(s\))?: (.+)$")


def _podman(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("podman")
    if tool is None:
        msg = "podman is not installed or not on PATH: --runtime podman needs it"
        raise EngineUnavailable(msg)
    try:
        return subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        msg = f"`podman {' '.join(args)}` did not finish within {timeout:g} s"
        raise EngineUnavailable(msg) from None


def _present(image_id: str) -> bool:
    return _podman("image", "exists", image_id).returncode == 0


def _image_ids() -> list[str]:
    done = _podman("images", "--quiet", "--no-trunc")
    ids = (line.strip() for line in done.stdout.splitlines())
    return [i if i.startswith("sha256:") else "sha256:" + i for i in ids if i]  # Python 3.8: no removeprefix


def _load_disk() -> LoadDisk:
    """Where `podman load` writes: its storage and its image copy directory, as `podman info` says."""
    done = _podman("info", "--format", "json")
    try:
        info = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return LoadDisk(unknown=f"`podman info` did not say where Podman stores images ({shown(done.stderr.strip()[-200:])})")
    return podman_disk(info, PODMAN_CLI_COPIES)


def load_into_podman(manifest_path: Path, report: Callable[[str], None] = lambda _: None) -> tuple[str, bool]:
    """(the image ID, whether it was already present); raises an ImportFailure naming the file."""
    manifest = read_manifest(manifest_path)
    refuse_unloadable(manifest, manifest_path, "podman")
    present = _present(manifest.image_id)
    if not present:
        check_room(manifest, frozenset(), _load_disk(), report)  # before the archive is read
        check_archive(manifest_path, report)
        archive = manifest_path.parent / manifest.archive
        before = set(_image_ids())
        report(f"loading {archive.name} ({manifest.size / 1e9:.2f} GB) with podman load")
        done = _podman("load", "--input", str(archive), timeout=TIMEOUT_S)
        if done.returncode != 0:
            msg = f"archive {archive}: podman load failed: {shown(load_failure(done.stderr, manifest.kind), limit=600)}"
            raise EngineUnavailable(msg)
        if not _present(manifest.image_id):
            loaded = [m.group(1).strip() for m in map(LOADED.search, done.stdout.splitlines()) if m]
            for image_id in set(_image_ids()) - before:
                _podman("rmi", "--force", image_id)
            msg = (
                f"archive {archive}: podman loaded {', '.join(map(shown, loaded)) or 'nothing'}, but {manifest_path} "
                f"says {manifest.image_id}: archive and manifest do not belong together; export the image again"
            )
            raise IntegrityFailure(msg)
    for name in manifest.repo_tags:
        tagged = _podman("tag", manifest.image_id, name)
        if tagged.returncode != 0:
            msg = f"podman tag {manifest.image_id} {name} failed: {shown(tagged.stderr.strip()[-300:], limit=400)}"
            raise EngineUnavailable(msg)
    return manifest.image_id, present


def load_failure(stderr: str, kind: str) -> str:
    """Why ``podman load`` failed. It tries every transport in turn and, when none loads, lists each
    one's failure (" * oci: ...", " * docker-archive: ..."): the one of the archive's own kind says
    why (the manifest's kinds are Podman's transport names). Else the end of what it said."""
    for line in stderr.splitlines():
        if line.startswith(f" * {kind}: "):
            return line[3:].strip()[-500:]
    return stderr.strip()[-500:]
