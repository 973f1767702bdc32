"""What a built image holds, for its SBOM: dpkg's status, os-release and every Python distribution.

Read from the image's layers, as the flattened image has them: each layer's entries of interest
(``var/lib/dpkg/status``, ``etc/os-release`` and ``usr/lib/os-release``, and every
``.../site-packages/*.dist-info/METADATA`` and ``dist-packages`` one) with its whiteouts and opaque
directories, then the layers top-down: a path takes the highest layer that has it, unless a layer
above deletes it or replaces a directory holding it. The layers come through the engine interface
as verify's layer scan reads them: the engine's layer store when this process can read it (a local
overlay2 engine: each layer's diff directory, where a whiteout is a 0/0 character device and an
opaque directory has the ``trusted.overlay.opaque`` attribute; the containerd image store: each
layer's blob, decompressed and checked against its diffID), else ``docker save``. Nothing runs
in the image: no container, and none of the image's code.

Which layers are the base image's is known from the base's own diffIDs (the image's first layers):
a package or distribution whose file comes from one of them is marked as the base's in the SBOM.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import BinaryIO

from packaging.requirements import InvalidRequirement, Requirement

from imagebuild.engine.content_blobs import BlobError, layer_tar
from imagebuild.engine.interface import BlobLayer, Engine, StoredLayer
from imagebuild.engine.saved_image import ArchiveError, read_saved_image
from imagebuild.errors import EngineError
from imagebuild.log import logger
from imagebuild.util.streams import EntryReads, HashingReader, forget_members, open_stream

DPKG_STATUS = "var/lib/dpkg/status"
OS_RELEASES = ("etc/os-release", "usr/lib/os-release")  # the first that is a file wins (os-release(5))
SITE_DIRS = ("site-packages", "dist-packages")
WHITEOUT, OPAQUE = ".wh.", ".wh..wh..opq"
METADATA_LIMIT = 4 << 20  # a METADATA or status file larger than this is not read (a status is ~1 MB)
STATUS_LIMIT = 64 << 20


def wanted(path: str) -> bool:
    """Whether the SBOM reads the file at ``path`` (relative, no leading slash)."""
    if path == DPKG_STATUS or path in OS_RELEASES:
        return True
    parts = path.rsplit("/", 3)
    return len(parts) == 4 and parts[3] == "METADATA" and parts[2].endswith(".dist-info") and parts[1] in SITE_DIRS


@dataclass(frozen=True, kw_only=True)
class LayerEntries:
    """One layer's files the SBOM reads, and what it deletes from the layers below."""

    diff_id: str
    files: dict[str, bytes] = field(default_factory=dict)  # wanted path -> content
    shadows: frozenset[str] = frozenset()  # wanted paths it holds as something else (a symlink, a directory)
    whiteouts: frozenset[str] = frozenset()  # paths it deletes, with everything under them
    opaque: frozenset[str] = frozenset()  # directories whose lower contents it hides


class _Collector:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.shadows: set[str] = set()
        self.whiteouts: set[str] = set()
        self.opaque: set[str] = set()

    def entry(self, path: str) -> bool:
        """Note a whiteout or opaque marker; whether ``path`` is a file worth reading."""
        base = posixpath.basename(path)
        if base == OPAQUE:
            self.opaque.add(posixpath.dirname(path))
        elif base.startswith(WHITEOUT):
            self.whiteouts.add(posixpath.join(posixpath.dirname(path), base[len(WHITEOUT) :]))
        else:
            return wanted(path)
        return False

    def done(self, diff_id: str) -> LayerEntries:
        return LayerEntries(
            diff_id=diff_id,
            files=self.files,
            shadows=frozenset(self.shadows),
            whiteouts=frozenset(self.whiteouts),
            opaque=frozenset(self.opaque),
        )


def _limit(path: str) -> int:
    return STATUS_LIMIT if path == DPKG_STATUS else METADATA_LIMIT


def entries_of_tar(stream: BinaryIO) -> LayerEntries:
    """One layer tar's entries of interest; reads it to its end (its sha256 is the diffID)."""
    hashing = HashingReader(stream)
    found = _Collector()
    reads = EntryReads(hashing)
    with reads.tar() as tar:
        for entry in tar:
            path = posixpath.normpath("/" + entry.name).lstrip("/")
            if found.entry(path):
                if entry.isreg() and entry.size <= _limit(path):
                    data = reads.extractfile(entry)
                    assert data is not None
                    found.files[path] = data.read()
                else:
                    found.shadows.add(path)
            forget_members(tar)
    hashing.drain()
    return found.done(hashing.digest)


def _of_blob(layer: BlobLayer) -> LayerEntries:
    """One layer's entries of interest from its blob in the containerd store, checked against its diffID."""
    entries = entries_of_tar(open_stream(layer_tar(layer)))
    if entries.diff_id != layer.diff_id:
        msg = f"the blob {layer.blob} decompresses to {entries.diff_id[:19]}, not layer {layer.diff_id[:19]}"
        raise BlobError(msg)
    return entries


def _is_whiteout_device(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _opaque(directory: str) -> bool:
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            if os.getxattr(directory, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def entries_of_directory(root: Path, diff_id: str) -> LayerEntries:
    """One stored overlay2 layer's entries of interest (its diff directory)."""
    found = _Collector()
    for where, dirs, names in os.walk(root):  # symlinked directories are not followed
        relative = os.path.relpath(where, root)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        if prefix and _opaque(where):
            found.opaque.add(prefix.rstrip("/"))
        for name in (*names, *dirs):
            path, full = prefix + name, Path(where) / name
            try:
                info = full.lstat()
            except OSError:
                continue  # removed while we looked
            if _is_whiteout_device(info):
                found.whiteouts.add(path)
            elif found.entry(path):
                if stat.S_ISREG(info.st_mode) and info.st_size <= _limit(path):
                    try:
                        found.files[path] = full.read_bytes()
                    except OSError:
                        continue
                else:
                    found.shadows.add(path)
    return found.done(diff_id)


def _ancestors(path: str) -> Iterator[str]:
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        yield path


def flatten(layers: Sequence[LayerEntries]) -> dict[str, tuple[int, bytes]]:
    """Each wanted file of the flattened image -> (index of the layer it comes from, lowest 0; content)."""
    result: dict[str, tuple[int, bytes]] = {}
    seen: set[str] = set()
    deleted: set[str] = set()
    hidden_under: set[str] = set()
    for index in range(len(layers) - 1, -1, -1):
        layer = layers[index]
        for path, data in layer.files.items():
            if path in seen or path in deleted:
                continue
            if any(a in deleted or a in hidden_under for a in _ancestors(path)):
                continue
            result[path] = (index, data)
        seen |= layer.files.keys() | layer.shadows
        deleted |= layer.whiteouts
        hidden_under |= layer.opaque
    return result


def read_image_layers(engine: Engine, image: str) -> list[LayerEntries]:
    """The image's layers' entries of interest, lowest first, from the layer store or ``docker save``."""
    info = engine.inspect_image(image)
    stored = engine.stored_image(info.id)
    try:
        if not stored.unavailable:  # overlay2: each layer's directory; the containerd store: each blob
            return [
                entries_of_directory(layer.files, layer.diff_id) if isinstance(layer, StoredLayer) else _of_blob(layer)
                for layer in stored.layers
            ]
    except BlobError as e:
        logger.warning("reading %s from the engine's content store failed (%s); using docker save", image, e)

    def on_layer(_name: str, data: BinaryIO) -> LayerEntries:
        return entries_of_tar(data)

    try:
        saved = read_saved_image(open_stream(engine.save(info.id)), on_layer, what=f"image {info.id[:19]}")
    except (ArchiveError, tarfile.TarError, OSError) as e:
        msg = f"the engine's save of {info.id[:19]} could not be read for the SBOM: {e}"
        raise EngineError(msg) from e
    return list(saved.layers)


# What the files say ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class OsRelease:
    id: str  # debian, ubuntu
    version_id: str  # 12, 22.04
    pretty_name: str = ""

    @property
    def distro(self) -> str:
        """The purl ``distro`` qualifier: ``debian-12``."""
        return f"{self.id}-{self.version_id}" if self.version_id else self.id


@dataclass(frozen=True, kw_only=True)
class DebianPackage:
    name: str
    version: str
    architecture: str
    source: str  # the source package, "" when it has the binary's name
    depends: tuple[tuple[str, ...], ...]  # Pre-Depends and Depends: each entry its alternatives, by name
    layer: int


@dataclass(frozen=True, kw_only=True)
class PythonDistribution:
    name: str
    version: str
    location: str  # /usr/lib/python3/dist-packages: the site directory it is installed in
    requires: tuple[str, ...]  # Requires-Dist names without an extra marker
    layer: int


@dataclass(frozen=True, kw_only=True)
class ImageContents:
    os: OsRelease | None
    debian: tuple[DebianPackage, ...]
    python: tuple[PythonDistribution, ...]
    base_layers: int  # the image's first layers that are the base image's

    def from_base(self, layer: int) -> bool:
        return layer < self.base_layers


def parse_os_release(text: str) -> OsRelease | None:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            values[key] = value.strip().strip("\"'")
    return OsRelease(id=values["ID"], version_id=values.get("VERSION_ID", ""), pretty_name=values.get("PRETTY_NAME", "")) if values.get("ID") else None


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, ""
        elif line[0] in " \t":
            if key:
                fields[key] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    if fields:
        yield fields


def _relations(text: str) -> tuple[tuple[str, ...], ...]:
    """``a (>= 1) | b, c:any`` -> (('a', 'b'), ('c',))."""
    found = []
    for entry in text.split(","):
        names = tuple(alt.split("(")[0].split("[")[0].strip().split(":")[0] for alt in entry.split("|"))
        if any(names):
            found.append(tuple(n for n in names if n))
    return tuple(found)


def parse_dpkg_status(text: str, layer: int) -> tuple[DebianPackage, ...]:
    """The installed packages (Status ``install ok installed``) of a dpkg status file, by name."""
    packages = []
    for fields in _stanzas(text):
        if not fields.get("Status", "").endswith(" installed") or not fields.get("Package"):
            continue
        source = fields.get("Source", "").split(" (")[0]
        packages.append(
            DebianPackage(
                name=fields["Package"],
                version=fields.get("Version", ""),
                architecture=fields.get("Architecture", ""),
                source="" if source == fields["Package"] else source,
                depends=_relations(", ".join(v for k in ("Pre-Depends", "Depends") if (v := fields.get(k)))),
                layer=layer,
            )
        )
    return tuple(sorted(packages, key=lambda p: (p.name, p.architecture)))


def parse_metadata(text: str, location: str, layer: int) -> PythonDistribution | None:
    """A distribution from its METADATA headers (core metadata: Name, Version, Requires-Dist)."""
    headers = HeaderParser().parsestr(text.split("\n\n", 1)[0] + "\n")
    name, version = headers.get("Name"), headers.get("Version")
    if not name or not version:
        return None
    requires = []
    for line in headers.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(str(line))
        except InvalidRequirement:
            continue  # a malformed line names nothing we could relate
        if requirement.marker is None or "extra" not in str(requirement.marker):
            requires.append(requirement.name)
    return PythonDistribution(
        name=str(name), version=str(version), location=location, requires=tuple(requires), layer=layer
    )


def image_contents(files: dict[str, tuple[int, bytes]], *, base_layers: int) -> ImageContents:
    """What the flattened image's files say (``files``: :func:`flatten`'s)."""
    os_release = next(
        (found for path in OS_RELEASES if path in files and (found := parse_os_release(files[path][1].decode("utf-8", "replace")))),
        None,
    )
    debian: tuple[DebianPackage, ...] = ()
    if DPKG_STATUS in files:
        layer, data = files[DPKG_STATUS]
        debian = parse_dpkg_status(data.decode("utf-8", "replace"), layer)
    python = []
    for path in sorted(files):
        if path.endswith("/METADATA"):
            layer, data = files[path]
            location = "/" + path.rsplit("/", 2)[0]
            dist = parse_metadata(data.decode("utf-8", "replace"), location, layer)
            if dist is not None:
                python.append(dist)
    return ImageContents(os=os_release, debian=debian, python=tuple(python), base_layers=base_layers)


def read_image_contents(engine: Engine, image: str, *, base_diff_ids: Sequence[str]) -> ImageContents:
    """What ``image`` holds; the layers it shares, lowest first, with ``base_diff_ids`` are the base's."""
    layers = read_image_layers(engine, image)
    shared = 0
    for layer, base in zip(layers, base_diff_ids, strict=False):
        if layer.diff_id != base:
            break
        shared += 1
    return image_contents(flatten(layers), base_layers=shared)
