"""Streaming sha256 of URLs, and the HTTP helper's retries and error messages."""

from __future__ import annotations

import hashlib

import pytest

from imagebuild.lock.files import hash_url
from imagebuild.lock.http import FetchError, Http
from imagebuild.testing import free_port
from tests.lock.servers import FileServer

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
