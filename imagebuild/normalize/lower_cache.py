"""What the base's layers hold, kept beside the build records: on the containerd store reading it
means decompressing every base blob, on every normalisation.

The entries a stack of layers holds (each entry's name, metadata and content digest: the lower state
the build's layers are reduced against) are a function of those layers' bytes alone, which the chain
ID of the top one names. On overlay2 they come from the tar-split records, headers only, with each
digest read from the layer's directory when asked; on the containerd image store the blobs hold
nothing but the compressed tars, so every base blob is decompressed, parsed and hashed: about 8 s of
CPU for the sample world's 1 GB base here, some minutes for the real ~30 GB one. So they are kept
once made: gzipped JSON, one list of entries per layer, under ``<spool dir>/lower-state/<chain
ID>.v<FORMAT>.json.gz``, written atomically and read by every later normalisation of an image on
the same base, whichever engine built it. A file that cannot be read as this format is made again.

On overlay2 the same is kept without the digests (``directory_digests``): computing them would read
every file of the base, and the layer's directory gives any one of them when a comparison asks. There
the headers cost about 60 microseconds of CPU per entry to scan from the tar-split records (1.1 s for
the sample base's 18,000 entries; a real base holds hundreds of thousands), against a fraction of
that to read back from here (measured in docs/measured.md).

A rebuild that takes an unchanged build layer from the engine (imagebuild.normalize.reuse) needs two
more facts of the same kind: what the built layer holds (a stack of one, kept by its diffID as
above) and the time each entry of its normalised layer wrote, with that layer's size
(``<diffID>.v<FORMAT>.times.json.gz``). Both are kept by the normalisation that rewrote the layer
(``keep_entries``, ``keep_times``: its rewrite read the one and wrote the other; about 0.13 s for
50,000 entries), or else the first time a rebuild reads them, so a rebuild reads neither layer's
headers. A file read is touched; one untouched for ``KEEP_DAYS``
is removed when a new one is written, so the directory holds what recent builds used.
"""

from __future__ import annotations

import gzip
import json
import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagebuild.normalize.lower import Digest, Meta
from imagebuild.util.files import atomic_file

FORMAT = 1  # bump when Meta or what scan_layer records changes
KEEP_DAYS = 30  # a file no normalisation read for this long is removed
Entries = list[tuple[str, Meta, Digest | None]]


# Layer number -> (file name, size) -> that file's digest, computed when asked (overlay2's directories).
DirectoryDigests = Callable[[int], Callable[[str, int], Digest]]


def cached_entries(
    directory: Path,
    chain: str,
    compute: Callable[[], list[Entries]],
    *,
    directory_digests: DirectoryDigests | None = None,
) -> list[Entries]:
    """Each layer's entries of the stack ``chain`` names, from ``directory`` or made by ``compute`` (and
    kept there). Every digest ``compute`` gives is computed before it is kept; with
    ``directory_digests`` none is kept, and each regular file read back gets its layer's."""
    path = _entries_path(directory, chain, headers=directory_digests is not None)
    try:
        document = json.loads(gzip.decompress(path.read_bytes()))
        os.utime(path)
        if directory_digests is None:
            return [[_entry(item) for item in layer] for layer in document]
        return [_with_digests(layer, directory_digests(number)) for number, layer in enumerate(document)]
    except (OSError, EOFError, ValueError, TypeError, IndexError, AttributeError):
        pass  # absent, damaged or another format: made again
    layers = compute()
    document = [
        [_item(name, meta, None if directory_digests is not None else digest) for name, meta, digest in layer]
        for layer in layers
    ]
    _keep(path, document)
    return layers


def keep_entries(directory: Path, diff_id: str, entries: Entries, *, headers: bool) -> None:
    """Keep what one layer holds, as cached_entries would once it had computed it (a stack of one,
    by its diffID); ``headers``: without the digests (overlay2: its directory gives them). Every
    regular file's digest is needed otherwise: without one, nothing is kept. Written over a file
    already there (the same facts, or a damaged file: made again)."""
    path = _entries_path(directory, diff_id, headers=headers)
    if not headers and any(digest is None and meta.kind in _REGULAR for _, meta, digest in entries):
        return
    _keep(path, [[_item(name, meta, None if headers else digest) for name, meta, digest in entries]])


def _entries_path(directory: Path, chain: str, *, headers: bool) -> Path:
    return directory / f"{chain.removeprefix('sha256:')}.v{FORMAT}{'.headers' if headers else ''}.json.gz"


Times = tuple[list[tuple[str, int]], int]  # (each entry's name and the mtime it wrote, the layer's size)


def cached_times(directory: Path, diff_id: str, compute: Callable[[], Times]) -> Times:
    """The times the layer ``diff_id`` wrote and its size, from ``directory`` or made by ``compute``
    (and kept there)."""
    path = _times_path(directory, diff_id)
    try:
        document = json.loads(gzip.decompress(path.read_bytes()))
        os.utime(path)
        return [(str(name), int(mtime)) for name, mtime in document["times"]], int(document["size"])
    except (OSError, EOFError, ValueError, TypeError, KeyError):
        pass  # absent, damaged or another format: made again
    times, size = compute()
    _keep(path, {"times": times, "size": size})
    return times, size


def keep_times(directory: Path, diff_id: str, times: list[tuple[str, int]], size: int) -> None:
    """Keep the times the layer ``diff_id`` wrote and its size, as cached_times would once computed."""
    _keep(_times_path(directory, diff_id), {"times": times, "size": size})


def _times_path(directory: Path, diff_id: str) -> Path:
    return directory / f"{diff_id.removeprefix('sha256:')}.v{FORMAT}.times.json.gz"


def _keep(path: Path, document: object) -> None:
    """Write ``document`` to ``path`` atomically, then remove what no normalisation used for KEEP_DAYS."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, mode=0o644) as file:
        file.write(gzip.compress(json.dumps(document, separators=(",", ":")).encode(), compresslevel=1, mtime=0))
    stale = time.time() - KEEP_DAYS * 86400
    for old in path.parent.glob("*.json.gz"):
        try:
            if old.stat().st_mtime < stale:
                old.unlink()
        except OSError:
            continue  # another normalisation removed it first


def _item(name: str, meta: Meta, digest: Digest | None) -> list[Any]:
    xattrs = [list(pair) for pair in meta.xattrs]
    return [name, meta.kind.decode("latin-1"), meta.perms, meta.uid, meta.gid, meta.size, meta.mtime, meta.linkname, xattrs,
            digest() if digest is not None else None]  # fmt: skip


def _entry(item: list[Any]) -> tuple[str, Meta, Digest | None]:
    name, kind, perms, uid, gid, size, mtime, linkname, xattrs, digest = item
    meta = Meta(
        kind=str(kind).encode("latin-1"),
        perms=int(perms),
        uid=int(uid),
        gid=int(gid),
        size=int(size),
        mtime=int(mtime),
        linkname=str(linkname),
        xattrs=tuple((str(key), str(value)) for key, value in xattrs),
    )
    return str(name), meta, (None if digest is None else _constant(str(digest)))


def _with_digests(layer: list[list[Any]], content: Callable[[str, int], Digest]) -> Entries:
    entries = []
    for item in layer:
        name, meta, _ = _entry(item)
        entries.append((name, meta, content(name, meta.size) if meta.kind in _REGULAR else None))
    return entries


_REGULAR = frozenset(tarfile.REGULAR_TYPES)


def _constant(value: str) -> Digest:
    return lambda: value
