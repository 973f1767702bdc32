"""The filesystem below a layer: what each path is, so a layer can be reduced to what it really changes.

A graph-driver store (overlay2) commits a layer as the container's upper directory: a directory
copied up because a file in it was created and deleted, a file opened for writing but left as it
was, a directory replaced as a whole (an opaque marker) all appear in it. The containerd image store
commits the difference between the lower and upper filesystems instead. To give one image on both,
the normaliser reduces every build layer to that difference (``imagebuild.normalize.canonical``),
which needs, for each path a layer names, what the layers below it left there.

``LowerState`` is that, applied layer by layer: per path its type, permissions, owners, size, mtime,
link target and xattrs, and a way to its content's digest (computed when a comparison needs it), all
as the engine committed them, and the mtime the normalised layer wrote where that differs.
Memory: one small record per path of the flattened filesystem.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import IO, BinaryIO, Protocol, cast

from imagebuild.util.streams import CHUNK, ENCODING, ERRORS, EntryReads, forget_members

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


def entry_path(name: str) -> str:
    """A tar entry's path, as the filesystem has it: ``./usr/`` and ``usr`` are one path; the root is ``""``."""
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path in (".", "") else path


@dataclass(frozen=True, slots=True, kw_only=True)
class Meta:
    """What the containerd differ compares of a path (plus the mtime it compares for files)."""

    kind: bytes  # the tar type flag
    perms: int  # mode & 0o7777: Go's writer also repeats the file type in the mode field
    uid: int
    gid: int
    size: int
    mtime: int
    linkname: str
    xattrs: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, info: tarfile.TarInfo) -> Meta:
        xattrs = tuple(sorted((k, v) for k, v in info.pax_headers.items() if k.startswith("SCHILY.xattr.")))
        return cls(
            kind=info.type,
            perms=info.mode & 0o7777,
            uid=info.uid,
            gid=info.gid,
            size=info.size if info.isreg() else 0,
            mtime=int(info.mtime),
            linkname=info.linkname,
            xattrs=xattrs,
        )

    @property
    def is_dir(self) -> bool:
        return self.kind == tarfile.DIRTYPE

    def same_but_time(self, other: Meta) -> bool:
        """Everything the differ compares but the mtime, which moves or not within one second by timing."""
        return replace(self, mtime=other.mtime) == other

    def same_dir(self, other: Meta) -> bool:
        """Directories: the differ ignores their mtime (a file created and deleted in one changes it)."""
        return (self.kind, self.perms, self.uid, self.gid, self.xattrs) == (
            other.kind,
            other.perms,
            other.uid,
            other.gid,
            other.xattrs,
        )


Digest = Callable[[], str]  # the sha256 of a regular file's content, computed on demand


@dataclass(slots=True)
class _Node:
    meta: Meta
    digest: Digest | None  # regular files only
    children: set[str] = field(default_factory=set)  # names, for directories
    written_mtime: int | None = None  # the normalised layer's mtime, where it is not meta.mtime


class LowerState:
    """The flattened filesystem the layers applied so far leave: path -> what is there."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, path: str) -> tuple[Meta, Digest | None] | None:
        node = self._nodes.get(path)
        return (node.meta, node.digest) if node is not None else None

    def written_mtime(self, path: str) -> int:
        """The mtime the normalised layers give ``path`` (which must be present)."""
        node = self._nodes[path]
        return node.meta.mtime if node.written_mtime is None else node.written_mtime

    def children(self, path: str) -> set[str]:
        node = self._nodes.get(path)
        return set(node.children) if node is not None else set()

    def apply(
        self, entries: Iterable[tuple[str, Meta, Digest | None]], written_mtimes: Mapping[str, int] | None = None
    ) -> None:
        """Apply one layer, as overlay semantics do: whiteouts and opaque markers first, then its entries.

        ``entries`` are (entry name, Meta, content digest) in the layer's order; ``written_mtimes``
        (by path) the mtimes the normalised layer wrote: a path it left out keeps the one below.
        """
        written = written_mtimes or {}
        layer = [(entry_path(name), meta, digest) for name, meta, digest in entries]
        for path, _, _ in layer:
            parent, base = posixpath.split(path)
            if base == OPAQUE:
                for child in self.children(parent):
                    self._remove(posixpath.join(parent, child) if parent else child)
            elif base.startswith(WHITEOUT):
                self._remove(posixpath.join(parent, base[len(WHITEOUT) :]) if parent else base[len(WHITEOUT) :])
        for path, meta, digest in layer:
            if posixpath.basename(path).startswith(WHITEOUT) or not path:
                continue
            self._add(path, meta, digest, written.get(path))

    def _add(self, path: str, meta: Meta, digest: Digest | None, written_mtime: int | None = None) -> None:
        old = self._nodes.get(path)
        if old is not None and not (old.meta.is_dir and meta.is_dir):
            self._remove(path)  # a file replaced by a directory (or back) loses what was under it
            old = None
        if old is not None:
            if written_mtime is None:  # left out of the normalised layer: what is below shows through
                written_mtime = old.meta.mtime if old.written_mtime is None else old.written_mtime
            old.meta, old.digest, old.written_mtime = meta, digest, written_mtime  # a directory keeps its children
        else:
            self._nodes[path] = _Node(meta=meta, digest=digest, written_mtime=written_mtime)
        parent, name = posixpath.split(path)
        if parent and parent not in self._nodes:  # a layer may name a file without its directory
            self._nodes[parent] = _Node(meta=_IMPLIED_DIR, digest=None)
        if parent:
            self._nodes[parent].children.add(name)

    def _remove(self, path: str) -> None:
        node = self._nodes.pop(path, None)
        if node is None:
            return
        for child in node.children:
            self._remove(f"{path}/{child}")
        parent, name = posixpath.split(path)
        if parent in self._nodes:
            self._nodes[parent].children.discard(name)


_IMPLIED_DIR = Meta(kind=tarfile.DIRTYPE, perms=0o755, uid=0, gid=0, size=0, mtime=0, linkname="", xattrs=())


def lower_state(layers: Iterable[list[tuple[str, Meta, Digest | None]]]) -> LowerState:
    """The filesystem ``layers`` leave, applied in order."""
    lower = LowerState()
    for entries in layers:
        lower.apply(entries)
    return lower


def file_digest(read: Callable[[], Iterator[bytes]]) -> Digest:
    """A digest computed once, on first use, from the content ``read`` yields."""
    cached: list[str] = []

    def digest() -> str:
        if not cached:
            h = hashlib.sha256()
            for chunk in read():
                h.update(chunk)
            cached.append(h.hexdigest())
        return cached[0]

    return digest


def scan_layer(
    source: BinaryIO, *, digests: bool, content: Callable[[str, int], Digest] | None = None
) -> list[tuple[str, Meta, Digest | None]]:
    """Every entry of a layer tar; with ``digests``, each regular file's content is hashed as it passes.

    Without, ``content(name, size)`` gives each regular file a digest computed when first asked for
    (from the layer's directory: the header scan then reads no file at all).
    """
    out: list[tuple[str, Meta, Digest | None]] = []
    reads = EntryReads(source)
    with reads.tar() as tar:
        while (info := tar.next()) is not None:
            digest: Digest | None = None
            if digests and info.isreg():
                data = reads.extractfile(info)
                assert data is not None
                h = hashlib.sha256()
                while chunk := data.read(CHUNK):
                    h.update(chunk)
                value = h.hexdigest()
                digest = lambda value=value: value  # noqa: E731 - a constant getter
            elif content is not None and info.isreg():
                digest = content(info.name, info.size)
            out.append((info.name, Meta.of(info), digest))
            forget_members(tar)
    return out


class Seekable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...
    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def tell(self) -> int: ...


def scan_headers(source: Seekable, *, content: Callable[[str, int], Digest] | None = None) -> list[tuple[str, Meta, Digest | None]]:
    """Every entry of a layer tar, read with tarfile's seeking mode: past each file's content, not
    through it (``source``: imagebuild.engine.tar_split.HeaderFile, which holds no content). Each
    regular file's digest as scan_layer's ``content`` gives it."""
    out: list[tuple[str, Meta, Digest | None]] = []
    with tarfile.open(fileobj=cast("IO[bytes]", source), mode="r:", encoding=ENCODING, errors=ERRORS) as tar:
        while (info := tar.next()) is not None:
            digest = content(info.name, info.size) if content is not None and info.isreg() else None
            out.append((info.name, Meta.of(info), digest))
            forget_members(tar)
    return out
