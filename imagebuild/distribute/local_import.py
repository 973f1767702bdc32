"""`imagebuild import`: the shipped importer's modules, run against imagebuild's own Docker engine.

The verification, streaming and tagging live in the ``importer`` package (standard library only, so
the zipapp that export writes next to each archive behaves the same on nodes without imagebuild).
Here its failures become imagebuild's errors, with the same exit codes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagebuild.engine.interface import Engine
from imagebuild.errors import ConfigError, EngineError, ImageBuildError, IntegrityError
from imagebuild.importer.failures import (
    EXIT_BAD_INPUT,
    EXIT_INTEGRITY,
    EXIT_NO_ENGINE,
    EXIT_NO_ROOM,
    ImportFailure,
)
from imagebuild.importer.load_room import room_checked
from imagebuild.importer.manifest import Manifest, read_manifest
from imagebuild.importer.text import shown
from imagebuild.importer.verified_load import ImportResult, archive_of, import_archive

ERRORS: dict[int, type[ImageBuildError]] = {
    EXIT_NO_ROOM: ImageBuildError,
    EXIT_BAD_INPUT: ConfigError,
    EXIT_NO_ENGINE: EngineError,
    EXIT_INTEGRITY: IntegrityError,
}


def check_manifest(path: Path) -> Manifest:
    """Read and validate the manifest (and the importer's switch) before the engine is touched."""
    try:
        room_checked()
        return read_manifest(path)
    except ImportFailure as e:
        raise ERRORS[e.exit_code](shown(str(e), limit=2000)) from e


def archive_problem(manifest: Manifest, path: Path) -> ImageBuildError | None:
    """Why the manifest's archive could not be loaded (missing, not a regular file, not the manifest's
    size: the import's own checks, nothing read), or None. Not raised: an engine that holds the image
    needs no archive, and only the engine can say whether it does."""
    try:
        archive_of(manifest, path)
    except ImportFailure as e:
        return ERRORS[e.exit_code](shown(str(e), limit=2000))
    return None


def import_manifest(path: Path, engine: Engine, *, report: Callable[[str], None]) -> ImportResult:
    try:
        return import_archive(path, engine, report)
    except ImportFailure as e:
        raise ERRORS[e.exit_code](shown(str(e), limit=2000)) from e
