"""Benchmark ``imagebuild lock``: concurrency and constant-memory hashing.

    python benchmarks/bench_lock.py [--sources 20] [--delay 0.2] [--jobs 8] [--size-mb 1024]

1. Wall time to lock N sources (1 image, pypi pins, wheel URLs) served by a
   local server that delays every answer by --delay seconds. Target with 20
   sources at 200 ms: under 1.5 s (one by one it would be 4 s).
2. Peak memory of a child process that hashes a --size-mb file streamed from
   a local server: tracemalloc peak (Python allocations) and ru_maxrss (the
   whole process, interpreter included). Target: under 100 MB for 1 GB.

A script, not a test: it prints numbers and exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.arch import ArchProfile  # noqa: E402
from imagebuild.lock import LockOptions, lock  # noqa: E402

CHUNK = bytes(range(256)) * 4096  # 1 MiB
WHEEL = b"wheel bytes " * 1000
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
ARCH = ArchProfile(
    name="bench",
    description="benchmark",
    platform="linux/amd64",
    gfx_arch="gfx942",
    rocm_arch="gfx942",
    mori_gpu_archs="gfx942",
    nic_arch="cx7",
)


def _index_manifest() -> bytes:
    child = "sha256:" + "1" * 64
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": child,
                    "size": 1,
                    "platform": {"os": "linux", "architecture": "amd64"},
                }
            ],
        }
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    delay = 0.0
    big_size = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        time.sleep(self.delay)
        path = self.path
        if path == "/big.whl":
            self.send_response(200)
            self.send_header("Content-Length", str(self.big_size))
            self.end_headers()
            for _ in range(self.big_size // len(CHUNK)):
                self.wfile.write(CHUNK)
        elif path.startswith("/v2/"):
            self._send(_index_manifest(), INDEX_TYPE)
        elif path.startswith("/simple/"):
            project = path.split("/")[2]
            name = f"{project}-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
            doc = {
                "meta": {"api-version": "1.0"},
                "name": project,
                "files": [{"filename": name, "url": f"/files/{name}", "hashes": {"sha256": "0" * 64}}],
            }
            self._send(json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
        else:
            self._send(WHEEL, "application/octet-stream")


def _serve(delay: float, big_size: int = 0) -> ThreadingHTTPServer:
    handler = type("H", (_Handler,), {"delay": delay, "big_size": big_size})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def _pins(host: str, sources: int) -> str:
    parts = [
        f"""[base]
kind = "image"
image = "{host}/bench/base"
tag = "ci"
digest = ""
platform_digest = ""
python = "3.12"
site_packages = "/usr/local/lib/python3.12/dist-packages"
"""
    ]
    rest = sources - 1
    for i in range(rest // 2):
        parts.append(
            f"""[pkg{i}]
kind = "pypi"
project = "pkg{i}"
version = "1.0"
index = "http://{host}/simple/"
filename = ""
sha256 = ""
"""
        )
    for i in range(rest - rest // 2):
        parts.append(
            f"""[wheel{i}]
kind = "wheel"
url = "http://{host}/wheel{i}.whl"
version = "1.0"
sha256 = ""
size = 0
"""
        )
    return "\n".join(parts)


def bench_concurrency(sources: int, delay: float, jobs: int) -> float:
    server = _serve(delay)
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "pins.toml"
            path.write_text(_pins(host, sources), encoding="utf-8")
            started = time.perf_counter()
            result = lock(LockOptions(pins_path=path, arch=ARCH, jobs=jobs, timeout=10))
            elapsed = time.perf_counter() - started
            assert result.wrote
            assert len(result.changes) == sources
            assert all(c.status == "filled" for c in result.changes)
    finally:
        server.shutdown()
        server.server_close()
    return elapsed


def _child(url: str) -> None:
    """Hash ``url`` and print peak memory as JSON (runs in a fresh process)."""
    import tracemalloc

    from imagebuild.lock.files import hash_url
    from imagebuild.lock.http import Http

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.perf_counter()
    with Http(timeout=30) as http:
        digest = hash_url(http, url)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "sha256": digest.sha256,
                "size": digest.size,
                "seconds": elapsed,
                "tracemalloc_peak": peak,
                "maxrss_kb_before": rss_before,
                "maxrss_kb": rss,
            }
        )
    )


def bench_memory(size_mb: int) -> dict[str, Any]:
    size = size_mb * len(CHUNK)
    server = _serve(0.0, big_size=size)
    url = f"http://127.0.0.1:{server.server_address[1]}/big.whl"
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", url], check=True, capture_output=True, text=True
        ).stdout
    finally:
        server.shutdown()
        server.server_close()
    report: dict[str, Any] = json.loads(out)
    expected = hashlib.sha256()
    for _ in range(size_mb):
        expected.update(CHUNK)
    assert report["sha256"] == expected.hexdigest()
    assert report["size"] == size
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sources", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return

    elapsed = bench_concurrency(args.sources, args.delay, args.jobs)
    sequential = args.sources * args.delay
    print(
        f"lock of {args.sources} sources, {args.delay * 1000:.0f} ms per answer, jobs={args.jobs}: "
        f"{elapsed:.2f} s wall (one by one >= {sequential:.1f} s; target < 1.5 s)"
    )
    mem = bench_memory(args.size_mb)
    mb = 1024 * 1024
    print(
        f"hash of a {args.size_mb} MiB stream: {mem['seconds']:.2f} s, "
        f"tracemalloc peak {mem['tracemalloc_peak'] / mb:.1f} MiB, "
        f"child ru_maxrss {mem['maxrss_kb'] / 1024:.1f} MiB "
        f"(interpreter + imports before hashing: {mem['maxrss_kb_before'] / 1024:.1f} MiB; target < 100 MB)"
    )


if __name__ == "__main__":
    main()
