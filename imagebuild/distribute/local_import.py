"""`imagebuild import`: the shipped importer, run against imagebuild's own Docker engine.

The verification, streaming and tagging live in ``importer`` (standard library only, so the copy that
export writes next to each archive behaves the same on nodes without imagebuild). Here its failures
become imagebuild's errors, with the same exit codes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagebuild.distribute import importer
from imagebuild.engine import Engine
from imagebuild.errors import ConfigError, EngineError, ImageBuildError, IntegrityError

ERRORS: dict[int, type[ImageBuildError]] = {
    importer.EXIT_BAD_INPUT: ConfigError,
    importer.EXIT_NO_ENGINE: EngineError,
    importer.EXIT_INTEGRITY: IntegrityError,
}


def check_manifest(path: Path) -> importer.Manifest:
    """Read and validate the manifest before the engine is touched."""
    try:
        return importer.read_manifest(path)
    except importer.ImportFailure as e:
        raise ERRORS[e.exit_code](str(e)) from e


def import_manifest(path: Path, engine: Engine, *, report: Callable[[str], None]) -> importer.ImportResult:
    try:
        return importer.import_archive(path, engine, report)
    except importer.ImportFailure as e:
        raise ERRORS[e.exit_code](str(e)) from e
