"""The files of an export besides its archive's bytes: the output directory, checked before the engine
is asked and made only once the export proceeds; the archive's name (the image's first tag and its
identity); and the build's SBOM, provenance and envelopes, carried beside it on one line each."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from imagebuild.distribute.compression import Compression
from imagebuild.distribute.formats import ExportFormat
from imagebuild.distribute.record_notes import build_documents
from imagebuild.engine.interface import ImageInfo
from imagebuild.errors import ConfigError, ImageBuildError
from imagebuild.importer.text import shown
from imagebuild.util.files import atomic_file


def check_output_dir(output: Path, flag: str = "--output") -> Path:
    """``output`` as an absolute path, once proven a directory this process can write or make, before the
    engine or a registry is asked. Nothing is made here (``made_directory`` makes it when the work
    proceeds): a refused or failed run leaves no directory behind."""
    text = str(output)
    if not text.isprintable():  # the printed manifest path would be split or rewrite the terminal
        msg = f"{flag} {shown(text)}: control characters in a path; choose another directory name"
        raise ConfigError(msg)
    try:
        existing = next(p for p in (output, *output.parents) if p.exists())  # "/" or "." at the latest
        if existing == output and not output.is_dir():
            msg = f"{flag} {output}: not a directory; give a directory (made when missing)"
            raise ConfigError(msg)
        if not existing.is_dir():
            msg = f"{flag} {output}: cannot create it (Not a directory); {existing} is no directory, choose another"
            raise ConfigError(msg)
    except OSError as e:  # a name over 255 bytes, a directory on the way that cannot be searched
        msg = f"{flag} {output}: cannot look at it ({e.strerror or e}); choose a directory you can write"
        raise ConfigError(msg) from e
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        what = "not writable" if existing == output else f"cannot create it in {existing}"
        msg = f"{flag} {output}: {what} ({e.strerror}); choose a directory you can write, or fix its permissions"
        raise ConfigError(msg) from e
    return output.resolve()


@contextmanager
def made_directory(output: Path, flag: str = "--output") -> Iterator[Path]:
    """``output``, made with its missing parents for the block; when the block fails (Ctrl-C included),
    each directory it made is removed again if still empty, so a failed run leaves no trace."""
    made = list(itertools.takewhile(lambda p: not p.exists(), (output, *output.parents)))  # deepest first
    try:
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            msg = f"{flag} {output}: cannot create it ({e.strerror}); choose a directory you can write"
            raise ConfigError(msg) from e
        yield output
    except BaseException:
        for directory in made:
            with contextlib.suppress(OSError):  # not empty: a file in it is never removed here
                directory.rmdir()
        raise


def archive_name(info: ImageInfo, compression: Compression, export_format: ExportFormat = ExportFormat.DOCKER) -> str:
    """``<name>-<id12><suffix>``: the last path part of the image's first tag, and its identity; the
    suffix says the format (``.tar.zst``, ``.oci.tar.zst``, ``.sqfs``)."""
    tagged = [t for t in info.tags if t != "<none>:<none>"]
    stem = tagged[0].rsplit(":", 1)[0].rsplit("/", 1)[-1] if tagged else "image"
    stem = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip(".-") or "image"
    return f"{stem}-{(info.identity or info.id).removeprefix('sha256:')[:12]}{export_format.suffix(compression)}"


def named_by_identity(output: Path, name: str, named: str, report: Callable[[str], None]) -> str:
    """The archive, named by the engine's ID until its saved config gave the identity, renamed by it."""
    if named != name:
        (output / name).replace(output / named)
        report(f"its identity, from the config the engine saved: the archive is {named}")
    return named


def carried_name(archive: str, document: Path) -> str:
    """``gfx942-<id12>.sbom.cdx.json`` beside ``kimi-k3-<id12>.tar.zst``: ``kimi-k3-<id12>.tar.zst.sbom.cdx.jsonl``."""
    kind = document.name.split(".", 1)[1] if "." in document.name else document.name
    return f"{archive}.{kind.removesuffix('.json')}.jsonl"


def carry_build_documents(
    record_path: Path | None, info: ImageInfo, *, output: Path, name: str, report: Callable[[str], None]
) -> tuple[Path, ...]:
    """The build's SBOM, provenance and envelopes (as the build record of this image names them), beside
    the archive: each the same JSON on one line, ``.jsonl``, so ``*.json`` there still finds only the
    manifest. A document that is not JSON is refused (it is not one build wrote)."""
    carried = []
    for document in build_documents(record_path, image_id=info.identity, report=report):
        try:
            text = json.dumps(json.loads(document.read_bytes()), separators=(",", ":"), ensure_ascii=False) + "\n"
        except ValueError as e:
            msg = f"{document}: named by the build record {record_path} but not JSON ({e}); build again"
            raise ImageBuildError(msg) from e
        target = output / carried_name(name, document)
        write_file(target, text.encode("utf-8"))
        carried.append(target)
    if carried:
        report(f"beside the archive: {', '.join(p.name for p in carried)}")
    return tuple(carried)


def write_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    with atomic_file(path, mode) as file:
        file.write(data)
