"""Streaming sha256 of URLs, and the HTTP helper's retries and error messages."""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from imagebuild.lock.files import hash_url
from imagebuild.lock.http import FetchError, Http
from imagebuild.testing import free_port
from tests.lock.servers import FileServer
from tests.prerequisites import skip_or_fail

BODY = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes: more than one chunk


def http(timeout: float = 5.0) -> Http:
    return Http(timeout=timeout, backoff=0.01)


def test_hash_and_size(file_server: FileServer) -> None:
    url = file_server.add("/a.whl", BODY)
    with http() as h:
        got = hash_url(h, url)
    assert (got.sha256, got.size) == (hashlib.sha256(BODY).hexdigest(), len(BODY))


def test_transient_500s_are_retried(file_server: FileServer) -> None:
    url = file_server.add("/flaky.whl", BODY)
    file_server.fail_first["/flaky.whl"] = 2
    with http() as h:
        assert hash_url(h, url).size == len(BODY)
    assert file_server.hits["/flaky.whl"] == 3


def test_persistent_500_names_url_status_and_attempts(file_server: FileServer) -> None:
    url = file_server.add("/broken.whl", BODY)
    file_server.fail_first["/broken.whl"] = 99
    with http() as h, pytest.raises(FetchError, match=r"HTTP 500 .*\(after 3 attempts\)") as e:
        hash_url(h, url)
    assert e.value.url == url
    assert "retry later" in e.value.hint


def test_404_is_not_retried(file_server: FileServer) -> None:
    with http() as h, pytest.raises(FetchError, match="HTTP 404") as e:
        hash_url(h, file_server.server.url + "/missing.whl")
    assert file_server.hits["/missing.whl"] == 1
    assert "check the name" in e.value.hint


def test_hanging_server_times_out(file_server: FileServer) -> None:
    url = file_server.add("/hang.whl", BODY)
    file_server.hang.add("/hang.whl")
    with http(timeout=0.2) as h, pytest.raises(FetchError, match=r"timed out after 0\.2s") as e:
        hash_url(h, url)
    assert "--timeout" in e.value.hint


def test_cut_stream_is_an_error_not_a_hash(file_server: FileServer) -> None:
    url = file_server.add("/cut.whl", BODY)
    file_server.cut.add("/cut.whl")
    with http() as h, pytest.raises(FetchError, match="connection dropped before the whole body arrived"):
        hash_url(h, url)
    assert file_server.hits["/cut.whl"] == 3  # retried


def test_dns_failure_is_named() -> None:
    with http() as h, pytest.raises(FetchError, match="DNS lookup failed") as e:
        hash_url(h, "https://files.example.invalid/a.whl")
    assert "host name" in e.value.hint


def test_connection_refused_is_named() -> None:
    with http() as h, pytest.raises(FetchError, match="connection refused"):
        hash_url(h, f"http://127.0.0.1:{free_port()}/a.whl")


class _OverlongServer:
    """A raw loopback server whose every GET answer is ``body`` + ``extra`` under ``Content-Length: len(body)``.

    Not http.server: it would not send more than it declares. ``extra`` goes after ``delay`` seconds
    (in flight when the client finishes the body); with ``close=False`` the server then keeps the
    connection open, ignoring the request's Connection: close.
    """

    def __init__(self, body: bytes, extra: bytes, *, delay: float = 0.0, close: bool = True) -> None:
        self.body, self.extra, self.delay, self.close_after = body, extra, delay, close
        self._socket = socket.create_server(("127.0.0.1", free_port()))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/demo-1.0-py3-none-any.whl"
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._socket.accept()
                request = b""
                while b"\r\n\r\n" not in request and (data := connection.recv(65536)):
                    request += data
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                head += b"Content-Length: %d\r\n\r\n" % len(self.body)
                connection.sendall(head if request.startswith(b"HEAD") else head + self.body)
                if self.delay:
                    time.sleep(self.delay)
                if self.extra and not request.startswith(b"HEAD"):
                    connection.sendall(self.extra)
                if self.close_after:
                    connection.close()
                else:
                    self._held.append(connection)

    def close(self) -> None:
        # shutdown wakes the blocked accept(); a bare close would leave it waiting on an fd number
        # the next test's server may be given, answering that server's requests with this wheel.
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        self._socket.close()
        for connection in self._held:
            connection.close()


def _wheel() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        wheel.writestr("demo/__init__.py", "")
        wheel.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        wheel.writestr(
            "demo-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr("demo-1.0.dist-info/RECORD", "")
    return out.getvalue()


def test_a_body_longer_than_its_content_length_is_refused_though_pip_and_curl_drop_the_tail(
    tmp_path: Path,
) -> None:
    """requests (urllib3), pip and curl all stop at Content-Length and drop the rest without a word; the
    lock refuses such a source instead of pinning it."""
    wheel = _wheel()
    server = _OverlongServer(wheel, extra=b"appended after the declared length" * 64)
    try:
        with (
            http() as h,
            pytest.raises(FetchError, match=f"more than the {len(wheel)} bytes its Content-Length"),
        ):
            hash_url(h, server.url, zip_required=True)
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-index", "--no-cache-dir", "--isolated",
             "--disable-pip-version-check", "-d", str(tmp_path / "pip"), server.url],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert pip.returncode == 0, pip.stderr
        assert (tmp_path / "pip" / "demo-1.0-py3-none-any.whl").read_bytes() == wheel
        curl = shutil.which("curl")
        if curl is None:
            skip_or_fail("no curl on PATH: the build's wheel fetch (curl -fsSL) is unchecked here")
        fetched = subprocess.run(
            [curl, "-fsSL", "-o", str(tmp_path / "curl.whl"), server.url],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert fetched.returncode == 0, fetched.stderr
        assert (tmp_path / "curl.whl").read_bytes() == wheel
    finally:
        server.close()


def test_bytes_still_in_flight_after_the_declared_body_are_refused() -> None:
    server = _OverlongServer(_wheel(), extra=b"late", delay=0.1)
    try:
        with http() as h, pytest.raises(FetchError, match="more than the"):
            hash_url(h, server.url, zip_required=True)
    finally:
        server.close()


def test_a_server_that_keeps_the_connection_open_and_sends_nothing_more_passes() -> None:
    wheel = _wheel()
    server = _OverlongServer(wheel, extra=b"", close=False)
    try:
        started = time.monotonic()
        with http() as h:
            got = hash_url(h, server.url, zip_required=True)
        assert (got.sha256, got.size) == (hashlib.sha256(wheel).hexdigest(), len(wheel))
        assert time.monotonic() - started < 5  # the wait for its close is bounded
    finally:
        server.close()
