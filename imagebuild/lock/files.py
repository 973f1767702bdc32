"""Stream a URL and record its sha256 and size in constant memory.

Wheels run to gigabytes (AITER's is ~1 GB), so the body is read in fixed-size
chunks and only the hash state is kept. A body shorter than its
Content-Length is an error (and retried by the HTTP helper), never a hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import requests

from imagebuild.lock.http import CHUNK_SIZE, FetchError, Http


@dataclass(frozen=True, kw_only=True)
class FileDigest:
    sha256: str
    size: int


def hash_url(http: Http, url: str) -> FileDigest:
    """sha256 and size of the bytes served at ``url``."""

    def consume(resp: requests.Response) -> FileDigest:
        digest = hashlib.sha256()
        size = 0
        for chunk in resp.iter_content(CHUNK_SIZE):
            http.check_cancelled()
            digest.update(chunk)
            size += len(chunk)
        expected = resp.headers.get("Content-Length")
        if expected is not None and expected.isdigit() and int(expected) != size:
            # urllib3 normally raises first; this guards servers it trusts.
            msg = f"got {size} of {expected} bytes"
            raise requests.exceptions.ChunkedEncodingError(msg)
        if size == 0:
            raise FetchError(url, "the server sent an empty body", "Check the URL in pins.toml")
        return FileDigest(sha256=digest.hexdigest(), size=size)

    # identity: hash the bytes pip will download, not a transparently decoded body.
    return http.request(url, consume, headers={"Accept-Encoding": "identity"})
