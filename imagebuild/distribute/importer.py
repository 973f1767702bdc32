#!/usr/bin/env python3
"""Import an image archive written by `imagebuild export`: verify it, load it, tag it.

    python3 imagebuild-import.py DIR/kimi-k3-<id12>.tar.zst.json

This one file is both `imagebuild import` (which passes its own Docker engine) and the importer that
`export` copies next to every archive, so a cluster node needs only python3 (3.8 or later) and a Docker
engine: it uses the standard library alone and talks to the engine's HTTP API over DOCKER_HOST
(unix:// or tcp://, TLS from DOCKER_TLS_VERIFY/DOCKER_CERT_PATH; default /var/run/docker.sock).

One pass over the archive: its bytes are hashed as they stream into the engine. The archive carries no
tags (export saves by image ID), so a load tags nothing; the manifest's tags are applied only after the
sha256 matched and the engine reported the manifest's image ID. A failed check removes the image the
load created (never one that was there before). An image ID already present returns at once.

Exit codes (the same as imagebuild's): 0 imported or already present, 2 bad input (missing or malformed
manifest, missing archive), 3 no Docker engine or the engine refused, 7 integrity (size, sha256 or image
ID differs from the manifest). Messages go to stderr, one line each; the image ID goes to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import queue
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Generator, Iterable, Iterator, Protocol

FORMAT = "imagebuild-image-archive"
FORMAT_VERSION = 1
COMPRESSIONS = ("zstd", "gzip", "none")
EXIT_BAD_INPUT, EXIT_NO_ENGINE, EXIT_INTEGRITY = 2, 3, 7
CHUNK_SIZE = 1 << 20
HASH_QUEUE = 8  # chunks between the reader and the hashing thread: memory stays bounded
PROGRESS_EVERY_S = 10.0
ZSTD_LOAD_API = (1, 42)  # Docker 23.0 is the first engine whose `load` reads zstd archives itself
IMAGE_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# A docker reference with a tag: an optional registry (has a dot or a port, or is localhost), then
# lowercase path components.
REPO_TAG_RE = re.compile(
    r"^(?:(?:(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)(?::[0-9]+)?|[A-Za-z0-9-]+:[0-9]+)/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
)
REQUIRED = {
    "format": str, "format_version": int, "archive": str, "sha256": str, "size": int, "compression": str,
    "image_id": str, "repo_tags": list, "pins": dict, "labels": dict, "imagebuild_version": str,
}  # fmt: skip


class ImportFailure(Exception):
    """A failure reported in one line with a documented exit code."""

    exit_code = 1


class BadInput(ImportFailure):
    exit_code = EXIT_BAD_INPUT


class EngineUnavailable(ImportFailure):
    exit_code = EXIT_NO_ENGINE


class IntegrityFailure(ImportFailure):
    exit_code = EXIT_INTEGRITY


@dataclass(frozen=True)
class Manifest:
    """What `export` wrote beside the archive; the single definition of the format (keyword use only)."""

    archive: str  # a bare file name in the manifest's directory
    sha256: str  # of the archive file as written (compressed bytes)
    size: int
    compression: str
    image_id: str
    repo_tags: tuple[str, ...]
    pins: dict[str, str]
    labels: dict[str, str]
    imagebuild_version: str
    origin: str = ""  # host:directory it was exported to, for "copy it again from host:dir/archive"
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["repo_tags"] = list(self.repo_tags)
        return data


def parse_manifest(data: object, where: str) -> Manifest:
    """Validate a decoded manifest; ``where`` names the file in messages."""
    if not isinstance(data, dict):
        msg = f"manifest {where}: expected a JSON object; export the image again"
        raise BadInput(msg)
    for key, kind in REQUIRED.items():
        if key not in data:
            msg = f"manifest {where}: missing key '{key}'; export the image again"
            raise BadInput(msg)
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            msg = f"manifest {where}: '{key}' must be a {kind.__name__}, not {type(value).__name__}"
            raise BadInput(msg)
    if data["format"] != FORMAT or data["format_version"] != FORMAT_VERSION:
        msg = (
            f"manifest {where}: format {data['format']!r} version {data['format_version']} is not "
            f"{FORMAT!r} version {FORMAT_VERSION}; use the importer shipped next to that archive"
        )
        raise BadInput(msg)
    name = data["archive"]
    if not name or name in (".", "..") or "/" in name or "\\" in name or not name.isprintable():
        msg = f"manifest {where}: 'archive' must be a bare file name beside the manifest, not {name!r}"
        raise BadInput(msg)
    checks = (
        ("sha256", SHA256_RE.match(data["sha256"]), "64 lowercase hex digits"),
        ("image_id", IMAGE_ID_RE.match(data["image_id"]), "sha256: and 64 hex digits"),
        ("compression", data["compression"] in COMPRESSIONS, " or ".join(COMPRESSIONS)),
        ("size", data["size"] >= 0, "a byte count"),
    )
    for key, ok, expected in checks:
        if not ok:
            msg = f"manifest {where}: '{key}' must be {expected}, not {data[key]!r}"
            raise BadInput(msg)
    for tag in data["repo_tags"]:
        if not isinstance(tag, str) or not REPO_TAG_RE.match(tag):
            msg = f"manifest {where}: repo tag {tag!r} is not a repository:tag reference"
            raise BadInput(msg)
    for key in ("pins", "labels"):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data[key].items()):
            msg = f"manifest {where}: '{key}' must map strings to strings"
            raise BadInput(msg)
    origin = data.get("origin", "")
    return Manifest(
        archive=name, sha256=data["sha256"], size=data["size"], compression=data["compression"],
        image_id=data["image_id"], repo_tags=tuple(data["repo_tags"]), pins=dict(data["pins"]),
        labels=dict(data["labels"]), imagebuild_version=data["imagebuild_version"],
        origin=origin if isinstance(origin, str) else "",
    )  # fmt: skip


def read_manifest(path: Path) -> Manifest:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        msg = f"manifest {path}: not found; give the .json that export wrote next to the archive"
        raise BadInput(msg) from None
    except (OSError, UnicodeDecodeError) as e:
        msg = f"manifest {path}: cannot be read ({e})"
        raise BadInput(msg) from None
    try:
        data = json.loads(text)
    except ValueError as e:
        msg = f"manifest {path}: not valid JSON ({e}); export the image again"
        raise BadInput(msg) from None
    return parse_manifest(data, str(path))


class ImportEngine(Protocol):
    """What the importer needs of an engine (imagebuild's DockerEngine, or SocketEngine below)."""

    @property
    def address(self) -> str: ...
    @property
    def loads_zstd(self) -> bool: ...
    def has_image(self, image_id: str) -> bool: ...
    def image_ids(self) -> frozenset[str]: ...
    def load(self, chunks: Iterable[bytes]) -> list[str]: ...
    def tag(self, image_id: str, name: str) -> None: ...
    def remove_image(self, image_id: str) -> None: ...


@dataclass(frozen=True)
class ImportResult:
    image_id: str
    tags: tuple[str, ...]
    already_present: bool
    seconds: float


class _HashingReader:
    """Reads the archive in chunks, counting them and reporting progress now and then.

    A second thread hashes the chunks (hashlib releases the GIL), so hashing overlaps sending to the
    engine instead of adding to it; the queue bounds what is in flight to HASH_QUEUE chunks.
    """

    def __init__(self, file: BinaryIO, total: int, report: Callable[[str], None], name: str) -> None:
        self.file, self.total, self.report, self.name = file, total, report, name
        self.done = 0
        self._next_report = time.monotonic() + PROGRESS_EVERY_S
        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=HASH_QUEUE)
        self._hasher = threading.Thread(target=self._hash_chunks, name="sha256", daemon=True)
        self._hasher.start()

    def _hash_chunks(self) -> None:
        for chunk in iter(self._queue.get, None):
            self._hash.update(chunk)

    def chunks(self) -> Generator[bytes, None, None]:
        for chunk in iter(lambda: self.file.read(CHUNK_SIZE), b""):
            self._queue.put(chunk)
            self.done += len(chunk)
            if time.monotonic() >= self._next_report:
                self._next_report = time.monotonic() + PROGRESS_EVERY_S
                self.report(f"{self.name}: {self.done / 1e9:.1f} of {self.total / 1e9:.1f} GB loaded")
            yield chunk

    def drain(self) -> None:
        """Hash what the engine did not read, to tell a damaged archive from a failing engine."""
        for _ in self.chunks():
            pass

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        if self._hasher.is_alive():
            self._queue.put(None)
            self._hasher.join()


def _zstd_decompressed(chunks: Iterator[bytes], archive: Path) -> Generator[bytes, None, None]:
    """Decompress through the zstd tool, for engines older than Docker 23 (they cannot read zstd)."""
    tool = shutil.which("zstd")
    if tool is None:
        msg = (
            f"archive {archive}: zstd-compressed, the engine predates Docker 23 and cannot read zstd, "
            "and no zstd tool is on PATH: install zstd on this node, or export with --compress gzip"
        )
        raise EngineUnavailable(msg)
    proc = subprocess.Popen([tool, "-dcq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def feed() -> None:
        try:
            for chunk in chunks:
                stdin.write(chunk)
        except (BrokenPipeError, ValueError):  # the reader stopped (engine error); drain() hashes the rest
            pass
        finally:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()

    feeder = threading.Thread(target=feed, name="zstd-feed", daemon=True)
    feeder.start()
    try:
        while True:
            chunk = stdout.read(CHUNK_SIZE)
            if not chunk:
                break
            yield chunk
        feeder.join()
        if proc.wait() != 0:
            msg = f"archive {archive}: zstd could not decompress it (exit {proc.returncode}); copy it again"
            raise IntegrityFailure(msg)
    finally:
        if proc.poll() is None:
            proc.kill()  # stopped early (the engine refused): the feeder then stops on a broken pipe
        stdout.close()
        feeder.join()
        proc.wait()


def import_archive(
    manifest_path: Path, engine: ImportEngine, report: Callable[[str], None] = lambda _: None
) -> ImportResult:
    """Make the manifest's image present and tagged in ``engine``, or fail with nothing tagged."""
    started = time.monotonic()
    manifest = read_manifest(manifest_path)
    if engine.has_image(manifest.image_id):
        _tag(engine, manifest)
        return ImportResult(
            image_id=manifest.image_id, tags=manifest.repo_tags, already_present=True,
            seconds=time.monotonic() - started,
        )  # fmt: skip
    archive = manifest_path.parent / manifest.archive
    where = f"{manifest.origin}/{manifest.archive}" if manifest.origin else "where it was exported"
    again = f"copy it again from {where}"
    try:
        size = archive.stat().st_size
    except FileNotFoundError:
        msg = f"archive {archive}: not found (named by {manifest_path}); {again}"
        raise BadInput(msg) from None
    if size != manifest.size:
        msg = (
            f"archive {archive}: {size} bytes, the manifest says {manifest.size} (truncated or still "
            f"being copied); {again}"
        )
        raise IntegrityFailure(msg)
    before = engine.image_ids()
    report(f"loading {archive.name} ({size / 1e9:.2f} GB, {manifest.compression}) into {engine.address}")
    loaded: list[str] = []
    engine_error: BaseException | None = None
    with archive.open("rb") as file, contextlib.closing(
        _HashingReader(file, size, report, archive.name)
    ) as reader:
        stream: Generator[bytes, None, None] = reader.chunks()
        if manifest.compression == "zstd" and not engine.loads_zstd:
            stream = _zstd_decompressed(stream, archive)
        try:
            loaded = engine.load(stream)
        except Exception as e:  # any engine's failure: judged below, once the whole file is hashed
            engine_error = e
        finally:
            stream.close()  # stops a zstd process the engine left unread
        reader.drain()
        digest = reader.hexdigest()
    if digest != manifest.sha256:
        _remove_new(engine, loaded, before)
        msg = f"archive {archive}: sha256 mismatch (expected {manifest.sha256}, got {digest}); {again}"
        raise IntegrityFailure(msg)
    if engine_error is not None:
        raise engine_error
    if loaded != [manifest.image_id]:
        _remove_new(engine, loaded, before)
        got = ", ".join(loaded) or "nothing"
        msg = (
            f"archive {archive}: the engine loaded {got}, but {manifest_path} says {manifest.image_id}: "
            "archive and manifest do not belong together; export the image again"
        )
        raise IntegrityFailure(msg)
    _tag(engine, manifest)
    return ImportResult(
        image_id=manifest.image_id, tags=manifest.repo_tags, already_present=False,
        seconds=time.monotonic() - started,
    )  # fmt: skip


def _tag(engine: ImportEngine, manifest: Manifest) -> None:
    for name in manifest.repo_tags:
        engine.tag(manifest.image_id, name)


def _remove_new(engine: ImportEngine, loaded: list[str], before: frozenset[str]) -> None:
    for image_id in loaded:
        if image_id not in before:
            engine.remove_image(image_id)


class SocketEngine:
    """The Docker engine API over DOCKER_HOST with http.client: the standard library only."""

    def __init__(self, host: str) -> None:
        self.address = host
        url = urllib.parse.urlsplit(host)
        self._unix = url.path if url.scheme == "unix" else None
        self._netloc = url.netloc if url.scheme == "tcp" else None
        if self._unix is None and self._netloc is None:
            msg = f"DOCKER_HOST={host}: only unix:// and tcp:// engines are supported here"
            raise EngineUnavailable(msg)
        self._tls: ssl.SSLContext | None = None
        if url.scheme == "tcp" and os.environ.get("DOCKER_TLS_VERIFY"):
            certs = Path(os.environ.get("DOCKER_CERT_PATH") or Path.home() / ".docker")
            self._tls = ssl.create_default_context(cafile=str(certs / "ca.pem"))
            self._tls.load_cert_chain(str(certs / "cert.pem"), str(certs / "key.pem"))
        version = self._json("/version", "report its version").get("ApiVersion", "0.0")
        parts = [int(p) for p in str(version).split(".")[:2] if p.isdigit()]
        self.loads_zstd = tuple(parts) >= ZSTD_LOAD_API

    @classmethod
    def from_env(cls) -> SocketEngine:
        return cls(os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock")

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, timeout)
        assert self._netloc is not None
        if self._tls is not None:
            return http.client.HTTPSConnection(self._netloc, timeout=timeout, context=self._tls)
        return http.client.HTTPConnection(self._netloc, timeout=timeout)

    def _request(
        self, method: str, path: str, body: Iterable[bytes] | None = None, timeout: float | None = 60
    ) -> tuple[int, bytes]:
        # Unversioned paths: every engine serves them at its own API version (Docker 29 refuses < 1.44).
        conn = self._connect(timeout)
        try:
            headers = {"Content-Type": "application/x-tar"} if body is not None else {}
            # The engine may hang up mid-upload (bad data): its answer, if it sent one, says why.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                conn.request(method, path, body=body, headers=headers, encode_chunked=body is not None)
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as e:
            msg = (
                f"the Docker engine at {self.address} did not answer {method} {path.split('?', maxsplit=1)[0]} ({e or type(e).__name__}); "
                "start docker on this node, or point DOCKER_HOST at its engine"
            )
            raise EngineUnavailable(msg) from None
        finally:
            conn.close()

    def _call(self, method: str, path: str, what: str, body: Iterable[bytes] | None = None) -> bytes:
        """The response body of a successful call; an error status becomes one line naming ``what``."""
        status, data = self._request(method, path, body, timeout=None if body is not None else 60)
        if status >= 300:
            msg = f"the Docker engine at {self.address} refused to {what}: {_api_error(data)}"
            raise EngineUnavailable(msg)
        return data

    def _json(self, path: str, what: str) -> Any:
        return json.loads(self._call("GET", path, what) or b"{}")

    def has_image(self, image_id: str) -> bool:
        status, data = self._request("GET", f"/images/{image_id}/json")
        if status == 404:
            return False
        if status >= 300:
            msg = f"the Docker engine at {self.address} refused to inspect {image_id}: {_api_error(data)}"
            raise EngineUnavailable(msg)
        return True

    def image_ids(self) -> frozenset[str]:
        return frozenset(str(i["Id"]) for i in self._json("/images/json?all=1", "list images"))

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        data = self._call("POST", "/images/load?quiet=1", "load the archive", body=chunks)
        loaded: list[str] = []
        for line in data.decode(errors="replace").splitlines():
            message = json.loads(line) if line.strip() else {}
            if "error" in message or "errorDetail" in message:
                msg = f"the Docker engine at {self.address} refused to load the archive: {_api_error(line.encode())}"
                raise EngineUnavailable(msg)
            for text in str(message.get("stream", "")).splitlines():
                if text.startswith("Loaded image ID: "):
                    loaded.append(text[len("Loaded image ID: ") :].strip())
                elif text.startswith("Loaded image: "):  # a tagged archive (not one of export's)
                    name = urllib.parse.quote(text[len("Loaded image: ") :].strip(), safe="")
                    loaded.append(str(self._json(f"/images/{name}/json", f"inspect {name}")["Id"]))
        return loaded

    def tag(self, image_id: str, name: str) -> None:
        repository, tag = name.rsplit(":", 1)
        query = urllib.parse.urlencode({"repo": repository, "tag": tag})
        self._call("POST", f"/images/{image_id}/tag?{query}", f"tag {image_id} as {name}")

    def remove_image(self, image_id: str) -> None:
        status, data = self._request("DELETE", f"/images/{image_id}")
        if status >= 300 and status != 404:
            msg = f"the Docker engine at {self.address} refused to remove {image_id}: {_api_error(data)}"
            raise EngineUnavailable(msg)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _api_error(data: bytes) -> str:
    try:
        message = json.loads(data)
    except ValueError:
        return data.decode(errors="replace").strip()[:300] or "no detail"
    if isinstance(message, dict):
        detail = (
            message.get("message")
            or (message.get("errorDetail") or {}).get("message")
            or message.get("error")
        )
        return str(detail or message).strip()
    return str(message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="imagebuild-import", description="Verify an image archive against its manifest and load it."
    )
    parser.add_argument("manifest", type=Path, help="the .json manifest export wrote next to the archive")
    args = parser.parse_args(argv)

    def report(text: str) -> None:
        print(f"imagebuild-import: {text}", file=sys.stderr, flush=True)

    try:
        manifest_path: Path = args.manifest
        read_manifest(manifest_path)  # bad input is reported before the engine is touched
        result = import_archive(manifest_path, SocketEngine.from_env(), report)
    except ImportFailure as e:
        print(f"imagebuild-import: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("imagebuild-import: interrupted; nothing was tagged", file=sys.stderr)
        return 130
    how = "already present" if result.already_present else f"verified and loaded in {result.seconds:.1f}s"
    report(f"{result.image_id} {how}; tagged {', '.join(result.tags) or 'nothing'}")
    print(result.image_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
