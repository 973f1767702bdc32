"""The importer as `imagebuild export` ships it: the ``importer`` package in one zipapp (PEP 441).

``python3 DIR/imagebuild-import.pyz DIR/<archive>.json`` on a node runs the very modules that
`imagebuild import` runs here, from one file that needs nothing but python3 (3.8 or later).

The file is a function of the package's sources alone: the entries in name order, each with the same
timestamp and permissions, stored uncompressed (the sources are a few dozen KB, and so neither a
file's mtime nor the zlib version can change a byte). The same imagebuild therefore writes the same
importer into every export, and a node's copy can be compared with any other by its hash.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from imagebuild import importer

IMPORTER_NAME = "imagebuild-import.pyz"
PACKAGE = "importer"  # the package's top-level name inside the zipapp
SHEBANG = b"#!/usr/bin/env python3\n"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip entry can carry
MAIN = f'''\
"""imagebuild's archive importer: python3 imagebuild-import.pyz DIR/<archive>.json (see {PACKAGE}/cli.py)."""

import sys

from {PACKAGE}.cli import main

sys.exit(main())
'''


def importer_sources() -> dict[str, bytes]:
    """The zipapp's entries by name: its ``__main__.py`` and the package's modules."""
    package = Path(importer.__file__).parent
    entries = {"__main__.py": MAIN.encode()}
    for path in sorted(package.glob("*.py")):
        entries[f"{PACKAGE}/{path.name}"] = path.read_bytes()
    return entries


def importer_zipapp() -> bytes:
    """The importer as one executable file, byte-identical for the same package sources."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in sorted(importer_sources().items()):
            entry = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            entry.create_system = 3  # unix, so that the permissions below mean the same everywhere
            entry.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
            archive.writestr(entry, data, compress_type=zipfile.ZIP_STORED)
    return buffer.getvalue()
