"""What a node does with an export: run the importer beside it, or be handed a copy with a byte flipped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from imagebuild.distribute.shipped_importer import IMPORTER_NAME
from tests.prerequisites import PYTHON38


def run_shipped_importer(manifest: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The importer export wrote beside ``manifest``, run as a node runs it: under Python 3.8 (the
    oldest it supports) where this machine has one."""
    python = str(PYTHON38 if PYTHON38.exists() else sys.executable)
    command = [python, str(manifest.parent / IMPORTER_NAME), str(manifest), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


def corrupt_copy(manifest: Path, directory: Path, *, in_largest_file: bool = False) -> Path:
    """Copy everything the export wrote that ``manifest`` names into ``directory`` (import checks
    the attestations' digests first), flip one byte of the archive, return the copy's manifest.

    The byte is the archive's middle one, or, for an uncompressed archive and ``in_largest_file``,
    the middle one of its largest file (a layer): the tar stays whole and that layer's digest is off,
    which is what the engine then sees whatever the archive's layout."""
    document = json.loads(manifest.read_text())
    for name in (manifest.name, document["archive"], "imagebuild-import.pyz", *document.get("attestations", {})):
        shutil.copy(manifest.parent / name, directory / name)
    archive = directory / document["archive"]
    offset = _largest_file_middle(archive) if in_largest_file else archive.stat().st_size // 2
    with archive.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0x01]))
    return directory / manifest.name


def _largest_file_middle(archive: Path) -> int:
    with tarfile.open(archive, mode="r:") as tar:
        largest = max((member for member in tar if member.isfile()), key=lambda member: member.size)
    return largest.offset_data + largest.size // 2
