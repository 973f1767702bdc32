"""``--check-only``: the archive is the manifest's (size, sha256; a squashfs's superblock), nothing loaded.

What step 1 of a pyxis or Charliecloud job runs on every node: those runtimes run the squashfs where it
lies, so there is no load to hash on the way; the file is read once here instead. Any kind of archive
can be checked so; a squashfs also has its superblock read (its magic, and the size it says it uses
within the file), so a file of the right bytes that is no squashfs is never handed to a runtime.
"""

from __future__ import annotations

import hashlib
import struct
import time
from pathlib import Path
from typing import Callable

from .failures import IntegrityFailure
from .load_stream import CHUNK_SIZE
from .manifest import SQUASHFS, Manifest, read_manifest
from .verified_load import PROGRESS_EVERY_S, archive_of

SQUASHFS_MAGIC = b"hsqs"
BYTES_USED = struct.Struct("<Q")  # the superblock's bytes_used, at offset 40
SUPERBLOCK = 96


def check_archive(manifest_path: Path, report: Callable[[str], None] = lambda _: None) -> Manifest:
    """Raise BadInput or IntegrityFailure (naming the file) unless the archive is the manifest's."""
    manifest = read_manifest(manifest_path)
    archive, again = archive_of(manifest, manifest_path)
    digest = hashlib.sha256()
    done, next_report = 0, time.monotonic() + PROGRESS_EVERY_S
    with archive.open("rb") as file:
        head = file.read(SUPERBLOCK)
        digest.update(head)
        done += len(head)
        for chunk in iter(lambda: file.read(CHUNK_SIZE), b""):
            digest.update(chunk)
            done += len(chunk)
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + PROGRESS_EVERY_S
                report(f"{archive.name}: {done / 1e9:.1f} of {manifest.size / 1e9:.1f} GB checked")
    if digest.hexdigest() != manifest.sha256:
        msg = f"archive {archive}: sha256 mismatch (expected {manifest.sha256}, got {digest.hexdigest()}); {again}"
        raise IntegrityFailure(msg)
    if manifest.kind == SQUASHFS and (
        head[:4] != SQUASHFS_MAGIC or len(head) < 48 or BYTES_USED.unpack_from(head, 40)[0] > manifest.size
    ):
        msg = f"archive {archive}: not a complete squashfs (its superblock is missing or says more bytes than the file has); {again}"
        raise IntegrityFailure(msg)
    return manifest
