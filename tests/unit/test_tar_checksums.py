"""The faster tar header checksums give tarfile's own results, so every tar reads and writes the same."""

from __future__ import annotations

import io
import struct
import tarfile
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

import imagebuild.util.streams  # noqa: F401 - installs the checksums, as every tar reader here does
from imagebuild.util.tar_checksums import _STANDARD, calc_chksums, install


@given(st.binary(min_size=512, max_size=512))
def test_both_checksums_are_tarfile_s_own(header: bytes) -> None:
    assert calc_chksums(header) == _STANDARD(header)


@pytest.mark.parametrize("header", [bytes(512), b"\x80" * 512, b"\xff" * 512, bytes(range(256)) * 2])
def test_the_extremes(header: bytes) -> None:
    assert calc_chksums(header) == _STANDARD(header)


def test_what_is_not_a_full_header_goes_to_tarfile_s_own() -> None:
    with pytest.raises(struct.error):
        _STANDARD(b"short")
    with pytest.raises(struct.error):
        calc_chksums(b"short")
    assert calc_chksums(cast("bytes", bytearray(512))) == _STANDARD(bytearray(512))


def test_installed_once_and_tars_are_the_same_bytes() -> None:
    install()
    assert cast("Any", tarfile).calc_chksums is calc_chksums

    def archive() -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in ("usr/lib/é/ü.py", "a" * 120, "plain"):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.uname = 3, 2_000_000_000, "rööt"
                tar.addfile(info, io.BytesIO(b"abc"))
        return out.getvalue()

    ours = archive()
    module = cast("Any", tarfile)
    module.calc_chksums = _STANDARD
    try:
        assert archive() == ours
        with tarfile.open(fileobj=io.BytesIO(ours)) as tar:  # read back with the standard checksums
            assert [m.name for m in tar] == ["usr/lib/é/ü.py", "a" * 120, "plain"]
    finally:
        module.calc_chksums = calc_chksums
