"""Stand-in source tarballs, served by the sample index under /files/ as GitHub serves release archives.

Written with fixed owners, modes and times (and a gzip header without a time), so the sha256 is the
same on every machine and run: sampleworld/pins.toml records it, as `imagebuild lock` would.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from sampleworld.gitrepos import EPOCH
from sampleworld.layout import GOOGLETEST_ASSET_PATH, SOURCES_DIR, StateDir

GOOGLETEST_SOURCE = "nixl/googletest-1.14.0"  # under sampleworld/sources/; also the archive's top directory


def tarball_bytes(source: str, top: str) -> bytes:
    """A .tar.gz of sampleworld/sources/``source`` with every member under ``top``/."""
    root = SOURCES_DIR / source
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in [root, *sorted(root.rglob("*"))]:
            relative = path.relative_to(root).as_posix()
            info = tarfile.TarInfo(top if relative == "." else f"{top}/{relative}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)


def populate_tarballs(state: StateDir) -> Path:
    """Write googletest's release tarball into the index root; returns its path."""
    target = state.index / GOOGLETEST_ASSET_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    data = tarball_bytes(GOOGLETEST_SOURCE, Path(GOOGLETEST_SOURCE).name)
    if not target.is_file() or target.read_bytes() != data:
        target.write_bytes(data)
    return target
