"""Stream a URL and record its sha256 and size in constant memory.

Wheels run to gigabytes (AITER's is ~1 GB), so the body is read in fixed-size
chunks and only the hash state is kept. A body shorter than its
Content-Length is an error (retried by the HTTP helper), never a hash. A
wheel is a zip archive: a download that does not start like one (a login or
release page served with 200) is refused instead of being pinned.

A body longer than its Content-Length is refused too (``body_end``): requests,
pip and curl would drop the tail without a word, but a server that sends it is
broken or lying, and the lock is where a source is judged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import requests

from imagebuild.lock.body_end import TrailingBytesWatcher
from imagebuild.lock.http import CHUNK_SIZE, FetchError, Http

ZIP_MAGIC = b"PK\x03\x04"  # a zip archive's first local file header


@dataclass(frozen=True, kw_only=True)
class FileDigest:
    sha256: str
    size: int


def hash_url(http: Http, url: str, *, zip_required: bool = False) -> FileDigest:
    """sha256 and size of the bytes served at ``url``; with ``zip_required``, they must be a zip."""

    def consume(resp: requests.Response) -> FileDigest:
        trailing = TrailingBytesWatcher(resp)
        digest = hashlib.sha256()
        size = 0
        head = b""
        for chunk in resp.iter_content(CHUNK_SIZE):
            http.check_cancelled()
            if zip_required and len(head) < len(ZIP_MAGIC):
                head += chunk[: len(ZIP_MAGIC)]
                if len(head) >= len(ZIP_MAGIC) and not head.startswith(ZIP_MAGIC):
                    raise _not_a_zip(url, resp, head)
            digest.update(chunk)
            size += len(chunk)
        expected = resp.headers.get("Content-Length")
        if expected is not None and expected.isdigit() and int(expected) != size:
            # urllib3 normally raises first; this guards servers it trusts.
            msg = f"got {size} of {expected} bytes"
            raise requests.exceptions.ChunkedEncodingError(msg)
        if trailing.found:
            raise FetchError(
                url,
                f"the server sent more than the {expected} bytes its Content-Length declares",
                "The server is broken or the file was tampered with in transit; fetch it from another mirror",
            )
        if size == 0:
            raise FetchError(url, "the server sent an empty body", "Check the URL in pins.toml")
        if zip_required and not head.startswith(ZIP_MAGIC):
            raise _not_a_zip(url, resp, head)
        return FileDigest(sha256=digest.hexdigest(), size=size)

    # identity: hash the bytes pip will download, not a transparently decoded body.
    # Connection: close lets the watcher tell the server's close from bytes sent past the body.
    return http.request(url, consume, headers={"Accept-Encoding": "identity", "Connection": "close"})


def _not_a_zip(url: str, resp: requests.Response, head: bytes) -> FetchError:
    content_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
    looks_html = content_type == "text/html" or head.lstrip()[:1] == b"<"
    what = "an HTML page" if looks_html else f"{content_type or 'untyped'} content that is not a zip"
    return FetchError(
        url,
        f"the server sent {what}, not a wheel (a wheel is a zip archive)",
        "Check the URL in pins.toml: it must be the wheel file itself, not a release or login page",
    )
