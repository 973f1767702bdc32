"""The rewriter's TarWriter writes what tarfile's "w" mode writes in PAX format, byte for byte."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagebuild.normalize.tar_writer import TarWriter
from imagebuild.util.streams import ENCODING, ERRORS


def entries() -> list[tuple[tarfile.TarInfo, bytes | None]]:
    made: list[tuple[tarfile.TarInfo, bytes | None]] = []

    def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, **fields: object) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mtime, info.mode = kind, 1_700_000_000, 0o644
        for key, value in fields.items():
            setattr(info, key, value)
        if data is not None:
            info.size = len(data)
        made.append((info, data))

    add("usr/", tarfile.DIRTYPE, mode=0o755)
    add("usr/empty", data=b"")
    add("usr/block", data=b"b" * 512)
    add("usr/odd", data=b"o" * 1000)
    add("usr/" + "long-name/" * 20 + "file", data=b"x")  # a PAX path record
    add("usr/caf\udce9", data=b"not utf-8")  # surrogate-escaped bytes
    add("usr/link", tarfile.SYMTYPE, linkname="odd")
    add("usr/hard", tarfile.LNKTYPE, linkname="usr/odd")
    add("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3)
    add("usr/x", data=b"x", pax_headers={"SCHILY.xattr.user.k": "v"}, uid=3_000_000, gid=70_000_000)
    add("usr/big-id", data=b"", uid=2**22)  # past octal's 7 digits: a PAX record
    add("usr/.wh.gone", data=b"")
    return made


def standard(items: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding=ENCODING, errors=ERRORS) as tar:
        for info, data in items:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def ours(items: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    writer = TarWriter(out)
    for info, data in items:
        writer.addfile(info, io.BytesIO(data) if data is not None else None)
    writer.close()
    return out.getvalue()


def test_every_kind_of_entry_is_written_as_tarfile_writes_it() -> None:
    assert ours(entries()) == standard(entries())


@settings(max_examples=50)
@given(st.lists(st.integers(min_value=0, max_value=25_000), max_size=30))
def test_any_sizes_end_on_the_same_record(sizes: list[int]) -> None:
    items: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for number, size in enumerate(sizes):
        info = tarfile.TarInfo(f"f{number}")
        info.size = size
        items.append((info, bytes([number % 256]) * size))
    written = ours(items)
    assert written == standard(items)
    assert len(written) % tarfile.RECORDSIZE == 0


def test_content_that_ends_early_is_an_error() -> None:
    info = tarfile.TarInfo("short")
    info.size = 10
    with pytest.raises(OSError, match="unexpected end of data"):
        TarWriter(io.BytesIO()).addfile(info, io.BytesIO(b"abc"))
