"""`export --format squashfs`: the flattened root filesystem, made by squashfs-tools-ng's tar2sqfs.

The rootfs tar (``rootfs``: the layers applied in order, in a fixed order, with the runtime files of
``runtime_files``) is streamed into ``tar2sqfs``, which needs no root and no mount. Its flags make the
bytes depend only on the tar: ``--no-keep-time`` (every inode and the superblock get the default time,
0), one compressor job count for every machine (``JOBS``), ``--no-skip`` (an entry it cannot read fails
the export instead of vanishing from the image), ``--quiet``, and the docker and OCI archives'
compression levels (zstd 3, gzip 1): tar2sqfs's defaults took 717 s (zstd 15, 320 MB) and 400 s
(gzip 9, 357 MB) for the sample image's 1.09 GB of rootfs here, against 15.5 s (370 MB) and 62 s
(396 MB), at load 10-17 on 2 cores. The image is checked after writing: its superblock magic and
the size it says it uses.

The squashfs also has the directories a cluster job binds onto (``MOUNT_POINTS``: the log dir, the
model, the JIT caches), empty where the image has nothing there: a squashfs is read-only, and ch-run
cannot make a bind's destination in it ("can't mkdir: ... Read-only file system").
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from imagebuild.distribute.compression import GZIP_LEVEL, ZSTD_LEVEL
from imagebuild.distribute.rootfs import Flattened, StoreLayer, flatten_layers
from imagebuild.distribute.runtime_files import runtime_files, working_directory
from imagebuild.errors import CommandError
from imagebuild.inputs.layout import MOUNT_POINTS
from imagebuild.util.run import run_feeding

TAR2SQFS = "tar2sqfs"
JOBS = 2  # fixed, not the core count, so the job count is never what differs between two machines' exports
# The compressor's options (tar2sqfs -X): the levels of the other archives (imagebuild.distribute.compression).
COMPRESSOR_OPTIONS = {"zstd": f"level={ZSTD_LEVEL}", "gzip": f"level={GZIP_LEVEL}"}
COMPRESSORS = tuple(COMPRESSOR_OPTIONS)  # export's --compress, as tar2sqfs names them
TIMEOUT_S = 6 * 3600.0
MAGIC = b"hsqs"
BYTES_USED = struct.Struct("<Q")  # the superblock's bytes_used, at offset 40


class SquashfsError(Exception):
    """tar2sqfs failed or wrote something that is not a squashfs (the message says which)."""


@dataclass(frozen=True, kw_only=True)
class Squashfs:
    root: Flattened  # its entries, and the room they take unpacked
    tar_bytes: int  # the rootfs tar tar2sqfs read


class _Counted:
    def __init__(self, out: IO[bytes]) -> None:
        self._out, self.size = out, 0

    def write(self, b: bytes, /) -> int:
        self.size += len(b)
        return self._out.write(b)


def write_squashfs(
    layers: Sequence[Path | StoreLayer], image_config: Mapping[str, Any], path: Path, *, compressor: str
) -> Squashfs:
    """Write the flattened root of ``layers`` with the config's runtime files to ``path``."""
    extra = runtime_files(image_config)
    workdir = working_directory(image_config)
    counted: list[_Counted] = []
    flattened: list[Flattened] = []

    def feed(stdin: IO[bytes]) -> None:
        sink = _Counted(stdin)
        counted.append(sink)
        directories = (workdir,) if workdir else ()
        flattened.append(flatten_layers(layers, sink, extra=extra, directories=(*directories, *MOUNT_POINTS)))

    argv = [
        TAR2SQFS, "--quiet", "--no-keep-time", "--no-skip", "--compressor", compressor,
        "--comp-extra", COMPRESSOR_OPTIONS[compressor],
        "--num-jobs", str(JOBS), "--force", str(path),
    ]  # fmt: skip
    try:
        run_feeding(argv, feed, timeout=TIMEOUT_S)
    except CommandError as e:
        raise SquashfsError(str(e)) from e
    check_superblock(path)
    return Squashfs(root=flattened[0], tar_bytes=counted[0].size)


def check_superblock(path: Path) -> None:
    """The file starts with a squashfs superblock whose size fits the file."""
    with path.open("rb") as f:
        head = f.read(48)
    size = path.stat().st_size
    if len(head) < 48 or head[:4] != MAGIC or BYTES_USED.unpack_from(head, 40)[0] > size:
        msg = f"{path}: tar2sqfs wrote no complete squashfs (no superblock, or one larger than the file)"
        raise SquashfsError(msg)
