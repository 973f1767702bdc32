"""Room on the engine's disk for a load, checked before a byte of the archive is read.

A node without that room then fails at once, naming itself, instead of minutes into a multi-node
job's load with the engine's "no space left on device". Where each engine writes a load, and how
many copies of the layers it holds there at its peak, is ``load_places``'s (measured there). The
places on one filesystem add up; each filesystem must have its sum free.

Checked only where the answer is sure, else said and skipped: an engine on this machine whose
directories this process can see; not a filesystem that may compress (zfs, btrfs: the bytes on disk
are not the bytes sent); not a version 2 manifest (no layer sizes) when the engine holds some of the
layers. A Docker engine's DOCKER_TMPDIR, where its copy goes, is read from the dockerd
(``dockerd_process``); one this process cannot read (a dockerd of another user) is asked of the data
root, more than it needs when DOCKER_TMPDIR is elsewhere: ``IMAGEBUILD_IMPORT_ROOM=off`` skips the check.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .failures import BadInput, NoRoom
from .text import shown

if TYPE_CHECKING:  # the engine interface imports this module; a build needs no manifest
    from .manifest import Manifest

MAY_COMPRESS = frozenset({"zfs", "btrfs", "bcachefs"})
SWITCH = "IMAGEBUILD_IMPORT_ROOM"  # "off": no check
MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class Place:
    """A directory a load writes to, and the copies of the layers it is sent it holds there at the peak."""

    directory: str
    copies: int
    what: str  # what the copies are, for the message
    temporary: bool = False  # only the load's own copies: removing images frees nothing there
    # One of the copies is the containerd store's content store. When it holds the image's content
    # already (an image loaded but not unpacked), a load passes each blob through its ingest directory
    # and drops it before it unpacks any: the unpack's copy is the peak (measured on Docker 28.5.2:
    # 1.10 GB more at the peak for the sample image's 1.09 GB of layers, its largest 1.06 GB).
    content_store: bool = False


@dataclass(frozen=True)
class LoadDisk:
    """Where an engine writes a load (``load_places``); none, and why, where that is not known."""

    places: tuple[Place, ...] = ()
    unknown: str = ""


def room_checked() -> bool:
    """Whether ``IMAGEBUILD_IMPORT_ROOM`` leaves the check on (unset or "on"; "off" skips it). Read
    before the engine is asked anything: any other value is bad input, never a quiet default."""
    value = os.environ.get(SWITCH, "on")
    if value not in ("on", "off"):
        msg = f"{SWITCH}='{shown(value, 80)}': give off (skip the free-space check before a load) or on, or leave it unset"
        raise BadInput(msg)
    return value == "on"


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
    disk: LoadDisk,
    report: Callable[[str], None],
    *,
    content_held: bool = False,
    mountinfo: Path = MOUNTINFO,
) -> None:
    """NoRoom when a filesystem the load writes to has less free than the load needs there; a line
    to ``report`` when the check is skipped, and why. ``content_held``: the engine's content store
    holds every layer of the image already (``Place.content_store``)."""
    sent = bytes_sent(manifest, skip)
    if not room_checked() or not sent:
        return
    if not disk.places:
        report(f"free space not checked: {disk.unknown}")
        return
    filesystems: dict[int, tuple[int, list[Place]]] = {}  # device -> (its free bytes, the places on it)
    for place in disk.places:
        kind = filesystem_type(place.directory, mountinfo)
        if kind in MAY_COMPRESS:
            report(f"free space not checked: {place.directory} is on {kind}, which may compress what it stores")
            return
        try:
            device, free = Path(place.directory).stat().st_dev, free_bytes(place.directory)
        except OSError as e:
            report(f"free space not checked: {place.directory} cannot be read ({e.strerror})")
            return
        filesystems.setdefault(device, (free, []))[1].append(place)
    for free, places in filesystems.values():
        needed = sum(_copies(place, content_held) for place in places) * sent
        if free < needed:
            raise NoRoom(_no_room(manifest, skip, places, free=free, needed=needed, sent=sent, content_held=content_held))


def _copies(place: Place, content_held: bool) -> int:
    return place.copies - 1 if content_held and place.content_store else place.copies


def _no_room(
    manifest: Manifest, skip: frozenset[str], places: list[Place], *, free: int, needed: int, sent: int, content_held: bool
) -> str:
    directories = " and ".join(dict.fromkeys(place.directory for place in places))
    held = f", the {len(skip)} layer files the engine holds left out" if skip else ""
    copies = "; ".join(
        f"{_times(_copies(p, content_held))} in {p.directory}: "
        + ("them unpacked (the content store holds them already)" if content_held and p.content_store else p.what)
        for p in places
    )
    how = (
        "the load's temporary copies alone go there: make room on that disk"
        if all(place.temporary for place in places)
        else "remove images this node no longer runs"
    )
    return (
        f"not enough disk on {socket.gethostname()} for this load: {directories} {'have' if ' and ' in directories else 'has'} "
        f"{gb(free)} free, and loading {manifest.archive} needs {gb(needed)} there ({gb(sent)} of layers{held}, "
        f"{copies}); free {gb(needed - free)} there ({how}), then import "
        f"again; nothing was loaded ({SWITCH}=off skips this check)"
    )


def _times(copies: int) -> str:
    return {1: "once", 2: "twice"}.get(copies, f"{copies} times")


def free_bytes(path: str) -> int:
    """What may still be written there, as `df` shows it (Avail): the blocks a filesystem reserves
    (ext4: 5% by default) are not counted, even for root. They keep a node's own services going when
    its disk fills, and a kernel may keep them from root too: this machine's ext4 is mounted
    ``resv_strict``, and root wrote 77 MiB on a test filesystem with 81.7 MB available and 190.8 MB
    free (150 MiB without that option)."""
    status = os.statvfs(path)
    return status.f_bavail * status.f_frsize


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


def gb(count: int) -> str:
    """Bytes as the room checks' messages show them."""
    return f"{count / 1e9:.2f} GB"
