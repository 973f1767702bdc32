"""An image's root filesystem, flattened: its layers applied in order, as one tar in a fixed order.

What a container sees, as overlayfs builds it from the layers: a later layer's entry replaces an
earlier one's (a directory over a directory keeps the lower one's children, anything else over a
directory removes them); an OCI whiteout ``.wh.NAME`` removes NAME (and all under it) from the layers
below, ``.wh..wh..opq`` every entry below in its directory; whiteouts act on lower layers only, never
on entries of their own layer. Hard links are kept: the entries that share one file's content (the
file and every hard link to it, whichever layer made them) become one file and links to it. Symlinks
are kept as written.

The output is deterministic: entries sorted by path, parents first; mtime 0; no owner names; of the
PAX headers only extended attributes (file capabilities) are kept. ``extra`` files (the runtime files
of ``runtime_files``) replace or add entries, their missing parents (and ``directories``, such as the
working directory a read-only squashfs must already have) added as 0755 directories.
Memory is one header per entry (the content is read from the spooled layer tars by offset, or, for
a layer read from overlay2's layer store, ``StoreLayer``, from the layer's directory by name: its
headers come from its tar-split record, read once, which checks the whole layer against its diffID
on the way; nothing is spooled).

What the tree takes unpacked is counted on the way (``Flattened``): its regular files in 4 KiB
blocks, each content once, and its directories: the room ``enroot create`` needs to unpack the
squashfs (``importer.unpack_room``, where it is measured).
"""

from __future__ import annotations

import contextlib
import posixpath
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from imagebuild.distribute import fixed_tar
from imagebuild.importer.manifest import UNPACKED_BLOCK
from imagebuild.util.streams import CHUNK, forget_members, tar_padding

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
KEPT_PAX = "SCHILY.xattr."  # extended attributes; times, names and sizes are set here


@dataclass(frozen=True)
class Flattened:
    """What ``flatten_layers`` wrote: its entries, and the room the tree takes unpacked."""

    entries: int
    file_bytes: int  # the regular files' sizes, each rounded up to UNPACKED_BLOCK, a content shared by hard links once
    directories: int


class RootfsError(Exception):
    """A layer cannot be flattened (the message names the layer and entry)."""


class StoreLayer(Protocol):
    """A layer in an engine's store (imagebuild.distribute.spooled_image.StreamedLayer); its methods
    raise the store's own error when it does not give the layer."""

    @property
    def diff_id(self) -> str: ...
    def headers(self) -> contextlib.AbstractContextManager[IO[bytes]]:
        """Its tar with the files' content left out, for tarfile's seeking mode; the whole tar checked
        against its diffID on the way, the check completed when the block ends."""
    def files(self) -> contextlib.AbstractContextManager[Callable[[str, int], Iterator[bytes]]]:
        """A regular file's content by its entry's name and size, from elsewhere than the tar."""


Content = Callable[[tarfile.TarInfo], Iterator[bytes]]  # a layer's regular file's content


@dataclass(kw_only=True)
class _Entry:
    info: tarfile.TarInfo
    source: tuple[int, int] | None = None  # (layer, data offset) of a regular file's content
    data: bytes | None = None  # an extra file's content


@dataclass(kw_only=True)
class _Tree:
    entries: dict[str, _Entry] = field(default_factory=dict)
    children: dict[str, set[str]] = field(default_factory=dict)

    def remove(self, path: str) -> None:
        """``path`` and everything under it."""
        for child in self.children.pop(path, set()):
            self.remove(child)
        if self.entries.pop(path, None) is not None:
            self.children.get(posixpath.dirname(path), set()).discard(path)

    def clear_children(self, path: str) -> None:
        for child in list(self.children.get(path, ())):
            self.remove(child)

    def put(self, path: str, entry: _Entry) -> None:
        old = self.entries.get(path)
        if old is not None and not (old.info.isdir() and entry.info.isdir()):
            self.remove(path)  # a file over a directory hides what was in it
        self.entries[path] = entry
        if path:
            self.children.setdefault(posixpath.dirname(path), set()).add(path)


def _clean(name: str) -> str:
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


def _layer_entries(tar: tarfile.TarFile, index: int, what: str) -> Iterator[tuple[str, tarfile.TarInfo]]:
    for info in tar:
        path = _clean(info.name)
        if ".." in path.split("/"):
            msg = f"{what}: entry {info.name!r} leaves the root"
            raise RootfsError(msg)
        yield path, info
        forget_members(tar)


def _apply_layer(tree: _Tree, tar: tarfile.TarFile, index: int, what: str) -> None:
    """One layer: its whiteouts act on the tree as it was below it, then its entries are put."""
    put: list[tuple[str, _Entry]] = []
    for path, info in _layer_entries(tar, index, what):
        base, parent = posixpath.basename(path), posixpath.dirname(path)
        if base == OPAQUE:
            tree.clear_children(parent)
        elif base.startswith(WHITEOUT):
            tree.remove(posixpath.join(parent, base.removeprefix(WHITEOUT)))
        elif info.islnk():
            put.append((path, _Entry(info=info)))  # resolved below, once this layer's files are known
        else:
            put.append((path, _Entry(info=info, source=(index, info.offset_data) if info.isreg() else None)))
    for path, entry in put:
        if not entry.info.islnk():
            tree.put(path, entry)
            continue
        target = tree.entries.get(_clean(entry.info.linkname))
        if target is None or not (target.info.isreg() or target.data is not None):
            msg = f"{what}: hard link {path!r} names {entry.info.linkname!r}, which is not a file there"
            raise RootfsError(msg)
        tree.put(path, _Entry(info=target.info, source=target.source, data=target.data))  # the same content


def _make_directories(tree: _Tree, path: str) -> None:
    """``path`` and its parents, as 0755 directories where the tree has nothing."""
    missing: list[str] = []
    while path and path not in tree.entries:
        missing.append(path)
        path = posixpath.dirname(path)
    for name in reversed(missing):
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tree.put(name, _Entry(info=info))


def _add_extra(tree: _Tree, extra: Mapping[str, bytes], directories: Sequence[str]) -> None:
    for directory in directories:
        _make_directories(tree, _clean(directory))
    for name, data in sorted(extra.items()):
        path = _clean(name)
        _make_directories(tree, posixpath.dirname(path))
        info = tarfile.TarInfo(path)
        info.size, info.mode = len(data), 0o755 if path == "etc/rc" else 0o644
        tree.put(path, _Entry(info=info, data=data))


def _sort_key(path: str) -> list[str]:
    return path.split("/")


def flatten_layers(
    layers: Sequence[Path | StoreLayer],
    out: fixed_tar.Sink,
    *,
    extra: Mapping[str, bytes] | None = None,
    directories: Sequence[str] = (),
) -> Flattened:
    """Write the flattened root of ``layers`` (lowest first: spooled tars, or layers in a store) to
    ``out``; say what it wrote.

    ``extra`` files are added (replacing what the layers have there), ``directories`` made if missing."""
    tree = _Tree()
    for index, layer in enumerate(layers):
        what = f"layer {index} ({layer.name if isinstance(layer, Path) else layer.diff_id[:19]})"
        try:
            if isinstance(layer, Path):
                with tarfile.open(layer, mode="r:") as tar:
                    _apply_layer(tree, tar, index, what)
            else:
                _apply_stored(tree, layer, index, what)
        except tarfile.TarError as e:
            msg = f"{what}: not a tar archive ({e})"
            raise RootfsError(msg) from e
    _add_extra(tree, extra or {}, directories)
    with contextlib.ExitStack() as opened:
        contents = [_content_of(layer, opened) for layer in layers]
        return _write(tree, contents, out)


def _apply_stored(tree: _Tree, layer: StoreLayer, index: int, what: str) -> None:
    """A layer from the store: its headers, and the whole layer checked, in one pass."""
    with layer.headers() as headers, tarfile.open(fileobj=headers, mode="r:") as tar:
        _apply_layer(tree, tar, index, what)


def _content_of(layer: Path | StoreLayer, opened: contextlib.ExitStack) -> Content:
    if not isinstance(layer, Path):
        content = opened.enter_context(layer.files())
        return lambda info: content(info.name, info.size)
    source = opened.enter_context(layer.open("rb"))

    def at_offset(info: tarfile.TarInfo) -> Iterator[bytes]:
        source.seek(info.offset_data)
        left = info.size
        while left and (chunk := source.read(min(CHUNK, left))):
            left -= len(chunk)
            yield chunk

    return at_offset


def _write(tree: _Tree, contents: Sequence[Content], out: fixed_tar.Sink) -> Flattened:
    file_bytes, directories = 0, 0 if "" in tree.entries else 1  # the root: unsquashfs makes it if the tar has none
    first_of: dict[tuple[int, int] | int, str] = {}  # a content's first path in the output: later ones link to it
    for path in sorted(tree.entries, key=_sort_key):
        entry = tree.entries[path]
        info, name = entry.info, path or "."
        pax = {k: v for k, v in info.pax_headers.items() if k.startswith(KEPT_PAX)}

        def head(kind: bytes, *, size: int = 0, linkname: str = "", info: tarfile.TarInfo = info, name: str = name,
                 pax: dict[str, str] = pax) -> bytes:  # fmt: skip
            return fixed_tar.header(
                name + ("/" if kind == tarfile.DIRTYPE else ""), kind=kind, size=size, mode=info.mode & 0o7777,
                uid=info.uid, gid=info.gid, linkname=linkname, devmajor=info.devmajor, devminor=info.devminor, pax=pax,
            )  # fmt: skip

        if info.isdir():
            directories += 1
            out.write(head(tarfile.DIRTYPE))
        elif info.issym():
            out.write(head(tarfile.SYMTYPE, linkname=info.linkname))
        elif info.isreg() or entry.data is not None:
            key: tuple[int, int] | int = entry.source if entry.source is not None else id(entry.data)
            if key in first_of:
                out.write(head(tarfile.LNKTYPE, linkname=first_of[key]))
            else:
                first_of[key] = name
                size = len(entry.data) if entry.data is not None else info.size
                file_bytes += -(-size // UNPACKED_BLOCK) * UNPACKED_BLOCK
                out.write(head(tarfile.REGTYPE, size=size))
                _content(out, name, entry, contents)
        else:  # devices and FIFOs, as the layer has them
            out.write(head(info.type))
    out.write(fixed_tar.TAR_END)
    return Flattened(entries=len(tree.entries), file_bytes=file_bytes, directories=directories)


def _content(out: fixed_tar.Sink, name: str, entry: _Entry, contents: Sequence[Content]) -> None:
    if entry.data is not None:
        out.write(entry.data)
        out.write(tar_padding(len(entry.data)))
        return
    assert entry.source is not None  # a layer's regular file
    layer, left = entry.source[0], entry.info.size
    for chunk in contents[layer](entry.info):
        out.write(chunk)
        left -= len(chunk)
    if left:
        msg = f"layer {layer}: {name} ends early"
        raise RootfsError(msg)
    out.write(tar_padding(entry.info.size))
