"""A build layer reduced to what it changes in the filesystem below it: the same on every image store.

Measured on the sample image, a graph-driver store (overlay2, Docker 20.10 and 26) and the containerd
image store (Docker 26) commit the same step as different layers; reduced by these rules, every
build layer of the one equals the other's, entry for entry:

* a directory whose type, permissions, owners and xattrs are those below it is left out (the
  differ ignores a directory's mtime), unless something kept is inside it: then it is kept as the
  parent it is;
* any other entry whose type, permissions, owners, size, link target, xattrs and content are those
  below it is left out (a file copied up by opening it for writing, say, or written again with the
  same bytes), whatever its mtime: whether that moved depends on the second the write fell in;
* a directory kept only as the parent of something kept gets the step's epoch when that something
  is a name the step added to it or removed from it (an entry new to it, a whiteout), and otherwise
  the time the normalised layer below gave it. Its raw time decides nothing: it depends on the path
  the layers took into the cache (a context COPY by the docker CLI or by imagebuild), and at one
  second's resolution a step that touches a directory in the second the step before touched it
  leaves the time unchanged on one engine and not on another (measured: /root in the router step,
  Docker 20.10 against 26);
* an opaque marker (``D/.wh..wh..opq``: D replaced as a whole) becomes a whiteout for each name
  below D that the layer does not bring back, at that name's place in the walk order, and is left
  out itself; a whiteout of a path nothing below has is left out;
* a whiteout is a plain empty file, mode 0, owned by root, dated SOURCE_DATE_EPOCH.

Entries stay in the layer's order (the walk order, the same on both stores), so nothing is buffered
but the directories that may still turn out to be parents.
"""

from __future__ import annotations

import posixpath
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from imagebuild.normalize.lower import OPAQUE, WHITEOUT, Digest, LowerState, Meta, entry_path


def _inside(path: str, directory: str) -> bool:
    return directory == "" or path.startswith(directory + "/")


@dataclass(slots=True)
class _Opaque:
    directory: str
    below: list[str]  # the names under it in the layers below, sorted: each needs a whiteout or a return
    seen: set[str] = field(default_factory=set)


class LayerReducer:
    """Feed a layer's entries in order; get back the entries of the reduced layer, in order."""

    def __init__(self, lower: LowerState, epoch: int) -> None:
        self._lower = lower
        self._epoch = epoch
        # Unchanged directories that may turn out to be parents.
        self._pending: list[tarfile.TarInfo] = []
        self._opaque: list[_Opaque] = []
        self.dropped = 0

    def unchanged(self, info: tarfile.TarInfo, meta: Meta, digest: Digest | None) -> bool:
        """Whether ``info`` (not a whiteout, not a directory) is what the layers below have there, but its time."""
        below = self._lower.get(entry_path(info.name))
        if below is None or not below[0].same_but_time(meta):
            return False
        if not info.isreg():
            return True
        below_digest = below[1]
        return digest is not None and below_digest is not None and digest() == below_digest()

    def needs_content(self, info: tarfile.TarInfo, meta: Meta) -> bool:
        """Whether deciding about this regular file needs its content: only when its metadata match."""
        below = self._lower.get(entry_path(info.name))
        return info.isreg() and below is not None and below[0].same_but_time(meta)

    def feed(self, info: tarfile.TarInfo, meta: Meta, digest: Digest | None) -> Iterator[tarfile.TarInfo]:
        """The reduced layer's entries up to and including ``info``'s (which is yielded last if kept)."""
        path = entry_path(info.name)
        yield from self._leave(path)
        parent, base = posixpath.split(path)
        if base == OPAQUE:
            self._opaque.append(_Opaque(directory=parent, below=sorted(self._lower.children(parent))))
            self.dropped += 1
            return
        yield from self._whiteouts_before(path)
        if base.startswith(WHITEOUT):
            if self._lower.get(posixpath.join(parent, base[len(WHITEOUT) :])) is None:
                self.dropped += 1  # nothing below to hide
                return
            yield from self._flush(path)
            yield self._whiteout(info.name)
            return
        below = self._lower.get(path)
        if info.isdir() and below is not None and below[0].is_dir and below[0].same_dir(meta):
            self._pending.append(info)
            return
        if not info.isdir() and self.unchanged(info, meta, digest):
            self.dropped += 1
            return
        yield from self._flush(path)
        yield info

    def finish(self) -> Iterator[tarfile.TarInfo]:
        """What is left at the end of the layer: the opaque directories' remaining whiteouts."""
        yield from self._leave(None)
        self.dropped += len(self._pending)
        self._pending.clear()

    def _leave(self, path: str | None) -> Iterator[tarfile.TarInfo]:
        """Close the opaque directories and the pending parents ``path`` is not inside (all, for None)."""
        while self._opaque and (path is None or not _inside(path, self._opaque[-1].directory)):
            context = self._opaque.pop()
            for name in context.below:
                if name not in context.seen:
                    yield from self._emit_whiteout(context.directory, name)
        while self._pending and (path is None or not _inside(path, entry_path(self._pending[-1].name))):
            self._pending.pop()
            self.dropped += 1

    def _whiteouts_before(self, path: str) -> Iterator[tarfile.TarInfo]:
        """In an opaque directory: whiteouts for the names below it that sort before ``path``'s and are gone."""
        if not self._opaque:
            return
        context = self._opaque[-1]
        relative = path[len(context.directory) + 1 :] if context.directory else path
        child = relative.split("/", 1)[0]
        if child.startswith(WHITEOUT):
            child = child[len(WHITEOUT) :]
        for name in context.below:
            if name >= child:
                break
            if name not in context.seen:
                context.seen.add(name)
                yield from self._emit_whiteout(context.directory, name)
        context.seen.add(child)

    def _emit_whiteout(self, directory: str, name: str) -> Iterator[tarfile.TarInfo]:
        marker = posixpath.join(directory, WHITEOUT + name) if directory else WHITEOUT + name
        yield from self._flush(marker)
        yield self._whiteout(marker)

    def _flush(self, path: str) -> Iterator[tarfile.TarInfo]:
        """The pending directories ``path`` is inside: kept after all, as its parents.

        Each is dated by what ``path`` does to it (see the module's rules): its child on the way to
        ``path`` is new there or a whiteout (the step changed its names), or it is the time below.
        """
        keep = [d for d in self._pending if _inside(path, entry_path(d.name))]
        self._pending = [d for d in self._pending if d not in keep]
        for directory in keep:
            parent = entry_path(directory.name)
            relative = path[len(parent) + 1 :] if parent else path
            child = posixpath.join(parent, relative.split("/", 1)[0]) if parent else relative.split("/", 1)[0]
            changed_names = posixpath.basename(child).startswith(WHITEOUT) or self._lower.get(child) is None
            directory.mtime = self._epoch if changed_names else self._lower.written_mtime(parent)
            yield directory

    def _whiteout(self, name: str) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid, info.size, info.mtime = tarfile.REGTYPE, 0, 0, 0, 0, self._epoch
        return info
