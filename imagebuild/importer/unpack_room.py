"""Room on a node's disk for a squashfs unpacked, checked before the runtime unpacks it.

pyxis hands a squashfs to ``enroot create``, which unpacks it with unsquashfs into its data directory
(``ENROOT_DATA_PATH``, often a tmpfs) and checks no room first: a node without it fails minutes into a
multi-node job's start with "No space left on device". Step 1 of a pyxis job runs
``--check-only --unpack-into DIR`` on every node, so such a node fails at once, naming itself.

What an unpacked tree takes, measured with unsquashfs of the sample image's squashfs run as enroot
runs it (``-user-xattrs -d DIR``): its regular files in 4 KiB blocks, each content once (the
manifest's ``unpacked_bytes``: 1,115,271,168) against 1,115,009,024 bytes used on a tmpfs, where
directories and symlinks take no blocks (and sparse files a little less); 1,122,304,000 on ext4,
where its 1,625 directories (the root's too) take 4 KiB or more each and long symlinks 0.4 MB. So a
tmpfs must have the files' bytes free, any other filesystem those and 4 KiB per directory (for the
sample 1,121,927,168: 0.03% under what ext4 used). Blocks larger than 4 KiB (a 64 KiB page) take
more than asked.

Checked only where the answer is sure, else said and skipped, as ``load_room`` does: not on a
filesystem that may compress, not for a manifest written before these sizes were.
``IMAGEBUILD_IMPORT_ROOM=off`` skips it.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable

from .failures import BadInput, NoRoom
from .load_room import MAY_COMPRESS, MOUNTINFO, SWITCH, filesystem_type, free_bytes, gb, room_checked
from .manifest import SQUASHFS, UNPACKED_BLOCK, Manifest
from .text import shown


def check_unpack_room(
    manifest: Manifest, directory: Path, report: Callable[[str], None], *, mountinfo: Path = MOUNTINFO
) -> None:
    """NoRoom when the filesystem ``directory`` (or, not made yet, its nearest parent) is on has less
    free than the manifest's squashfs takes unpacked; a line to ``report`` when not checked, and why."""
    if manifest.kind != SQUASHFS:
        msg = f"--unpack-into: {manifest.archive} is a {manifest.kind}, not a squashfs; leave --unpack-into out"
        raise BadInput(msg)
    if not directory.is_absolute():
        msg = f"--unpack-into '{shown(str(directory), 200)}': give an absolute path (the directory the runtime unpacks into)"
        raise BadInput(msg)
    if not room_checked():
        return
    if not manifest.unpacked_bytes:
        report(f"room to unpack not checked: {manifest.archive}'s manifest predates the sizes; export the image again")
        return
    existing = _existing(directory)
    kind = filesystem_type(str(existing), mountinfo)
    if kind in MAY_COMPRESS:
        report(f"room to unpack not checked: {existing} is on {kind}, which may compress what it stores")
        return
    try:
        free = free_bytes(str(existing))
    except OSError as e:
        report(f"room to unpack not checked: {existing} cannot be read ({e.strerror})")
        return
    directories = 0 if kind == "tmpfs" else manifest.unpacked_directories
    needed = manifest.unpacked_bytes + UNPACKED_BLOCK * directories  # a block each, but on tmpfs
    if free < needed:
        per_directory = f" and {directories:,} directories at 4 KiB each" if directories else ""
        on = f"{existing}, on {kind or 'a filesystem of unknown type'}," if existing != directory else f"{directory} ({kind})"
        msg = (
            f"not enough disk on {socket.gethostname()} to unpack {manifest.archive}: {on} has {gb(free)} free, and "
            f"the image unpacked into {directory} takes {gb(needed)} ({gb(manifest.unpacked_bytes)} of files in 4 KiB "
            f"blocks{per_directory}); free {gb(needed - free)} there, then run again; nothing was unpacked "
            f"({SWITCH}=off skips this check)"
        )
        raise NoRoom(msg)
    report(f"room to unpack: {directory} has {gb(free)} free, {gb(needed)} needed")


def _existing(directory: Path) -> Path:
    """``directory``, or its nearest parent that exists (the runtime makes the rest)."""
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            return candidate
    return Path("/")
