"""A small package index: PEP 503 HTML and PEP 691 JSON simple API over a directory of distributions.

Layout of the served root:
  ROOT/packages/<distribution files>   listed by /simple/ and /simple/<project>/
  ROOT/<any other path>                 served as-is under /files/<path> (e.g. release-asset style URLs)
The format follows the Accept header (pip >= 22.2 asks for JSON first); each file link carries its sha256.
Used by `python -m sampleworld up` as a background process and by tests in a thread (start_index_server).
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import re
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sampleworld.layout import PORTS

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPE = "application/vnd.pypi.simple.v1+html"
PACKAGES = "packages"
_HEAD = '<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0">'


def normalize(name: str) -> str:
    """PEP 503 name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str | None:
    """The normalized project a distribution file belongs to, or None for other files."""
    if filename.endswith(".whl"):
        return normalize(filename.split("-", 1)[0])
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            return normalize(filename[: -len(suffix)].rsplit("-", 1)[0])
    return None


class _HashCache:
    """sha256 per file, recomputed only when size or mtime change (wheels are hashed once per server)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[Path, tuple[int, int, str]] = {}

    def sha256(self, path: Path) -> str:
        stat = path.stat()
        with self._lock:
            known = self._known.get(path)
            if known is not None and known[:2] == (stat.st_size, stat.st_mtime_ns):
                return known[2]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        with self._lock:
            self._known[path] = (stat.st_size, stat.st_mtime_ns, digest)
        return digest


def _wants_json(accept: str) -> bool:
    """Pick the representation with the highest q value; HTML when the client states no preference."""
    best_json, best_html = -1.0, 0.0
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media, q = fields[0].lower(), 1.0
        for param in fields[1:]:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        if media == JSON_TYPE:
            best_json = max(best_json, q)
        elif media in (HTML_TYPE, "text/html", "*/*"):
            best_html = max(best_html, q)
    return best_json > 0 and best_json >= best_html


class _Handler(BaseHTTPRequestHandler):
    server: _IndexHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        if not self.server.quiet:
            super().log_message(format, *args)

    def do_HEAD(self) -> None:
        self._dispatch(send_body=False)

    def do_GET(self) -> None:
        self._dispatch(send_body=True)

    def _dispatch(self, *, send_body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        if path in ("/simple", "/simple/"):
            self._send_listing(send_body)
        elif path.startswith("/simple/"):
            self._send_project(path.removeprefix("/simple/").strip("/"), send_body)
        elif path.startswith("/files/"):
            self._send_file(path.removeprefix("/files/"), send_body)
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n", send_body)

    def _send(self, status: HTTPStatus, content_type: str, body: bytes, send_body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Vary", "Accept")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _distributions(self) -> dict[str, list[Path]]:
        projects: dict[str, list[Path]] = {}
        packages = self.server.root / PACKAGES
        if packages.is_dir():
            for path in sorted(packages.iterdir()):
                project = project_of(path.name)
                if project is not None and path.is_file():
                    projects.setdefault(project, []).append(path)
        return projects

    def _send_listing(self, send_body: bool) -> None:
        names = sorted(self._distributions())
        if _wants_json(self.headers.get("Accept", "")):
            doc = {"meta": {"api-version": "1.0"}, "projects": [{"name": n} for n in names]}
            self._send(HTTPStatus.OK, JSON_TYPE, json.dumps(doc).encode(), send_body)
            return
        links = "".join(f'<a href="/simple/{n}/">{n}</a>\n' for n in names)
        page = f"{_HEAD}</head>\n<body>\n{links}</body></html>\n"
        self._send(HTTPStatus.OK, HTML_TYPE, page.encode(), send_body)

    def _send_project(self, raw_name: str, send_body: bool) -> None:
        name = normalize(raw_name)
        if name != raw_name:
            # PEP 503: clients may be redirected to the normalized URL.
            self.send_response(HTTPStatus.MOVED_PERMANENTLY)
            self.send_header("Location", f"/simple/{name}/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        files = self._distributions().get(name)
        if files is None:
            self._send(HTTPStatus.NOT_FOUND, "text/plain", f"no project {name}\n".encode(), send_body)
            return
        entries = [(p.name, f"/files/{PACKAGES}/{p.name}", self.server.hashes.sha256(p)) for p in files]
        if _wants_json(self.headers.get("Accept", "")):
            doc = {
                "meta": {"api-version": "1.0"},
                "name": name,
                "files": [{"filename": f, "url": u, "hashes": {"sha256": h}} for f, u, h in entries],
            }
            self._send(HTTPStatus.OK, JSON_TYPE, json.dumps(doc).encode(), send_body)
            return
        links = "".join(
            f'<a href="{html.escape(u)}#sha256={h}">{html.escape(f)}</a><br>\n' for f, u, h in entries
        )
        page = (
            f"{_HEAD}<title>Links for {name}</title></head>\n"
            f"<body>\n<h1>Links for {name}</h1>\n{links}</body></html>\n"
        )
        self._send(HTTPStatus.OK, HTML_TYPE, page.encode(), send_body)

    def _send_file(self, relative: str, send_body: bool) -> None:
        root = self.server.root.resolve()
        target = (root / relative).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n", send_body)
            return
        size = target.stat().st_size
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if send_body:
            with target.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    self.wfile.write(chunk)


class _IndexHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], root: Path, *, quiet: bool) -> None:
        super().__init__(address, _Handler)
        self.root = root
        self.quiet = quiet
        self.hashes = _HashCache()


@dataclass
class IndexServer:
    """A running index; `url` has no trailing slash, `simple_url` is what pip's --index-url takes."""

    root: Path
    host: str
    port: int
    _server: _IndexHTTPServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def simple_url(self) -> str:
        return f"{self.url}/simple/"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> IndexServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_index_server(
    root: Path, *, host: str = "127.0.0.1", port: int = 0, quiet: bool = True
) -> IndexServer:
    """Serve `root` (see the module doc for its layout) in a daemon thread; port 0 picks a free port."""
    server = _IndexHTTPServer((host, port), root, quiet=quiet)
    thread = threading.Thread(target=server.serve_forever, name=f"index-server-{port}", daemon=True)
    thread.start()
    return IndexServer(root=root, host=host, port=server.server_address[1], _server=server, _thread=thread)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sampleworld.index_server", description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="directory to serve (packages/ inside it)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=PORTS.index)
    args = parser.parse_args(argv)
    server = _IndexHTTPServer((args.host, args.port), args.root, quiet=False)
    server.serve_forever()


if __name__ == "__main__":
    main()
