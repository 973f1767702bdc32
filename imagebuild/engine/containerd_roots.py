"""Where a Docker engine's containerd keeps its content store (the blobs containerd_store reads).

The roots it may have, in the order they are looked in, come from
``imagebuild.importer.containerd_root`` (shared with the importer's free-space check); the first
whose content store holds the blob an image ID names is read. A blob is named by the sha256 of its
bytes and checked against it when read (the manifest and config here, each layer as it streams), so
another containerd's store can only give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from imagebuild.importer.containerd_root import candidate_roots
from imagebuild.importer.processes import PROC

CONTENT = Path("io.containerd.content.v1.content/blobs/sha256")


def content_dirs(data_root: str, *, proc: Path = PROC) -> Iterator[Path]:
    """Each place the engine's blobs may be, most likely first, each once."""
    for root in candidate_roots(data_root, proc=proc):  # /proc read only if needed
        yield root / CONTENT


def blob_dir(data_root: str, digest: str, *, proc: Path = PROC) -> tuple[Path | None, list[str]]:
    """(the content store holding the blob ``digest`` names, or None; every place looked, and why
    it could not be looked in: a root only its owner may read, say)."""
    looked: list[str] = []
    for directory in content_dirs(data_root, proc=proc):
        try:
            if (directory / digest.removeprefix("sha256:")).is_file():
                return directory, looked
            looked.append(str(directory))
        except OSError as e:  # is_file() passes on "no such file", not "permission denied"
            looked.append(f"{directory}: {e.strerror}")
    return None, looked
