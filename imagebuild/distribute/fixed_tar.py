"""Tar entries whose bytes depend only on what they hold: the OCI layout and the squashfs's input.

Every header has mtime 0, uid and gid as given (0 unless a layer said otherwise), no user or group
names, and the PAX format only where a name, link or extended attribute needs it (Python writes a
plain ustar header otherwise). Callers choose the order; nothing here reads a clock or the host.
"""

from __future__ import annotations

import tarfile
from collections.abc import Mapping
from typing import Protocol

from imagebuild.util.streams import TAR_END, tar_padding

__all__ = ["TAR_END", "Sink", "directory", "header", "regular_file"]


class Sink(Protocol):
    def write(self, b: bytes, /) -> object: ...


def header(
    name: str,
    *,
    kind: bytes = tarfile.REGTYPE,
    size: int = 0,
    mode: int = 0o644,
    uid: int = 0,
    gid: int = 0,
    linkname: str = "",
    devmajor: int = 0,
    devminor: int = 0,
    pax: Mapping[str, str] | None = None,
) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode, info.uid, info.gid = kind, size, mode, uid, gid
    info.linkname, info.devmajor, info.devminor, info.mtime = linkname, devmajor, devminor, 0
    info.uname = info.gname = ""
    info.pax_headers = dict(pax or {})
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


def regular_file(out: Sink, name: str, data: bytes, *, mode: int = 0o644) -> None:
    out.write(header(name, size=len(data), mode=mode))
    out.write(data)
    out.write(tar_padding(len(data)))


def directory(out: Sink, name: str, *, mode: int = 0o755) -> None:
    out.write(header(name.rstrip("/") + "/", kind=tarfile.DIRTYPE, mode=mode))
