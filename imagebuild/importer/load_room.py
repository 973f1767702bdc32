"""Room on the engine's disk for a load, checked before a byte is sent.

Measured with the engine's data root on a tmpfs of a set size, one 286 MiB layer loaded: Docker
20.10 and Docker 26 on overlay2, and Docker 26's containerd store, each failed with 560 MiB free
and loaded with 575 MiB. A graph-driver engine untars the whole archive it is sent into
``<data root>/tmp`` before it registers a layer, then unpacks each layer into its driver's
directory; the containerd store keeps each blob in its content store and unpacks it into a
snapshot. Either way, at the peak the layers it is sent are on its disk twice (the sample base:
1007 MiB of layer files, 2040 MiB at the peak). A node without that room fails here, at once and
naming itself, instead of minutes into a multi-node job's load with the engine's "no space left on
device".

Checked only where the answer is sure, else said and skipped: an engine on this machine (a unix
socket) whose root this process can see; not Podman (its upload goes to /var/tmp first, which may
be another filesystem); not a filesystem that may compress (zfs, btrfs: the bytes on disk are not
the bytes sent); on the containerd store, only when every root its containerd may have is on one
filesystem (``containerd_root``). An engine whose DOCKER_TMPDIR is on another filesystem than its
data root needs less there than asked: ``IMAGEBUILD_IMPORT_ROOM=off`` skips the check.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .containerd_root import PROC, candidate_roots
from .docker_api import names_images_by_manifest
from .failures import NoRoom

if TYPE_CHECKING:  # the engine interface imports this module; a build needs no manifest
    from .manifest import Manifest

COPIES = 2  # the layers sent are on the engine's disk twice at the peak (see above)
MAY_COMPRESS = frozenset({"zfs", "btrfs", "bcachefs"})
SWITCH = "IMAGEBUILD_IMPORT_ROOM"  # "off": no check


def load_root(info: dict[str, Any], address: str, *, podman: bool = False, proc: Path = PROC) -> tuple[str, str]:
    """(the directory a load of the engine ``/info`` describes writes to, or "";
    why it is not known, or "")."""
    if not address.startswith("unix://"):
        return "", f"the engine at {address} is not on this machine"
    if podman:
        return "", "Podman stages a load in /var/tmp, which may be another filesystem than its storage"
    data_root = str(info.get("DockerRootDir") or "")
    if not data_root.startswith("/"):
        return "", "the engine does not say where its data root is"
    if not names_images_by_manifest(info):
        return data_root, ""
    roots = [root for root in candidate_roots(data_root, proc=proc) if root.is_dir()]
    devices = {_device(root) for root in roots}
    if len(devices) != 1 or None in devices:
        return "", "the containerd store's root is not known for sure"
    return str(roots[0]), ""


def bytes_sent(manifest: Manifest, skip: frozenset[str]) -> int | None:
    """The bytes of the layer files the engine is sent (each file once); None when not known (a
    format version 2 manifest whose engine holds some of the layers)."""
    if manifest.layers and all(layer.size for layer in manifest.layers):
        return sum(size for file, size in {(layer.file, layer.size) for layer in manifest.layers} if file not in skip)
    if not skip and manifest.uncompressed_size:
        return manifest.uncompressed_size  # the whole tar: its layers and a few small files
    return None


def check_room(
    manifest: Manifest,
    skip: frozenset[str],
    where: tuple[str, str],
    report: Callable[[str], None],
    *,
    mountinfo: Path = Path("/proc/self/mountinfo"),
) -> None:
    """NoRoom when the engine's disk (``where``: load_root's answer) has less free than a load of
    this archive needs there; a line to ``report`` when the check is skipped and why."""
    root, unknown = where
    sent = bytes_sent(manifest, skip)
    if os.environ.get(SWITCH) == "off" or sent is None or sent == 0:
        return
    if not root:
        report(f"free space not checked: {unknown}")
        return
    filesystem = filesystem_type(root, mountinfo)
    if filesystem in MAY_COMPRESS:
        report(f"free space not checked: {root} is on {filesystem}, which may compress what it stores")
        return
    try:
        free = free_bytes(root)
    except OSError as e:
        report(f"free space not checked: {root} cannot be read ({e.strerror})")
        return
    needed = COPIES * sent
    if free >= needed:
        return
    held = f"the {len(skip)} layer files it holds left out, " if skip else ""
    msg = (
        f"not enough disk on {socket.gethostname()} for this load: {root} has {_gb(free)} free, and loading "
        f"{manifest.archive} needs {_gb(needed)} there ({held}{_gb(sent)} of layers, held twice while the engine "
        f"loads them); free {_gb(needed - free)} there (remove images this node no longer runs: `docker image ls`, "
        f"`docker image rm`), then import again; nothing was loaded ({SWITCH}=off skips this check)"
    )
    raise NoRoom(msg)


def free_bytes(path: str) -> int:
    """What a root-owned directory's owner may still write (root may use the blocks a filesystem
    keeps for root; any other owner may not)."""
    status = os.statvfs(path)
    blocks = status.f_bfree if Path(path).stat().st_uid == 0 else status.f_bavail
    return blocks * status.f_frsize


def filesystem_type(path: str, mountinfo: Path) -> str:
    """The type of the filesystem ``path`` is on, from the mount table ("" when it cannot be read)."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return ""
    real, best, kind = os.path.realpath(path), "", ""
    for line in lines:
        fields, _, after = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not after:
            continue
        point = _unescape(parts[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the last mount over a point is the one seen
            best, kind = point, after.split()[0]
    return kind


def _unescape(text: str) -> str:
    """The kernel writes a space, tab, newline and backslash in a mount point as octal escapes."""
    for code in ("040", "011", "012", "134"):
        text = text.replace("\\" + code, chr(int(code, 8)))
    return text


def _device(path: Path) -> int | None:
    try:
        return path.stat().st_dev
    except OSError:
        return None


def _gb(count: int) -> str:
    return f"{count / 1e9:.2f} GB"
