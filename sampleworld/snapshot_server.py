"""The apt snapshot stand-in's HTTP side: snapshot.debian.org's URL scheme over a directory.

Layout of the served root, as snapshot.debian.org lays out its archive:
  ROOT/archive/debian/<ID>/dists/<suite>/InRelease ...   one directory per dated snapshot
  ROOT/archive/debian/<ID>/pool/...                      its .debs

What snapshot.debian.org answers, and so what this answers: a path under an existing ID is the
file; a path under an ID that is no snapshot redirects (302) to the same path under the newest
snapshot at or before it, so asking for the current time gives the newest snapshot; an ID before
the first snapshot is 404 (older than the service keeps). Publishing a snapshot is creating its
directory (tests move the newest snapshot between two builds so).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

ARCHIVE_PATH = "/archive/debian/"
SNAPSHOT_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z")


def published(root: Path) -> list[str]:
    """The snapshot IDs the archive holds, oldest first."""
    archive = root / ARCHIVE_PATH.strip("/")
    return (
        sorted(p.name for p in archive.iterdir() if p.is_dir() and SNAPSHOT_RE.fullmatch(p.name))
        if archive.is_dir()
        else []
    )


def answer(root: Path, path: str) -> tuple[int, Path | str | None]:
    """(status, the file to send or the Location to redirect to) for a request path."""
    path = unquote(urlsplit(path).path)
    if not path.startswith(ARCHIVE_PATH) or "/../" in f"{path}/":
        return HTTPStatus.NOT_FOUND, None
    snapshot, _, rest = path.removeprefix(ARCHIVE_PATH).partition("/")
    if not SNAPSHOT_RE.fullmatch(snapshot):
        return HTTPStatus.NOT_FOUND, None
    ids = published(root)
    if snapshot not in ids:
        earlier = [i for i in ids if i <= snapshot]
        if not earlier:
            return HTTPStatus.NOT_FOUND, None
        return HTTPStatus.FOUND, f"{ARCHIVE_PATH}{earlier[-1]}/{rest}"
    target = root / ARCHIVE_PATH.strip("/") / snapshot / rest
    return (HTTPStatus.OK, target) if target.is_file() else (HTTPStatus.NOT_FOUND, None)


class _Handler(BaseHTTPRequestHandler):
    root: Path
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._reply(body=True)

    def do_HEAD(self) -> None:
        self._reply(body=False)

    def _reply(self, *, body: bool) -> None:
        status, found = answer(self.root, self.path)
        self.send_response(status)
        if isinstance(found, str):
            self.send_header("Location", found)
        data = found.read_bytes() if isinstance(found, Path) else b""
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


@dataclass
class SnapshotServer:
    httpd: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def archive(self) -> str:
        """What an apt pin's ``archive`` names: the archive root, without the snapshot ID."""
        return self.url + ARCHIVE_PATH.rstrip("/")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_snapshot_server(root: Path, port: int = 0) -> SnapshotServer:
    """Serve ``root`` on 127.0.0.1:``port`` (0: any free port) from a daemon thread."""
    handler = type("SnapshotHandler", (_Handler,), {"root": root})
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return SnapshotServer(httpd=httpd, thread=thread)


def main() -> None:
    """`python -m sampleworld.snapshot_server --root DIR --port N`: the world's snapshot service."""
    import argparse

    parser = argparse.ArgumentParser(prog="sampleworld.snapshot_server")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = start_snapshot_server(args.root, args.port)
    server.thread.join()


if __name__ == "__main__":
    main()
