"""BackgroundSha256: the digest hashlib gives the same bytes, whichever thread hashed them."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from imagebuild.util.background_hash import BATCH, BackgroundSha256


def test_the_digest_is_hashlibs_of_the_same_bytes() -> None:
    chunks = [os.urandom(n) for n in (0, 1, 4096, 1 << 20, 3)] * 5
    with BackgroundSha256(depth=2) as digest:
        for chunk in chunks:
            digest.update(chunk)
        assert digest.hexdigest() == hashlib.sha256(b"".join(chunks)).hexdigest()


def test_a_buffer_changed_after_update_is_hashed_as_it_was_given() -> None:
    buffer = bytearray(b"a" * 1000)
    digest = BackgroundSha256()
    digest.update(buffer)
    digest.update(memoryview(buffer)[:10])
    buffer[:] = b"b" * 1000  # a compressor reusing its output buffer
    assert digest.hexdigest() == hashlib.sha256(b"a" * 1010).hexdigest()


def test_small_updates_batched_across_the_limit_keep_their_order_with_large_ones() -> None:
    small = [os.urandom(512) for _ in range(2 * BATCH // 512 + 3)]  # tar headers: past the batch limit twice
    large = bytearray(os.urandom(BATCH + 1))
    given = b"".join(small[:-2]) + bytes(large) + b"".join(small[-2:])
    digest = BackgroundSha256(depth=1)
    for chunk in small[:-2]:
        digest.update(chunk)
    digest.update(large)
    large[:] = bytes(len(large))  # reused by its owner after update: what was given counts
    for chunk in small[-2:]:
        digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(given).hexdigest()


def test_an_abandoned_stream_stops_its_thread_and_takes_no_more_bytes() -> None:
    before = threading.active_count()
    with BackgroundSha256() as digest:
        digest.update(b"part")
    assert threading.active_count() == before
    with pytest.raises(ValueError, match="after hexdigest"):
        digest.update(b"more")
