"""The tar an engine loads, with every name the archive carries taken out: only the importer tags.

``docker load`` applies the names an archive carries (``RepoTags`` in ``manifest.json``, the legacy
``repositories`` file, name annotations in ``index.json``) before anything is checked, and the API
has no way to load without them. So the importer hands the engine a tar in which no member carries
a name: ``manifest.json``'s ``RepoTags`` become null, ``repositories`` is left out, and the
descriptors of ``index.json`` lose ``io.containerd.image.name`` and
``org.opencontainers.image.ref.name``. Every other member passes byte for byte.

A member is one of those by its EFFECTIVE name, the one the engine's untar (Go's archive/tar, then
``filepath.Clean`` and a join under the load directory) gives it: the last PAX ``x`` record's
``path`` replaces the header's name (ustar prefix included), a GNU ``L`` long name replaces both,
and ``./``, ``a/../`` and leading ``/`` fall away. This module parses each header as Go does
(checksum, octal and base-256 numbers, header-only types) and refuses, as IntegrityFailure, what it
cannot read the same way: a bad checksum, a PAX global header setting a path, sparse files, a
member under a symbolic link of the same archive (the untar writes through it, so ``x -> .`` and
``x/manifest.json`` would be the top-level file), one of the named files as anything but a regular
file, two PAX or GNU records for one member, and a tar that ends early (records a global header
makes Go forget are dropped, so that no reader applies them). The two end-of-archive
blocks are sent only once the whole input has been read (``end``): a stream refused after the last
member never reaches the engine as a complete tar, so nothing is loaded from it. What follows the
end blocks (record padding) is dropped.

Layer files the engine already holds (``skip``: their effective names, from ``held_layers``) are
left out as well, with any hard link to them: a graph-driver engine's load finds such a layer by
its chain ID and never opens the file, so it need not be sent (a node that holds the base is sent
the build's layers alone). Their bytes are still read and hashed by the caller.

Only the 512-byte headers are parsed; member data is handed on as slices of the input chunks, so
passing a layer costs a slice per chunk (numbers in ``load_stream``'s docstring and the README).
Standard library only, as the whole importer.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any, List, Tuple, Union

from .failures import IntegrityFailure

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
TAR_END = bytes(2 * BLOCK)
MAX_RECORDS = 1 << 20  # Go's archive/tar refuses PAX and GNU long-name records larger than this
MAX_INDEX = 8 << 20  # manifest.json and index.json: kilobytes in any real archive
REWRITTEN = ("manifest.json", "index.json")  # loaded with their names taken out
DROPPED = "repositories"  # the legacy name file: nothing but names
NAME_ANNOTATIONS = frozenset({"io.containerd.image.name", "org.opencontainers.image.ref.name"})
HEADER_ONLY = frozenset(b"123456")  # Go: links, devices, directories and FIFOs carry no data
META = frozenset(b"xLK")  # PAX extended header, GNU long name, GNU long link name
REGULAR = frozenset(b"07")  # "\0" is made "0" (or "5" for a name ending in "/") first

Piece = Union[bytes, memoryview]


class TarFilter:
    """Push the decompressed tar in with ``feed``; what the engine may load comes out, then ``end``."""

    def __init__(self, archive: str, skip: frozenset[str] = frozenset()) -> None:
        self.archive = archive
        self._skip = skip  # layer files the engine holds: left out (see the module's doc)
        self.skipped = 0  # bytes of layer files left out
        self._partial = bytearray()  # a header block split across input chunks
        self._data_left = 0  # bytes of the current member's data and padding still to come
        self._data_kind = "pass"  # pass | drop | keep
        self._kept = bytearray()
        self._member: _Member | None = None  # the member (or record) whose data is being read
        self._held: list[bytes] = []  # PAX and GNU records, emitted with the member they describe
        self._records: dict[str, _Member] = {}  # by kind: "x", "L", "K"
        self._links: set[str] = set()
        self._zero_blocks = 0
        self._ended = False
        self.offset = 0  # of the tar: where the next byte of input belongs

    def feed(self, data: bytes) -> list[Piece]:
        out: list[Piece] = []
        view, at, size = memoryview(data), 0, len(data)
        while at < size and not self._ended:
            if self._data_left:
                take = min(self._data_left, size - at)
                if self._data_kind == "pass":
                    out.append(data if take == size else view[at : at + take])
                elif self._data_kind == "keep":
                    self._kept += view[at : at + take]
                at += take
                self._data_left -= take
                self.offset += take
                if not self._data_left:
                    out += self._data_done()
                continue
            take = min(BLOCK - len(self._partial), size - at)
            if not self._partial and take == BLOCK:
                block = bytes(view[at : at + BLOCK])
            else:
                self._partial += view[at : at + take]
                block = bytes(self._partial) if len(self._partial) == BLOCK else b""
            at += take
            self.offset += take
            if block:
                self._partial.clear()
                out += self._header(block, self.offset - BLOCK)
        return out

    def end(self) -> list[Piece]:
        """The end-of-archive blocks, once the input is over; a tar that ended early is refused."""
        if not self._ended:
            where = f"inside {self._member.name!r}" if self._data_left and self._member else "before its end-of-archive blocks"
            self._refuse(f"the tar ends early (at byte {self.offset}, {where}); copy it again")
        return [TAR_END]

    def _refuse(self, reason: str) -> None:
        msg = f"archive {self.archive}: {reason}"
        raise IntegrityFailure(msg)

    def _header(self, block: bytes, offset: int) -> list[Piece]:
        if block == ZERO_BLOCK:
            self._zero_blocks += 1
            if self._held:
                self._refuse(f"a PAX or GNU record at byte {offset - BLOCK} describes no member; export the image again")
            self._ended = self._zero_blocks == 2  # sent by end(), after the last byte of input
            return []
        if self._zero_blocks:
            self._refuse(f"a lone zero block before byte {offset}, where the tar should end or go on; copy it again")
        member = _parse_header(block, offset, self.archive)
        if member.kind in META:
            return self._record(member, block)
        if member.kind == ord("g"):
            return self._global(member, block)
        if member.kind == ord("S"):
            self._refuse(f"member at byte {offset} is a GNU sparse file, which no image archive holds; export the image again")
        return self._entry(member, block)

    def _record(self, member: _Member, block: bytes) -> list[Piece]:
        kind = chr(member.kind)
        if kind in self._records:
            self._refuse(f"two {_RECORD_NAMES[kind]} records for one member at byte {member.offset}; export the image again")
        if member.size > MAX_RECORDS:
            self._refuse(f"a {_RECORD_NAMES[kind]} record of {member.size} bytes at byte {member.offset}; export the image again")
        self._records[kind] = member
        self._held.append(block)
        self._read_data(member, _padded(member.size), "keep")
        return self._data_done() if not member.size else []

    def _global(self, member: _Member, block: bytes) -> list[Piece]:
        if member.size > MAX_RECORDS:
            self._refuse(f"a PAX global header of {member.size} bytes at byte {member.offset}; export the image again")
        # Go forgets the PAX and GNU records before a global header (Python's tarfile does not): dropped,
        # so that no reader of what the engine is sent can apply them to the member after it.
        self._held, self._records = [block], {}
        self._read_data(member, _padded(member.size), "keep")
        return self._data_done() if not member.size else []

    def _entry(self, member: _Member, block: bytes) -> list[Piece]:
        pax = _pax_records(self._records["x"].data, self._records["x"], self.archive) if "x" in self._records else {}
        member.apply(pax, self._records.get("L"), self._records.get("K"), self.archive)
        self._records.clear()
        name = member.effective
        for depth in range(1, name.count("/") + 1 if self._links else 1):
            parent = name.rsplit("/", depth)[0]
            if parent in self._links:
                self._refuse(f"member {name!r} at byte {member.offset} lies under the symbolic link {parent!r} of the same archive; export the image again")
        if member.kind == ord("2"):
            self._links.add(name)
        data_size = 0 if member.kind in HEADER_ONLY else _padded(member.size)
        held, self._held = self._held, []
        if name == DROPPED or self._held_layer(member, name):
            self._read_data(member, data_size, "drop")
            return []
        if name in REWRITTEN:
            if member.kind not in REGULAR:
                self._refuse(f"member {name!r} at byte {member.offset} is not a regular file; export the image again")
            if member.size > MAX_INDEX:
                self._refuse(f"member {name!r} is {member.size} bytes; an index file is a few kilobytes")
            self._read_data(member, data_size, "keep")
            return [] if data_size else self._data_done()
        self._read_data(member, data_size, "pass")
        return [*held, block]

    def _held_layer(self, member: _Member, name: str) -> bool:
        """A layer file the engine holds (a regular file named in ``skip``), or a hard link to one."""
        if not self._skip:
            return False
        if member.kind in REGULAR and name in self._skip:
            self.skipped += member.size
            return True
        return member.kind == ord("1") and posixpath.normpath(member.linkname).lstrip("/") in self._skip

    def _read_data(self, member: _Member, size: int, kind: str) -> None:
        self._member, self._data_left, self._data_kind = member, size, kind
        self._kept = bytearray()

    def _data_done(self) -> list[Piece]:
        """A member's data is complete: a record is parsed, a named file rewritten."""
        member = self._member
        if self._data_kind != "keep" or member is None:
            return []
        padded, self._kept = bytes(self._kept), bytearray()
        data = padded[: member.size]
        if member.kind in META:  # sent with the member it describes, unless that member is rewritten
            self._records[chr(member.kind)].data = data
            self._held.append(padded)
            return []
        if member.kind == ord("g"):  # an entry of its own to Go, which forgets the records before it
            if "path" in _pax_records(data, member, self.archive):
                self._refuse(f"a PAX global header at byte {member.offset} sets a path for the members after it; export the image again")
            held, self._held = [*self._held, padded], []
            return list(held)
        rewritten = _without_names(member.effective, data, self.archive)
        return [_ustar_header(member.effective, len(rewritten)), rewritten, bytes(_padded(len(rewritten)) - len(rewritten))]


_RECORD_NAMES = {"x": "PAX extended header", "L": "GNU long name", "K": "GNU long link name"}


class _Member:
    """One header as Go's archive/tar reads it (``reader.go``: readHeader, then Next's merging)."""

    def __init__(self, *, kind: int, name: str, linkname: str, size: int, offset: int) -> None:
        self.kind, self.name, self.linkname, self.size, self.offset = kind, name, linkname, size, offset
        self.data = b""  # a record's content, once read

    def apply(self, pax: dict[str, str], long_name: _Member | None, long_link: _Member | None, archive: str) -> None:
        """PAX records first, then GNU long names over them, then the untyped regular-file flag."""
        if "path" in pax:
            self.name = pax["path"]
        if "linkpath" in pax:
            self.linkname = pax["linkpath"]
        if "size" in pax:
            size = pax["size"]
            if not size.isdigit():
                msg = f"archive {archive}: member {self.name!r} at byte {self.offset} has a PAX size {size!r}; export the image again"
                raise IntegrityFailure(msg)
            self.size = int(size)
        if long_name is not None and _c_string(long_name.data):
            self.name = _c_string(long_name.data)
        if long_link is not None and _c_string(long_link.data):
            self.linkname = _c_string(long_link.data)
        if self.kind == 0:
            self.kind = ord("5") if self.name.endswith("/") else ord("0")

    @property
    def effective(self) -> str:
        """The path the engine's untar writes: filepath.Clean, then joined under its directory."""
        return posixpath.normpath(self.name).lstrip("/") or "."


def _ustar_header(name: str, size: int) -> bytes:
    """A clean ustar header of a read-only regular file, as export writes its own (the same bytes from
    every Python: tarfile's differ between versions in the device fields)."""
    fields = [
        name.encode().ljust(100, b"\0"), b"0000444\0", b"0000000\0", b"0000000\0", b"%011o\0" % size,
        b"00000000000\0", b" " * 8, b"0", bytes(100), b"ustar\0", b"00", bytes(32), bytes(32), bytes(8), bytes(8),
    ]  # fmt: skip
    block = b"".join(fields).ljust(BLOCK, b"\0")
    return block[:148] + b"%06o\0 " % sum(block) + block[156:]


def _c_string(data: bytes) -> str:
    """Go's parseString: up to the first NUL (names are bytes; surrogateescape keeps them exact)."""
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes, what: str, offset: int, archive: str) -> int:
    """Go's parseNumeric: base-256 when the high bit is set, else octal padded with spaces and NULs."""
    if field[:1] and field[0] & 0x80:
        value = int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
        return value - (1 << (8 * len(field) - 1)) if field[0] & 0x40 else value
    digits = field.strip(b" \0")
    try:
        return int(digits, 8) if digits else 0
    except ValueError:
        msg = f"archive {archive}: the header at byte {offset} has a {what} field {bytes(field)!r}; copy it again"
        raise IntegrityFailure(msg) from None


def _parse_header(block: bytes, offset: int, archive: str) -> _Member:
    stored = _number(block[148:156], "checksum", offset, archive)
    unsigned = sum(block) - sum(block[148:156]) + 8 * 0x20
    if stored != unsigned and stored != unsigned - 256 * sum(1 for b in block[:148] + block[156:] if b > 0x7F):
        msg = f"archive {archive}: the tar header at byte {offset} has a wrong checksum (it says {stored}, its bytes sum to {unsigned}); copy it again"
        raise IntegrityFailure(msg)
    name = _c_string(block[0:100])
    if block[257:263] == b"ustar\0":  # USTAR or PAX, or STAR when its trailer says so (a shorter prefix)
        prefix = _c_string(block[345:476] if block[508:512] == b"tar\0" else block[345:500])
        name = f"{prefix}/{name}" if prefix else name
    # GNU ("ustar  ") and V7 headers have no prefix: the name field alone
    size = _number(block[124:136], "size", offset, archive)
    if size < 0:
        msg = f"archive {archive}: the tar header at byte {offset} gives a negative size; copy it again"
        raise IntegrityFailure(msg)
    return _Member(kind=block[156], name=name, linkname=_c_string(block[157:257]), size=size, offset=offset)


def _pax_records(data: bytes, member: _Member, archive: str) -> dict[str, str]:
    """Go's parsePAX: ``LEN key=value\\n`` records (LEN counts bytes), the last of a key winning."""
    records: dict[str, str] = {}
    while data:
        length, space, _ = data.partition(b" ")
        size = int(length) if length.isdigit() else 0
        record = data[len(length) + 1 : size]
        key, equals, value = record[:-1].partition(b"=")
        if not space or size < 5 or size > len(data) or record[-1:] != b"\n" or not equals or not key:
            msg = f"archive {archive}: the PAX record at byte {member.offset} is malformed; copy it again"
            raise IntegrityFailure(msg)
        if key.startswith(b"GNU.sparse."):
            msg = f"archive {archive}: member at byte {member.offset} is a sparse file, which no image archive holds; export the image again"
            raise IntegrityFailure(msg)
        if b"\0" in (value if key in (b"path", b"linkpath", b"uname", b"gname") else key):
            msg = f"archive {archive}: the PAX record at byte {member.offset} holds a NUL; copy it again"
            raise IntegrityFailure(msg)
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        data = data[size:]
    return records


class _Object(List[Tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order, duplicates kept: Go reads the last of each."""


class _Number(str):
    """A JSON number as written: re-encoded exactly, whatever its size or precision."""


def _strict_constant(name: str) -> None:
    msg = f"{name} is not JSON"
    raise ValueError(msg)


def _dumps(value: Any) -> str:
    if isinstance(value, _Object):
        return "{" + ",".join(f"{json.dumps(key)}:{_dumps(item)}" for key, item in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dumps(item) for item in value) + "]"
    return str(value) if isinstance(value, _Number) else json.dumps(value)


def _without_names(name: str, data: bytes, archive: str) -> bytes:
    """manifest.json with every entry's RepoTags null; index.json without name annotations.

    Go's encoding/json matches keys case-insensitively (``repotags`` is RepoTags), hence casefold.
    """
    try:
        document = json.loads(
            data.decode("utf-8"), object_pairs_hook=_Object, parse_float=_Number, parse_int=_Number,
            parse_constant=_strict_constant,
        )  # fmt: skip
    except ValueError as e:
        msg = f"archive {archive}: its {name} is not JSON ({e}); export the image again"
        raise IntegrityFailure(msg) from None
    if name == "manifest.json":
        if not isinstance(document, list) or isinstance(document, _Object):
            msg = f"archive {archive}: its manifest.json is not a list of images; export the image again"
            raise IntegrityFailure(msg)
        for entry in document:
            if isinstance(entry, _Object):
                entry[:] = _with_null_repo_tags(entry)
    elif isinstance(document, _Object):
        _drop_name_annotations(document)
        for key, descriptors in document:
            if key.casefold() == "manifests" and isinstance(descriptors, list):
                for descriptor in descriptors:
                    if isinstance(descriptor, _Object):
                        _drop_name_annotations(descriptor)
    return _dumps(document).encode()


def _with_null_repo_tags(entry: _Object) -> list[tuple[str, Any]]:
    """The entry's pairs with its first RepoTags (any case) null in place and any others gone."""
    first = next((i for i, (k, _) in enumerate(entry) if k.casefold() == "repotags"), len(entry))
    rest = [(k, v) for k, v in entry[first:] if k.casefold() != "repotags"]
    return [*entry[:first], ("RepoTags", None), *rest]


def _drop_name_annotations(document: _Object) -> None:
    for key, value in document:
        if key.casefold() == "annotations" and isinstance(value, _Object):
            value[:] = [(k, v) for k, v in value if k not in NAME_ANNOTATIONS]


def _padded(size: int) -> int:
    return size + (-size % BLOCK)
