"""What the engine's load is sent: the archive decompressed here, bounded, and filtered of its names.

Every engine gets a plain tar, whatever the archive's compression and whatever the engine could
decompress itself (Docker 23+ reads zstd, every engine gzip): the bound on the decompressed size and
the name filter (``tar_filter``) need the tar in hand, and an engine that decompresses is bounded by
nothing but its disk. zstd goes through the ``zstandard`` module when it can be imported (as under
``imagebuild import``), else through the ``zstd`` tool (the shipped importer on a bare python3);
gzip through zlib (``decompress``, shared with the engine's blob reader). Output is pulled one chunk
at a time, so a small archive that decompresses to terabytes costs one chunk of memory before it is
stopped.

The bound: the manifest's ``uncompressed_size`` (format 2: the tar's bytes as export counted them).
The first byte past it ends the stream with IntegrityFailure; the engine never gets it, nor the
tar's end blocks, so the refused load leaves no image. A version 1 manifest declares no size: its
archives are bounded by V1_EXPANSION times their compressed size (at least V1_FLOOR), far above what
image layers compress to (the sample image: 3.1 times with zstd) and far below a bomb's thousands.

Measured cost (``python benchmarks/bench_load_stream.py``, 1 GB synthetic tars, fastest of 3, load
average 5 on 2 cores): a docker-save-like tar (four large layers) passes the filter at 4.9 GB/s
against 6.1 GB/s for a plain copy of the same chunks; behind zstd decompression 2.2 against 2.4 GB/s.
Each header costs about 50 us (a tar of 4 KiB files: 90 MB/s), and a save has tens of them.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Generator, Iterator

from .decompress import StreamError, gunzip, unzstd
from .failures import EngineUnavailable, IntegrityFailure
from .manifest import Manifest
from .tar_filter import TarFilter

CHUNK_SIZE = 1 << 20
V1_EXPANSION = 32
V1_FLOOR = 64 << 20

Chunks = Generator[bytes, None, None]


def decompressed_limit(manifest: Manifest) -> int:
    """How many decompressed bytes the archive may give before its load is stopped."""
    if manifest.uncompressed_size:
        return manifest.uncompressed_size
    if manifest.compression == "none":
        return manifest.size
    return max(V1_EXPANSION * manifest.size, V1_FLOOR)


def engine_tar(chunks: Iterator[bytes], manifest: Manifest, archive: Path, skip: frozenset[str] = frozenset()) -> Chunks:
    """The tar the engine loads, from the archive's stored ``chunks`` (hashed by the caller as read);
    ``skip``: layer files the engine holds, left out (``tar_filter``)."""
    decompress: dict[str, Callable[[Iterator[bytes], Path], Chunks]] = {
        "zstd": _unzstd, "gzip": _gunzip, "none": _as_is,
    }  # fmt: skip
    plain = decompress[manifest.compression](chunks, archive)
    bounded = _bounded(plain, decompressed_limit(manifest), manifest, archive)
    try:
        yield from _filtered(bounded, archive, skip)
    finally:
        bounded.close()
        plain.close()  # stops a zstd process the engine left unread


def _bounded(chunks: Chunks, limit: int, manifest: Manifest, archive: Path) -> Chunks:
    given = 0
    for chunk in chunks:
        given += len(chunk)
        if given > limit:
            said = (
                f"the {limit} bytes its manifest declares" if manifest.uncompressed_size
                else f"{limit} bytes, {V1_EXPANSION} times its size (a version 1 manifest declares no size)"
            )  # fmt: skip
            msg = f"archive {archive}: decompresses past {said}; nothing was loaded; copy it again"
            raise IntegrityFailure(msg)
        yield chunk


def _filtered(chunks: Iterator[bytes], archive: Path, skip: frozenset[str]) -> Chunks:
    """TarFilter over the chunks, its pieces joined again into chunks of about CHUNK_SIZE."""
    tar = TarFilter(str(archive), skip)
    pieces: list[bytes | memoryview] = []
    size = 0
    for chunk in chunks:
        for piece in tar.feed(chunk):
            pieces.append(piece)
            size += len(piece)
        if size >= CHUNK_SIZE:
            yield _joined(pieces)
            pieces, size = [], 0
    pieces += tar.end()
    yield _joined(pieces)


def _joined(pieces: list[bytes | memoryview]) -> bytes:
    only = pieces[0] if len(pieces) == 1 else None
    return only if isinstance(only, bytes) else b"".join(pieces)  # a chunk passed whole is not copied


def _as_is(chunks: Iterator[bytes], _: Path) -> Chunks:
    yield from chunks


def _gunzip(chunks: Iterator[bytes], archive: Path) -> Chunks:
    inflater: ModuleType = zlib
    # Not in the standard library: ISA-L's inflate is under imagebuild, often not on a node.
    with contextlib.suppress(ImportError):
        from isal import isal_zlib as inflater
    try:
        yield from gunzip(chunks, inflater)
    except StreamError as e:
        msg = f"archive {archive}: {e}; copy it again"
        raise IntegrityFailure(msg) from None


def _unzstd(chunks: Iterator[bytes], archive: Path) -> Chunks:
    try:
        import zstandard  # not in the standard library: present under imagebuild, often not on a node
    except ImportError:
        return _zstd_tool(chunks, archive)
    return _zstd_module(zstandard, chunks, archive)


def _zstd_module(zstandard: Any, chunks: Iterator[bytes], archive: Path) -> Chunks:
    try:
        yield from unzstd(zstandard, chunks)
    except StreamError as e:
        msg = f"archive {archive}: {e}; copy it again"
        raise IntegrityFailure(msg) from None


def _zstd_tool(chunks: Iterator[bytes], archive: Path) -> Chunks:
    """The zstd tool, for a python3 without the zstandard module (the shipped importer on a node)."""
    tool = shutil.which("zstd")
    if tool is None:
        msg = (
            f"archive {archive}: zstd-compressed, and this python has no zstandard module and no zstd tool is "
            "on PATH: install zstd on this node (apt-get install zstd), or export with --compress gzip"
        )
        raise EngineUnavailable(msg)
    proc = subprocess.Popen([tool, "-dcq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def feed() -> None:
        try:
            for chunk in chunks:
                stdin.write(chunk)
        except (BrokenPipeError, ValueError):  # the reader stopped (engine error); drain() hashes the rest
            pass
        finally:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()

    feeder = threading.Thread(target=feed, name="zstd-feed", daemon=True)
    feeder.start()
    try:
        yield from iter(lambda: stdout.read(CHUNK_SIZE), b"")
        feeder.join()
        if proc.wait() != 0:
            msg = f"archive {archive}: zstd could not decompress it (exit {proc.returncode}); copy it again"
            raise IntegrityFailure(msg)
    finally:
        if proc.poll() is None:
            proc.kill()  # stopped early (bound, filter, engine): the feeder then stops on a broken pipe
        stdout.close()
        feeder.join()
        proc.wait()
