"""What normalisation reads of a layer in the engine's store, whichever store keeps it.

* overlay2 (a StoredLayer): the tar rebuilt from the tar-split record and the layer's directory; its
  headers alone from the record (read past every file's content, which is not there); a file's
  digest read from the directory only when a comparison asks for it.
* the containerd image store (a BlobLayer): the tar decompressed from the layer's blob. There is no
  record of the headers apart from the tar, so reading them reads every byte: the scan for the
  lower state hashes each file as it passes (the save path does the same) and the whole tar against
  its diffID.

A layer whose bytes cannot be read or are not those of its diffID raises one of READ_ERRORS (the
caller reads ``docker save`` instead); one the reader cannot parse raises the reader's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from imagebuild.engine.content_blobs import BlobError, checked_read
from imagebuild.engine.content_blobs import layer_tar as blob_tar
from imagebuild.engine.interface import BlobLayer, StoredLayer
from imagebuild.engine.tar_split import HeaderFile, TarSplitError, file_content, layer_chunks
from imagebuild.normalize.lower import Digest, Meta, file_digest, scan_headers, scan_layer

Entries = list[tuple[str, Meta, Digest | None]]
READ_ERRORS = (TarSplitError, BlobError)  # the store's files cannot give the layer


def layer_tar(layer: StoredLayer | BlobLayer) -> Iterator[bytes]:
    """The layer's tar, as ``docker save`` would give it (unchecked: the caller hashes it)."""
    if isinstance(layer, BlobLayer):
        return blob_tar(layer)
    return layer_chunks(layer.tar_split, layer.files)


def content_digests(layer: StoredLayer | BlobLayer) -> Callable[[str, int], Digest] | None:
    """A regular file's digest from elsewhere than the tar (overlay2's directory), when first asked;
    None where the tar is all there is: the reader then hashes each file as it passes."""
    if isinstance(layer, BlobLayer):
        return None
    return directory_digests(layer.files)


def directory_digests(files: Path) -> Callable[[str, int], Digest]:
    """A regular file's content digest from the layer's directory, computed when first asked for."""

    def content(name: str, size: int) -> Digest:
        return file_digest(lambda: file_content(files, name, size))

    return content


def layer_entries(layer: StoredLayer | BlobLayer) -> Entries:
    """What the layer holds, for the lower state: every entry with its metadata and content digest."""
    if isinstance(layer, StoredLayer):
        return record_entries(layer.tar_split, content=directory_digests(layer.files))
    return checked_read(layer, lambda tar: scan_layer(tar, digests=True))  # BlobError when not the layer


def record_entries(tar_split: Path, *, content: Callable[[str, int], Digest] | None = None) -> Entries:
    """The entries an overlay2 layer's tar-split record lists: its headers alone, no file read."""
    headers = HeaderFile(tar_split)
    try:
        return scan_headers(headers, content=content)
    finally:
        headers.close()
