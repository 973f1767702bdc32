"""The shipped importer's command line: ``python3 imagebuild-import.pyz DIR/<archive>.json [--check-only]``.

``--check-only`` checks the archive against its manifest (size, sha256; a squashfs's superblock) and
loads nothing: what a pyxis or Charliecloud job runs on every node before it starts the squashfs.
``--unpack-into DIR`` with it first checks that DIR's filesystem has room for the squashfs unpacked
(``unpack_room``): where pyxis's enroot unpacks it.
``--runtime podman`` checks it the same way, then loads it with ``podman load`` (``podman_load``).

Exit codes (the same as imagebuild's): 0 imported or already present, 1 the engine's disk lacks
room for the layers (nothing read; ``load_room``) or DIR lacks room for the squashfs unpacked, 2 bad input (missing or malformed manifest,
missing archive), 3 no Docker engine or the engine refused, 7 integrity (size, sha256 or image ID
differs from the manifest), 130 interrupted. Messages go to stderr, one line
each; the image ID goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .check_only import check_archive
from .failures import BadInput, ImportFailure
from .load_room import room_checked
from .manifest import read_manifest
from .podman_load import load_into_podman
from .socket_engine import SocketEngine
from .text import shown
from .unpack_room import check_unpack_room
from .verified_load import import_archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="imagebuild-import", description="Verify an image archive against its manifest and load it."
    )
    parser.add_argument("manifest", type=Path, help="the .json manifest export wrote next to the archive")
    parser.add_argument(
        "--check-only",
        action="store_true",
        help="check the archive's size and sha256 (and a squashfs's superblock) against the manifest; load nothing",
    )
    parser.add_argument(
        "--unpack-into",
        type=Path,
        metavar="DIR",
        help="with --check-only, a squashfs's: first check that DIR's filesystem has room for it unpacked (enroot's data directory)",
    )
    parser.add_argument(
        "--runtime",
        choices=("docker", "podman"),
        default="docker",
        help="docker: stream into the Docker engine `docker` uses (DOCKER_HOST, else the docker context; the default); podman: check, then `podman load`",
    )
    args = parser.parse_args(argv)

    def report(text: str) -> None:
        print(f"imagebuild-import: {shown(text, limit=2000)}", file=sys.stderr, flush=True)

    try:
        manifest_path: Path = args.manifest
        if args.unpack_into is not None and not args.check_only:
            msg = "--unpack-into goes with --check-only (it checks the room a squashfs takes unpacked; nothing is loaded)"
            raise BadInput(msg)
        manifest = read_manifest(manifest_path)  # bad input is reported before the engine is touched
        room_checked()
        if args.check_only:
            if args.unpack_into is not None:  # before the archive is read: a node without room fails at once
                check_unpack_room(manifest, args.unpack_into, report)
            checked = check_archive(manifest_path, report)
            report(f"{checked.archive}: {checked.kind} of {checked.image_id}, size and sha256 as the manifest says")
            print(checked.image_id)
            return 0
        if args.runtime == "podman":
            image_id, present = load_into_podman(manifest_path, report)
            report(f"{image_id} {'already present' if present else 'verified and loaded'} in podman")
            print(image_id)
            return 0
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
