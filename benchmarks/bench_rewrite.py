"""The layer rewrite alone, in CPU seconds: load-independent numbers for the normaliser's inner loop.

Two synthetic layers, written once under a temporary directory: one file of ``--mb`` MB of random
bytes (the N-GB stage's shape), and ``--files`` small files of 4 KiB (a package tree's shape). Each is
rewritten as the layer-store path does it (``imagebuild.normalize.rewrite.rewrite_layer`` with a
reducer, the input hashed for its diffID check) into a sink that only counts, ``--rounds`` times;
then the large one's sizing pass (``sizes_only``: its content skipped, as the streamed load's first
pass skips it).
Printed per layer: wall time, the process's CPU seconds (every thread: what the machine pays) and
the main thread's (the critical path when a second core is free), per GB or per 1000 entries, and
the load average. On this shared 2-core machine the wall time follows other work; the CPU seconds
do not.

    python benchmarks/bench_rewrite.py [--mb 512] [--files 20000] [--rounds 3] [--checkout DIR]

``--checkout DIR`` measures the imagebuild of another checkout (a worktree of main, say: before and
after a change, on the same machine at the same load); one without the threaded hashes and the
layer directory's digests runs as it is.
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import resource
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if "--checkout" in sys.argv:
    REPO = Path(sys.argv[sys.argv.index("--checkout") + 1]).resolve()
sys.path.insert(0, str(REPO))

from imagebuild.normalize.canonical import LayerReducer  # noqa: E402
from imagebuild.normalize.lower import LowerState  # noqa: E402
from imagebuild.normalize.rewrite import rewrite_layer  # noqa: E402
from imagebuild.util.streams import CHUNK, HashingReader, open_stream  # noqa: E402

NEW = "content" in inspect.signature(rewrite_layer).parameters  # this checkout's rewrite, or an older one

EPOCH = 1_700_000_000


class Counted:
    size = 0

    def write(self, b: bytes, /) -> int:
        self.size += len(b)
        return len(b)


def blob_layer(path: Path, mb: int) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("blob")
        info.size, info.mtime = mb * 1_000_000, 2_000_000_000
        with tempfile.TemporaryFile() as data:
            left = info.size
            while left:
                data.write(os.urandom(min(CHUNK, left)))
                left -= min(CHUNK, left)
            data.seek(0)
            tar.addfile(info, data)


def tree_layer(path: Path, files: int) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in range(files // 100 + 1):
            info = tarfile.TarInfo(f"usr/lib/pkg{d}")
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 2_000_000_000
            tar.addfile(info)
        for n in range(files):
            info = tarfile.TarInfo(f"usr/lib/pkg{n // 100}/module{n}.py")
            info.size, info.mtime = 4096, 2_000_000_000
            tar.addfile(info, io.BytesIO(os.urandom(4096)))


def chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def rewrite_once(path: Path, *, sizes_only: bool = False) -> tuple[float, float, float, int]:
    """(wall, process CPU, main-thread CPU, entries) of one rewrite as the layer-store path runs it;
    ``sizes_only``: its sizing pass (the content skipped, not read)."""
    before, thread_before, started = (
        resource.getrusage(resource.RUSAGE_SELF),
        time.thread_time(),
        time.monotonic(),
    )
    # As the layer-store path calls it: the layer directory's digests are never asked for here.
    new: dict[str, Any] = {"content": lambda _name, _size: lambda: ""} if NEW else {}
    if sizes_only:
        new["sizes_only"] = True
    # The sizing pass reads its stream unhashed (the headers, and zeros for the content).
    source = None if sizes_only else HashingReader(open_stream(chunks(path)), **({"background": True} if NEW else {}))
    try:
        result = rewrite_layer(
            source or open_stream(chunks(path)),  # type: ignore[arg-type]  # only read() is called
            Counted(),
            EPOCH,
            reducer=LayerReducer(LowerState(), EPOCH),
            **new,
        )
        if source is not None:
            source.drain()
            _ = source.digest
    finally:
        if NEW and source is not None:
            source.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return time.monotonic() - started, cpu, time.thread_time() - thread_before, result.entries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", help="the checkout whose imagebuild to measure (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rewrite-") as work:
        blob, tree = Path(work) / "blob.tar", Path(work) / "tree.tar"
        blob_layer(blob, args.mb)
        tree_layer(tree, args.files)
        print(f"imagebuild of {REPO}; load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        sizing = "sizes_only" in inspect.signature(rewrite_layer).parameters
        cases = [(blob, "GB", blob.stat().st_size / 1e9, False), (tree, "1000 entries", 0.0, False)]
        cases += [(blob, "GB", blob.stat().st_size / 1e9, True)] if sizing else []
        for path, per, scale, sizes_only in cases:
            for _ in range(args.rounds):
                wall, cpu, main_cpu, entries = rewrite_once(path, sizes_only=sizes_only)
                unit = scale or entries / 1000
                print(
                    f"{path.name}{' (sizes only)' if sizes_only else ''}: {path.stat().st_size / 1e6:.0f} MB, "
                    f"{entries} entries; wall {wall:.2f} s, "
                    f"CPU {cpu:.2f} s ({cpu / unit:.3f} s per {per}), main thread {main_cpu:.2f} s "
                    f"({main_cpu / unit:.3f} s per {per})"
                )
        print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
