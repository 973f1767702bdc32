"""Where the two sides of a diff come from: an image in the engine, or an archive on disk.

An argument that names an existing file is an archive: a ``docker save``
tar, plain, gzip or zstd (by its first bytes, not its name), or the JSON
manifest ``imagebuild export`` writes beside one. Anything else is an image
reference for the engine.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, cast

from imagebuild.diff.compare import ImageDiff, Snapshot, compare_images
from imagebuild.diff.stored import LayerIndexes, stored_snapshot
from imagebuild.engine.interface import Engine
from imagebuild.engine.saved_image import ArchiveError, read_saved_image
from imagebuild.errors import ConfigError, EngineError
from imagebuild.inputs.values import escape_controls
from imagebuild.util.json_file import read_json_file
from imagebuild.util.streams import CHUNK, gzip_reader, open_stream

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _archive_of(path: Path) -> Path:
    """The archive itself, or the one an export manifest names."""
    where = escape_controls(str(path))
    try:
        with path.open("rb") as f:
            head = f.read(1)
    except OSError as e:
        msg = f"{where}: cannot read it ({e.strerror or e}); give a file you can read"
        raise ConfigError(msg) from e
    if head != b"{":
        return path
    hint = "give a `docker save` tar or the .json manifest `imagebuild export` wrote"
    manifest = read_json_file(path, where=where, hint=hint)
    name = manifest.get("archive") if isinstance(manifest, dict) else None
    if not isinstance(name, str) or not name:
        msg = f"{where}: JSON, but not an `imagebuild export` manifest (no 'archive' file name); {hint}"
        raise ConfigError(msg)
    archive = path.parent / name
    try:
        beside = archive.is_file()
    except OSError:  # a name too long: not beside it either
        beside = False
    if not beside:
        msg = f"{where}: names the archive {escape_controls(archive.name)}, which is not beside it; copy it there"
        raise ConfigError(msg)
    return archive


@contextmanager
def open_archive(path: Path) -> Iterator[BinaryIO]:
    """The uncompressed tar stream of an archive file."""
    with path.open("rb") as raw:
        magic = raw.read(4)
        raw.seek(0)
        if magic.startswith(GZIP_MAGIC):
            with gzip_reader(raw) as stream:
                yield stream
        elif magic == ZSTD_MAGIC:
            import zstandard  # export's compression; loaded only for a zstd archive

            with zstandard.ZstdDecompressor().stream_reader(raw, read_size=CHUNK) as stream:
                try:
                    yield cast("BinaryIO", stream)
                except zstandard.ZstdError as e:  # not an OSError: say it as the other formats do
                    msg = f"{path}: not a readable zstd stream ({e})"
                    raise ArchiveError(msg) from e
        else:
            yield raw


def check_archive(name: str) -> None:
    """Refuse an archive operand that is not one before the engine is asked about the other."""
    archive = _archive_of(Path(name))
    try:
        with open_archive(archive) as stream:
            tarfile.TarInfo.frombuf(stream.read(tarfile.BLOCKSIZE), "utf-8", "surrogateescape")
    except ArchiveError as e:
        msg = f"{e}; is it a `docker save` or `imagebuild export` archive?"
        raise ConfigError(msg) from e
    except (tarfile.TarError, OSError, EOFError) as e:
        msg = f"{archive}: not a tar archive ({e}); is it a `docker save` or `imagebuild export` archive?"
        raise ConfigError(msg) from e


def _indexed(stream: BinaryIO, name: str, what: str, indexes: LayerIndexes) -> Snapshot:
    image = read_saved_image(stream, indexes.of_archive_entry, what=what)
    return Snapshot(name=name, image=image)


def load_snapshot(name: str, engine: Engine | None, indexes: LayerIndexes | None = None) -> Snapshot:
    """Index the image ``name`` names: an archive file, else an image in ``engine`` (from its store
    where this process can read it, each layer ``indexes`` already holds not read again)."""
    indexes = indexes if indexes is not None else LayerIndexes()
    path = Path(name)
    if path.is_file():
        archive = _archive_of(path)
        try:
            with open_archive(archive) as stream:
                return _indexed(stream, name, str(archive), indexes)
        except (ArchiveError, OSError, EOFError) as e:
            msg = f"{e}; is it a `docker save` or `imagebuild export` archive?"
            raise ConfigError(msg) from e
    if engine is None:
        msg = f"{name}: no such file, and no engine to look it up in"
        raise ConfigError(msg)
    image_id = engine.inspect_image(name).id
    stored = stored_snapshot(engine, image_id, name, indexes)
    if stored is not None:
        return stored
    try:
        return _indexed(open_stream(engine.save(image_id)), name, f"image {name}", indexes)
    except ArchiveError as e:
        msg = f"the engine's save of {name} could not be read: {e}"
        raise EngineError(msg) from e


def diff_images(a: str, b: str, *, mtime: bool = False, engine: Engine | None = None) -> ImageDiff:
    """Compare the images ``a`` and ``b`` name (archive files or engine references)."""
    indexes = LayerIndexes()  # a rebuild and its original share their base: read it once
    return compare_images(load_snapshot(a, engine, indexes), load_snapshot(b, engine, indexes), mtime=mtime)
