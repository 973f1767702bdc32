"""What the importer's load stream costs: the name filter over a ~1 GB synthetic tar, against a plain copy.

The tar is made on the fly, one chunk at a time, and never held whole: a docker-save-like archive
(a few large layer files, a manifest.json naming a tag for the filter to rewrite) and, separately,
a tar of many small files, where the filter's per-header work shows. Each run gets the tar's chunks
as fresh bytes, as a decompressor hands them on; the consumer touches every byte it is given
(a copy of each chunk), so the baseline is "copy the stream once". Then the same with zstd
decompression in front (the zstandard module, the ``imagebuild import`` path), where the filter's
share of the whole is what a user pays.

    python benchmarks/bench_load_stream.py [--gb 1.0] [--repeat 3]

Needs nothing but this checkout's virtualenv (no engine). Prints MB/s; fastest of --repeat runs.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import sys
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import zstandard  # noqa: E402

from imagebuild.importer.load_stream import CHUNK_SIZE, engine_tar  # noqa: E402
from imagebuild.importer.manifest import Manifest  # noqa: E402

MB = 1e6


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _member(name: str, size: int, fill: bytes) -> Iterator[bytes]:
    yield _header(name, size)
    whole, rest = divmod(size, CHUNK_SIZE)
    for _ in range(whole):
        yield fill * (CHUNK_SIZE // len(fill))  # fresh bytes each time, as a decompressor's
    if rest:
        yield fill[:1] * rest
    yield bytes(-size % 512)


def saved_image(total: int) -> Iterator[bytes]:
    """A docker-save-like tar of ``total`` bytes: four layers, a config, a manifest naming a tag."""
    layer = total // 4
    for n in range(4):
        yield from _member(f"layer{n}/layer.tar", layer - 4096, bytes(range(256)))
    yield from _member("config.json", 2, b"{}")
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["victim:latest"], "Layers": []}]).encode()
    yield _header("manifest.json", len(manifest)) + manifest + bytes(-len(manifest) % 512)
    yield bytes(1024)


def small_files(total: int, size: int = 4096) -> Iterator[bytes]:
    """A tar of ``total`` bytes in files of ``size`` bytes: one header per file (all of one name)."""
    record = _header("f/small", size) + bytes(range(256)) * (size // 256)
    chunk = record * (CHUNK_SIZE // len(record))
    for _ in range(total // len(chunk)):
        yield memoryview(chunk).tobytes()  # fresh bytes each time, as a decompressor's
    yield bytes(1024)


def compressed(chunks: Iterable[bytes]) -> list[bytes]:
    """zstd level 3, as export writes (kept in memory: a synthetic tar compresses to a few MB)."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    out = [compressor.compress(chunk) for chunk in chunks]
    out.append(compressor.flush())
    return [chunk for chunk in out if chunk]


def unzstd(stored: list[bytes]) -> Iterator[bytes]:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(b"".join(stored)), read_size=CHUNK_SIZE)
    yield from iter(lambda: reader.read(CHUNK_SIZE), b"")


def load_stream(chunks: Iterable[bytes], compression: str, total: int) -> Iterator[bytes]:
    """What the importer sends the engine (bound and filter included) for an archive of these chunks."""
    manifest = Manifest(
        archive="bench.tar", sha256="0" * 64, size=total, compression=compression, image_id="sha256:" + "0" * 64,
        repo_tags=(), pins={}, labels={}, imagebuild_version="bench", uncompressed_size=2 * total,
    )  # fmt: skip
    return engine_tar(iter(chunks), manifest, Path("bench.tar"))


def consume(chunks: Iterable[bytes]) -> int:
    """Touch every byte once, as a socket send does: a copy of each chunk."""
    return sum(len(memoryview(chunk).tobytes()) for chunk in chunks)


def fastest(repeat: int, run: Callable[[], int]) -> tuple[float, int]:
    best, size = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        size = run()
        best = min(best, time.perf_counter() - started)
    return best, size


def _copy(make: Callable[[int], Iterator[bytes]], total: int) -> int:
    return consume(make(total))


def _filtered(make: Callable[[int], Iterator[bytes]], total: int) -> int:
    return consume(load_stream(make(total), "none", total))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gb", type=float, default=1.0, help="size of each synthetic tar (default 1.0)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    total = int(args.gb * 1e9)
    rows = []
    sources: tuple[tuple[str, Callable[[int], Iterator[bytes]]], ...] = (
        ("docker-save-like", saved_image),
        ("4 KiB files", small_files),
    )
    for label, make in sources:
        copy = fastest(args.repeat, functools.partial(_copy, make, total))
        filtered = fastest(args.repeat, functools.partial(_filtered, make, total))
        rows.append((f"{label}: plain copy", *copy))
        rows.append((f"{label}: name filter", *filtered))
    stored = compressed(saved_image(total))
    rows.append(("docker-save-like: zstd decompression", *fastest(args.repeat, lambda: consume(unzstd(stored)))))
    rows.append(("docker-save-like: zstd + name filter", *fastest(args.repeat, lambda: consume(load_stream(stored, "zstd", total)))))
    print(f"{'stream':<42} {'MB':>8} {'seconds':>8} {'MB/s':>8}")
    for label, seconds, size in rows:
        print(f"{label:<42} {size / MB:8.0f} {seconds:8.2f} {size / MB / seconds:8.0f}")


if __name__ == "__main__":
    main()
