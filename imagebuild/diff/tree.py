"""The file tree of an image: each layer indexed from its tar, then the layers flattened.

An entry records what makes a file that file: type, mode, owner, size,
content sha256, link target, device numbers and xattrs, plus its mtime (only
compared when asked). Whiteouts (``.wh.NAME``: NAME is deleted) and opaque
markers (``.wh..wh..opq``: everything below the directory in lower layers is
deleted) are kept apart from the entries and applied when flattening, as the
OCI image spec says. Content is hashed while the layer streams by; only the
index stays in memory.
"""

from __future__ import annotations

import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import IO, BinaryIO

from imagebuild.util.streams import CHUNK, EntryReads, HashingReader, forget_members

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
XATTR_PREFIX = "SCHILY.xattr."


class Kind(StrEnum):
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"
    CHAR = "char device"
    BLOCK = "block device"
    FIFO = "fifo"


_KINDS = {
    tarfile.REGTYPE: Kind.FILE,
    tarfile.AREGTYPE: Kind.FILE,
    tarfile.CONTTYPE: Kind.FILE,
    tarfile.DIRTYPE: Kind.DIR,
    tarfile.SYMTYPE: Kind.SYMLINK,
    tarfile.LNKTYPE: Kind.HARDLINK,
    tarfile.CHRTYPE: Kind.CHAR,
    tarfile.BLKTYPE: Kind.BLOCK,
    tarfile.FIFOTYPE: Kind.FIFO,
}

# The fields compared, in the order a change lists them; mtime only with --mtime.
FIELDS = ("kind", "mode", "uid", "gid", "size", "sha256", "link", "device", "xattrs")


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    path: str  # relative, no leading "/" or "./"
    kind: Kind
    mode: int
    uid: int
    gid: int
    size: int
    sha256: str  # regular files (and hard links to files of the same layer); "" otherwise
    link: str  # symlink or hard link target
    device: str  # "major,minor" for devices
    xattrs: tuple[tuple[str, str], ...]
    mtime: int

    def value(self, name: str) -> object:
        """A field as a diff shows it (modes in octal)."""
        if name == "mode":
            return oct(self.mode)
        value: object = getattr(self, name)
        return value


@dataclass(frozen=True, kw_only=True)
class LayerIndex:
    diff_id: str
    size: int
    entries: dict[str, Entry] = field(repr=False)
    whiteouts: frozenset[str]  # paths this layer deletes from the layers below
    opaque: frozenset[str]  # directories whose lower contents this layer hides


def clean_path(name: str) -> str:
    path = posixpath.normpath("/" + name).lstrip("/")
    return path or "."


def _entry(info: tarfile.TarInfo, path: str, sha256: str) -> Entry:
    kind = _KINDS.get(info.type, Kind.FILE)
    return Entry(
        path=path,
        kind=kind,
        # Permission bits (with setuid, setgid, sticky): Go's tar writer also puts the file
        # type's bits here (0o40755 for a directory), Python's does not; the type is ``kind``.
        mode=info.mode & 0o7777,
        uid=info.uid,
        gid=info.gid,
        size=info.size if kind is Kind.FILE else 0,
        sha256=sha256,
        link=clean_path(info.linkname) if kind is Kind.HARDLINK else info.linkname,
        device=f"{info.devmajor},{info.devminor}" if kind in (Kind.CHAR, Kind.BLOCK) else "",
        xattrs=tuple(
            sorted(
                (k.removeprefix(XATTR_PREFIX), v)
                for k, v in info.pax_headers.items()
                if k.startswith(XATTR_PREFIX)
            )
        ),
        mtime=int(info.mtime),
    )


def _content_sha256(data: IO[bytes] | None) -> str:
    import hashlib

    digest = hashlib.sha256()
    if data is not None:
        while chunk := data.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def index_layer(source: BinaryIO) -> LayerIndex:
    """Index a layer tar read from ``source`` to its end; its diffID is hashed on the way."""
    reader = HashingReader(source)
    entries: dict[str, Entry] = {}
    whiteouts: set[str] = set()
    opaque: set[str] = set()
    reads = EntryReads(reader)
    with reads.tar() as tar:
        while (info := tar.next()) is not None:
            path = clean_path(info.name)
            parent, base = posixpath.split(path)
            if base == OPAQUE:
                opaque.add(parent or ".")
            elif base.startswith(WHITEOUT):
                whiteouts.add(posixpath.join(parent, base.removeprefix(WHITEOUT)))
            elif info.islnk():
                target = entries.get(clean_path(info.linkname))
                entries[path] = _entry(info, path, target.sha256 if target else "")
            else:
                data = reads.extractfile(info) if info.isreg() else None
                entries[path] = _entry(info, path, _content_sha256(data) if info.isreg() else "")
            forget_members(tar)
    reader.drain()
    return LayerIndex(
        diff_id=reader.digest,
        size=reader.size,
        entries=entries,
        whiteouts=frozenset(whiteouts),
        opaque=frozenset(opaque),
    )


class Tree:
    """A file system built up layer by layer; deleting a directory deletes what is below it."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._children: dict[str, set[str]] = {}

    def _delete_below(self, path: str) -> None:
        for child in self._children.pop(path, set()):
            self._delete_below(child)
            self.entries.pop(child, None)

    def delete(self, path: str) -> None:
        self._delete_below(path)
        if self.entries.pop(path, None) is not None:
            self._children.get(posixpath.dirname(path) or ".", set()).discard(path)

    def add(self, entry: Entry) -> None:
        old = self.entries.get(entry.path)
        if old is not None and old.kind is Kind.DIR and entry.kind is not Kind.DIR:
            self._delete_below(entry.path)  # a file over a directory hides what was in it
        self.entries[entry.path] = entry
        if entry.path != ".":
            self._children.setdefault(posixpath.dirname(entry.path) or ".", set()).add(entry.path)

    def apply(self, layer: LayerIndex) -> None:
        for directory in layer.opaque:
            self._delete_below(directory)
        for path in layer.whiteouts:
            self.delete(path)
        for entry in layer.entries.values():
            self.add(entry)


def flatten(layers: Iterable[LayerIndex]) -> dict[str, Entry]:
    tree = Tree()
    for layer in layers:
        tree.apply(layer)
    return tree.entries


def walk_dirs(paths: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(directory, names) for ``paths`` grouped by their directory, both sorted."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        parent, name = posixpath.split(path)
        groups.setdefault(parent, []).append(name)
    for parent in sorted(groups):
        yield parent, sorted(groups[parent])
