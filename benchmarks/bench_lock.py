"""Benchmark ``imagebuild lock``: concurrency, constant-memory hashing, failing fast.

    python benchmarks/bench_lock.py [--sources 20] [--delay 0.2] [--jobs 8] [--size-mb 1024]
                                    [--fault-timeouts 2,30]

1. Wall time to lock N sources (1 image, pypi pins, wheel URLs) served by a
   local server that delays every answer by --delay seconds. Target with 20
   sources at 200 ms: under 1.5 s (one by one it would be 4 s).
2. Peak memory of a child process that hashes a --size-mb file streamed from
   a local server: tracemalloc peak (Python allocations) and ru_maxrss (the
   whole process, interpreter included). Target: under 100 MB for 1 GB.
3. `imagebuild lock` (a fresh process, as a user runs it) against a source
   that accepts the connection and never answers: time to fail with each
   --timeout of --fault-timeouts (target: about one timeout, not three), and
   the time from Ctrl-C (SIGINT) to exit while a download and a git helper
   wait on it (target: about a second; pins.toml byte-identical).

A script, not a test: it prints numbers and exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.inputs.arch import ArchProfile  # noqa: E402
from imagebuild.lock import LockOptions, lock  # noqa: E402

CHUNK = bytes(range(256)) * 4096  # 1 MiB


def _zip(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pkg/__init__.py", data)
    return buffer.getvalue()


WHEEL = _zip(b"wheel bytes " * 1000)  # a wheel download must be a zip
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
            result = lock(LockOptions(pins_path=path, arch=ARCH, base_pin="base", jobs=jobs, timeout=10, deadline=60))
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


class _Silent:
    """Accepts connections and never answers; counts them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.held:
            conn.close()


def _lock_process(pins: Path, timeout: float) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "imagebuild", "lock", "--only", "pins", "--pins", str(pins)]
    cmd += ["--timeout", f"{timeout:g}"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def bench_faults(timeouts: list[float]) -> tuple[list[tuple[float, float, int]], float, bool]:
    """([(timeout, seconds to fail, exit code)], seconds from SIGINT to exit, pins unchanged?)."""
    silent = _Silent()
    url = f"http://127.0.0.1:{silent.port}"
    failing: list[tuple[float, float, int]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pins = Path(tmp) / "pins.toml"
            pins.write_text(
                f'[aiter]\nkind = "wheel"\nurl = "{url}/a.whl"\nversion = "1"\nsha256 = ""\nsize = 0\n',
                encoding="utf-8",
            )
            for timeout in timeouts:
                started = time.perf_counter()
                proc = _lock_process(pins, timeout)
                proc.communicate()
                failing.append((timeout, time.perf_counter() - started, proc.returncode))
            with pins.open("a", encoding="utf-8") as f:
                f.write(f'\n[mori]\nkind = "git"\nurl = "{url}/mori.git"\ntag = "v1"\ncommit = ""\n')
            before = pins.read_bytes()
            connected = len(silent.held)
            proc = _lock_process(pins, 30)
            while len(silent.held) < connected + 2:  # the download and git's helper are waiting
                time.sleep(0.01)
            started = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            proc.communicate()
            latency = time.perf_counter() - started
            unchanged = pins.read_bytes() == before and proc.returncode == 130
    finally:
        silent.close()
    return failing, latency, unchanged


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sources", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--fault-timeouts", default="2,30", help="--timeout values to fail against")
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
    failing, latency, unchanged = bench_faults([float(t) for t in args.fault_timeouts.split(",")])
    for timeout, seconds, code in failing:
        print(
            f"lock against a source that never answers, --timeout {timeout:g}: failed (exit {code}) "
            f"after {seconds:.2f} s, interpreter start-up included (target: about one timeout)"
        )
    print(
        f"Ctrl-C during a lock waiting on a silent download and git: exited after {latency:.2f} s "
        f"(target: about 1 s); pins.toml byte-identical and exit 130: {unchanged}"
    )


if __name__ == "__main__":
    main()
