"""Rewrite one layer tar with its timestamps clamped to SOURCE_DATE_EPOCH.

What BuildKit's ``rewrite-timestamp=true`` does, for the classic builder: every
mtime after the epoch becomes the epoch, earlier ones stay (a file a source
archive dated 2019 keeps 2019), and the owners' names, which come from the
engine host's user database, are dropped. Nothing else changes: names (however long, or
not UTF-8), content, modes, numeric owners, link targets, device numbers, xattrs and
the whiteouts (``.wh.NAME``) and opaque markers (``.wh..wh..opq``) of the
layer format, which are ordinary entries here. Entries keep their order
(docker writes them in directory-walk order, the same on every build; a hard
link must follow its target). The output is the standard library's PAX format
(its headers, written as its "w" mode writes them: imagebuild.normalize.tar_writer),
so it depends only on the entries and not on which engine wrote the input: Go's writer (Docker's) also repeats the file type in the
mode field (0o40755 for a directory), the standard library's keeps only the
permission bits there; the type is the entry's type flag either way.

Streaming: entries are read and written one at a time with 1 MiB copies, and
the parser's list of seen entries is dropped as it goes, so memory does not
grow with the number of files.

With a ``LayerReducer`` (imagebuild.normalize.canonical) the layer is also reduced
to what it changes below it, and what it held is returned for the next layer's
lower state; a file whose metadata all match what is below is spooled once so
its content can be compared. With ``content`` (the layer store path: every file
is also in the layer's directory) a file's digest is computed from there, and
only when a comparison asks for it, instead of hashing every file as it passes.

Sizes only (``sizes_only``): the same rewrite with every file's content taken as zeros and
nothing written or hashed, only counted: the rewritten tar's size before a byte of it exists, which
the outer archive's header needs when the layer is streamed into the engine's load
(imagebuild.normalize.streamed_load). Its decisions need every compared file's digest from
elsewhere (``content``), never from the stream.

Cost: the rewritten tar is hashed (its new diffID) in a thread of its own, so
on a machine with a second core the hash overlaps the copy; measured in
docs/measured.md.
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, BinaryIO, cast

from imagebuild.normalize.canonical import LayerReducer
from imagebuild.normalize.lower import Digest, Meta, entry_path
from imagebuild.normalize.tar_writer import TarWriter
from imagebuild.util.streams import CHUNK, EntryReads, HashingWriter, Sink, forget_members

SPOOL_IN_MEMORY = 16 * CHUNK  # a compared file up to this size stays in memory

# PAX records tarfile applies to a TarInfo's own fields when reading, and writes again from them.
REAPPLIED = frozenset((*tarfile.PAX_FIELDS, "hdrcharset"))


class LayerError(Exception):
    """A layer tar could not be read or is of a kind the rewriter refuses to guess about (callers translate it)."""


@dataclass(frozen=True, kw_only=True)
class RewriteResult:
    diff_id: str  # sha256 of the rewritten tar: the layer's new diffID
    size: int
    entries: int  # entries written
    clamped: int  # entries whose mtime was after the epoch
    dropped: int = 0  # entries the reducer left out (they change nothing below)
    # With a reducer: the input layer's entries (name, metadata, content digest), for the lower state.
    held: list[tuple[str, Meta, Digest | None]] = field(default_factory=list)
    written_mtimes: dict[str, int] = field(default_factory=dict)  # with a reducer: by path, what it wrote


def canonical(info: tarfile.TarInfo) -> None:
    """Drop the PAX records the reader already applied to the entry's fields (name, size, ids, mtime, ...).

    The writer recreates those it needs from the fields, so the output does
    not depend on how the input spelled them (PAX, GNU long names, ustar).
    What only PAX can say (xattrs, atime/ctime) is kept. The owner and group
    *names* go: Docker looks the numeric ids up in the engine host's
    /etc/passwd and /etc/group when it commits a layer, so they differ between
    build hosts, and nothing reads them (extraction uses the numeric ids).
    """
    info.pax_headers = {k: v for k, v in info.pax_headers.items() if k not in REAPPLIED}
    info.uname = info.gname = ""


def clamp(info: tarfile.TarInfo, epoch: int, *, pin: bool = False) -> bool:
    """Clamp ``info``'s times to ``epoch`` in place (``pin``: set them to it); True when its mtime changed."""
    changed = info.mtime > epoch or (pin and info.mtime != epoch)
    if changed:
        info.mtime = epoch
    for key in ("atime", "ctime"):
        value = info.pax_headers.get(key)
        if value is not None and (pin or float(value) > epoch):
            cast("dict[str, str]", info.pax_headers)[key] = str(epoch)
    return changed


class _Counter:
    """Where a sizes-only rewrite writes: the bytes are counted, not kept or hashed."""

    def __init__(self) -> None:
        self.size = 0
        self.digest = ""  # not computed

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def close(self) -> None:
        pass


_ZERO_CHUNK = bytes(CHUNK)


class _Zeros:
    """A file's content as zeros (a sizes-only rewrite copies these instead of reading the file)."""

    def __init__(self, size: int) -> None:
        self._left = size

    def read(self, size: int = -1) -> bytes:
        n = self._left if size < 0 else min(size, self._left)
        self._left -= n
        return _ZERO_CHUNK if n == CHUNK else bytes(n)


class _HashingSource:
    """A payload read through sha256: its digest once the writer has copied it."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source, self._hash = source, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._source.read(size)
        self._hash.update(data)
        return data

    def digest(self) -> str:
        return self._hash.hexdigest()


def _constant(value: str) -> Digest:
    return lambda: value


def rewrite_layer(
    source: BinaryIO,
    sink: Sink,
    epoch: int,
    *,
    what: str = "layer",
    reducer: LayerReducer | None = None,
    pin_times: bool = False,
    content: Callable[[str, int], Digest] | None = None,
    sizes_only: bool = False,
) -> RewriteResult:
    """Copy the layer tar ``source`` to ``sink`` with mtimes clamped to ``epoch`` (and reduced, with ``reducer``).

    ``pin_times``: every time becomes ``epoch``, earlier ones too (a COPY of the build context, whose
    times depend on the client that sent it). ``content(name, size)``: a regular file's digest,
    computed when first asked for, from elsewhere than the stream (the layer's directory).
    ``sizes_only``: nothing is written to ``sink``; the result has the size, entries and what the
    layer held, and no diffID (see the module's doc).
    """
    if sizes_only and content is None:
        msg = "a sizes-only rewrite needs the files' digests from elsewhere than the stream"
        raise ValueError(msg)
    out = _Counter() if sizes_only else HashingWriter(sink, background=True)
    try:
        return _rewrite(
            source, out, epoch, what=what, reducer=reducer, pin_times=pin_times, content=content, sizes_only=sizes_only
        )
    finally:
        out.close()


def _rewrite(
    source: BinaryIO,
    out: HashingWriter | _Counter,
    epoch: int,
    *,
    what: str,
    reducer: LayerReducer | None,
    pin_times: bool,
    content: Callable[[str, int], Digest] | None,
    sizes_only: bool,
) -> RewriteResult:
    entries = clamped = 0
    held: list[tuple[str, Meta, Digest | None]] = []
    written_mtimes: dict[str, int] = {}
    entry_reads = EntryReads(source)
    writer = TarWriter(out)  # tarfile's "w" mode's bytes, without its per-entry copy
    try:
        with entry_reads.tar() as reader:
            while (info := reader.next()) is not None:
                if any(key.startswith("GNU.sparse.") for key in info.pax_headers) or info.issparse():
                    msg = f"{what}: {info.name} is a sparse file; the rewriter does not handle sparse entries"
                    raise LayerError(msg)
                meta = Meta.of(info) if reducer is not None else None
                canonical(info)
                clamped += clamp(info, epoch, pin=pin_times)
                data: IO[bytes] | None = None
                if info.isreg():  # sizes only: the reader skips the content (its next() reads past it)
                    data = cast("IO[bytes]", _Zeros(info.size)) if sizes_only else entry_reads.extractfile(info)
                if reducer is None or meta is None:
                    writer.addfile(info, data)
                    entries += 1
                else:
                    known = content(info.name, info.size) if content is not None and info.isreg() else None
                    entries += _reduced(
                        writer, reducer, info, meta, data, held=held, written=written_mtimes, known=known
                    )
                forget_members(reader)
            if reducer is not None:
                for extra in reducer.finish():
                    writer.addfile(extra)
                    entries += 1
        writer.close()
    except tarfile.TarError as e:
        msg = f"{what}: not a readable tar ({e})"
        raise LayerError(msg) from e
    dropped = reducer.dropped if reducer is not None else 0
    return RewriteResult(
        diff_id=out.digest,
        size=out.size,
        entries=entries,
        clamped=clamped,
        dropped=dropped,
        held=held,
        written_mtimes=written_mtimes,
    )


def _reduced(
    writer: TarWriter,
    reducer: LayerReducer,
    info: tarfile.TarInfo,
    meta: Meta,
    data: IO[bytes] | None,
    *,
    held: list[tuple[str, Meta, Digest | None]],
    written: dict[str, int],
    known: Digest | None = None,
) -> int:
    """Write what the reducer keeps of ``info`` (and the parents and whiteouts before it); the count.

    ``known``: the file's digest from elsewhere (computed only if the reducer asks): the stream is then
    copied as it is, neither hashed nor spooled.
    """
    digest: Digest | None = known
    payload: IO[bytes] | _HashingSource | None = data
    spooled = None
    if data is not None and known is None and reducer.needs_content(info, meta):
        spooled = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - closed below
        h = hashlib.sha256()
        while chunk := data.read(CHUNK):
            h.update(chunk)
            spooled.write(chunk)
        spooled.seek(0)
        digest, payload = _constant(h.hexdigest()), cast("IO[bytes]", spooled)
    elif data is not None and known is None:
        hashing = _HashingSource(data)
        payload, digest = hashing, hashing.digest
    count = 0
    try:
        for entry in reducer.feed(info, meta, digest):
            writer.addfile(entry, cast("IO[bytes]", payload) if entry is info else None)
            written[entry_path(entry.name)] = int(entry.mtime)
            count += 1
    finally:
        if spooled is not None:
            spooled.close()
    if isinstance(payload, _HashingSource):
        digest = _constant(payload.digest())  # the copy is done: fix the value
    held.append((info.name, meta, digest))
    return count
