"""The shipped importer's command line: ``python3 imagebuild-import.pyz DIR/<archive>.json``.

Exit codes (the same as imagebuild's): 0 imported or already present, 2 bad input (missing or
malformed manifest, missing archive), 3 no Docker engine or the engine refused, 7 integrity (size,
sha256 or image ID differs from the manifest), 130 interrupted. Messages go to stderr, one line
each; the image ID goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .failures import ImportFailure
from .manifest import read_manifest
from .socket_engine import SocketEngine
from .text import shown
from .verified_load import import_archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="imagebuild-import", description="Verify an image archive against its manifest and load it."
    )
    parser.add_argument("manifest", type=Path, help="the .json manifest export wrote next to the archive")
    args = parser.parse_args(argv)

    def report(text: str) -> None:
        print(f"imagebuild-import: {shown(text, limit=2000)}", file=sys.stderr, flush=True)

    try:
        manifest_path: Path = args.manifest
        read_manifest(manifest_path)  # bad input is reported before the engine is touched
        result = import_archive(manifest_path, SocketEngine.from_env(), report)
    except ImportFailure as e:
        print(f"imagebuild-import: error: {shown(str(e), limit=2000)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("imagebuild-import: interrupted; nothing was tagged", file=sys.stderr)
        return 130
    how = "already present" if result.already_present else f"verified and loaded in {result.seconds:.1f}s"
    named = "" if result.engine_id == result.image_id else f" (engine ID {result.engine_id})"
    report(f"{result.image_id}{named} {how}; tagged {', '.join(result.tags) or 'nothing'}")
    print(result.engine_id)  # what `docker run` takes on this engine
    return 0
