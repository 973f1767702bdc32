"""The manifest `imagebuild export` writes beside each archive: its one definition, read and checked.

Everything a node trusts comes from here: the archive's file name (a bare name beside the manifest),
its size and sha256, and the IDs the engine must report after loading it: the image's identity (its
config digest: the image ID on graph-driver stores and Podman) and, for the containerd image store,
which names images by their manifest, the digest of the manifest the archive's index.json names.
Version 1 manifests (imagebuild before the portable archive) have no manifest digest: they import on
graph-driver stores only. Version 2 ones list a docker archive's layers without their sizes: they
import, with the engine's free space checked only when it is sent every layer (``load_room``).

``kind`` says what the archive is: a docker archive (absent: every manifest before the other kinds),
an OCI image layout archive (``export --format oci``), or a squashfs of the flattened root filesystem
(``--format squashfs``, for enroot/pyxis and Charliecloud, never loaded into an engine). A docker
archive's manifest leaves the key out, so it is the same bytes it always was.
"""

from __future__ import annotations

import json
import posixpath
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from .failures import BadInput
from .text import shown

FORMAT = "imagebuild-image-archive"
FORMAT_VERSION = 3
FORMAT_VERSIONS = (1, 2, 3)  # read; version 1 lacks manifest_digest, version 2 each layer's size
COMPRESSIONS = ("zstd", "gzip", "none")  # a squashfs's: the compressor of its blocks (zstd or gzip)
DOCKER_ARCHIVE, OCI_ARCHIVE, SQUASHFS = "docker-archive", "oci-archive", "squashfs"
KINDS = (DOCKER_ARCHIVE, OCI_ARCHIVE, SQUASHFS)
UNPACKED_BLOCK = 4096  # what a squashfs's unpacked_bytes are counted in: a tmpfs page, ext4's and xfs's block
# Each used with fullmatch: `$` would also match before a trailing newline.
IMAGE_ID_RE = re.compile(r"sha256:[0-9a-f]{64}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# A docker reference with a tag: an optional registry (has a dot or a port, or is localhost), then
# lowercase path components.
REPO_TAG_RE = re.compile(
    r"(?:(?:(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)(?::[0-9]+)?|[A-Za-z0-9-]+:[0-9]+)/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
)
# The characters no string of a manifest may hold: imagebuild.launcher.text.CONTROL_RE's set (C0, DEL,
# C1, line and paragraph separators, bidi controls, lone surrogates), copied because the zipapp carries
# this package alone; a unit test keeps the two equal. A manifest's strings reach terminals, logs and
# the sbatch script `slurm --archive` writes, where a newline would end a shell line.
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
REQUIRED = {
    "format": str, "format_version": int, "archive": str, "sha256": str, "size": int, "compression": str,
    "image_id": str, "repo_tags": list, "pins": dict, "labels": dict, "imagebuild_version": str,
}  # fmt: skip


class ArchiveLayer(NamedTuple):
    """One of a docker archive's layers, as the manifest lists it."""

    diff_id: str
    file: str  # the archive member holding it
    size: int  # that file's bytes (compressed where the layer is); 0: not said (format version 2)


@dataclass(frozen=True)
class Manifest:
    """What `export` wrote beside the archive; the single definition of the format (keyword use only)."""

    archive: str  # a bare file name in the manifest's directory
    sha256: str  # of the archive file as written (compressed bytes)
    size: int
    compression: str
    image_id: str  # the identity: the config digest
    repo_tags: tuple[str, ...]
    pins: dict[str, str]
    labels: dict[str, str]
    imagebuild_version: str
    origin: str = ""  # host:directory it was exported to, for "copy it again from host:dir/archive"
    manifest_digest: str = ""  # of the OCI manifest index.json names: the containerd store's image ID
    uncompressed_size: int = 0  # the tar's bytes: where a decompression is stopped (0: version 1, not said)
    # The attestations export wrote beside the archive (its distribution statement, signed or not): bare
    # file name -> sha256 of the file.
    attestations: dict[str, str] = field(default_factory=dict)
    kind: str = DOCKER_ARCHIVE  # one of KINDS
    # A docker archive's layers, lowest first. What lets the importer leave out the files of layers
    # the engine already holds (held_layers) and know the room the rest take (load_room); absent before.
    layers: tuple[ArchiveLayer, ...] = ()
    # A squashfs's tree as `enroot create` unpacks it: its regular files in 4 KiB blocks (each content
    # once) and its directories; what ``unpack_room`` checks a node's room against. 0: not said (a
    # squashfs exported before these were written; the other kinds).
    unpacked_bytes: int = 0
    unpacked_directories: int = 0
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["repo_tags"] = list(self.repo_tags)
        data["attestations"] = dict(self.attestations)
        if self.kind == DOCKER_ARCHIVE:  # as every manifest before the other kinds: the same bytes
            del data["kind"]
        data["layers"] = [{"diff_id": layer.diff_id, "file": layer.file, "size": layer.size} for layer in self.layers]
        if not self.layers:
            del data["layers"]
        if self.kind != SQUASHFS:
            del data["unpacked_bytes"], data["unpacked_directories"]
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
    if data["format"] != FORMAT or data["format_version"] not in FORMAT_VERSIONS:
        msg = (
            f"manifest {where}: format {data['format']!r} version {data['format_version']} is not "
            f"{FORMAT!r} version {FORMAT_VERSION}; use the importer shipped next to that archive"
        )
        raise BadInput(msg)
    name = data["archive"]
    if not _bare_name(name):
        msg = f"manifest {where}: 'archive' must be a bare file name beside the manifest, not {name!r}"
        raise BadInput(msg)
    checks = (
        ("sha256", SHA256_RE.fullmatch(data["sha256"]), "64 lowercase hex digits"),
        ("image_id", IMAGE_ID_RE.fullmatch(data["image_id"]), "sha256: and 64 hex digits"),
        ("manifest_digest", _manifest_digest_ok(data), "sha256: and 64 hex digits"),
        ("uncompressed_size", _uncompressed_size_ok(data), "the archive's byte count before compression"),
        ("compression", data["compression"] in COMPRESSIONS, " or ".join(COMPRESSIONS)),
        ("size", data["size"] >= 0, "a byte count"),
        ("kind", data.get("kind", DOCKER_ARCHIVE) in KINDS, " or ".join(KINDS)),
        ("unpacked_bytes", _unpacked_ok(data, "unpacked_bytes"), "a squashfs's byte count"),
        ("unpacked_directories", _unpacked_ok(data, "unpacked_directories"), "a squashfs's directory count"),
    )
    for key, ok, expected in checks:
        if not ok:
            msg = f"manifest {where}: '{key}' must be {expected}, not {data.get(key)!r}"
            raise BadInput(msg)
    for tag in data["repo_tags"]:
        if not isinstance(tag, str) or not REPO_TAG_RE.fullmatch(tag):
            msg = f"manifest {where}: repo tag {tag!r} is not a repository:tag reference"
            raise BadInput(msg)
    for key in ("pins", "labels"):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data[key].items()):
            msg = f"manifest {where}: '{key}' must map strings to strings"
            raise BadInput(msg)
    attestations = _attestations(data, where)
    layers = _layers(data, where)
    _refuse_control_characters(data, where)  # the free-text values: origin, labels, pins, the version
    origin = data.get("origin", "")
    return Manifest(
        archive=name, sha256=data["sha256"], size=data["size"], compression=data["compression"],
        image_id=data["image_id"], repo_tags=tuple(data["repo_tags"]), pins=dict(data["pins"]),
        labels=dict(data["labels"]), imagebuild_version=data["imagebuild_version"],
        origin=origin if isinstance(origin, str) else "", manifest_digest=str(data.get("manifest_digest", "")),
        format_version=data["format_version"], uncompressed_size=int(data.get("uncompressed_size") or 0),
        attestations=dict(attestations), kind=str(data.get("kind", DOCKER_ARCHIVE)), layers=layers,
        unpacked_bytes=int(data.get("unpacked_bytes", 0)), unpacked_directories=int(data.get("unpacked_directories", 0)),
    )  # fmt: skip


def _refuse_control_characters(data: dict[str, Any], where: str) -> None:
    for key, value in _strings(data):
        found = CONTROL_RE.search(value)
        if found:
            msg = f"manifest {where}: {key} contains a control character, U+{ord(found[0]):04X}; export the image again"
            raise BadInput(msg)


def _strings(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Every string under the keys a Manifest is made of, dict keys too, with where it is as a message
    names it. Unknown keys are never read, so not walked."""
    for key in Manifest.__dataclass_fields__:
        yield from _strings_in(f"'{key}'", data.get(key), depth=2)  # layers: a list of objects


def _strings_in(where: str, value: object, depth: int) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif depth and isinstance(value, dict):
        for name, item in value.items():
            yield f"{where} key '{shown(str(name), 80)}'", str(name)
            yield from _strings_in(f"{where}['{shown(str(name), 80)}']", item, depth - 1)
    elif depth and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings_in(f"{where}[{index}]", item, depth - 1)


def _attestations(data: dict[str, Any], where: str) -> dict[str, str]:
    """The attestation files beside the archive, by sha256 (none before they were written)."""
    value = data.get("attestations", {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and _bare_name(k) and isinstance(v, str) and SHA256_RE.fullmatch(v) for k, v in value.items()
    ):
        msg = f"manifest {where}: 'attestations' must map bare file names beside the manifest to sha256 hex digests"
        raise BadInput(msg)
    return dict(value)


MAX_LAYERS = 1000  # Docker refuses images of more than 127 layers; a longer list is not an image's


def _layers(data: dict[str, Any], where: str) -> tuple[ArchiveLayer, ...]:
    """The docker archive's layers: diffID, file (a clean relative path in the archive) and, from
    format version 3 on, that file's size."""
    value = data.get("layers", [])
    sized = data["format_version"] >= 3
    keys = {"diff_id", "file", "size"} if sized else {"diff_id", "file"}
    ok = isinstance(value, list) and len(value) <= MAX_LAYERS and all(
        isinstance(item, dict) and set(item) == keys
        and isinstance(item["diff_id"], str) and IMAGE_ID_RE.fullmatch(item["diff_id"]) is not None
        and isinstance(item["file"], str) and _archive_path(item["file"])
        and (not sized or _byte_count(item["size"]))
        for item in value
    )  # fmt: skip
    if not ok or (value and data.get("kind", DOCKER_ARCHIVE) != DOCKER_ARCHIVE):
        size = ", \"size\": its bytes" if sized else ""
        msg = (
            f"manifest {where}: 'layers' must list a docker archive's layers as "
            f"{{\"diff_id\": \"sha256:...\", \"file\": a clean path inside the archive{size}}}"
        )
        raise BadInput(msg)
    return tuple(ArchiveLayer(str(item["diff_id"]), str(item["file"]), int(item.get("size", 0))) for item in value)


def _byte_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _archive_path(name: str) -> bool:
    """A member path as the engine's untar writes it: relative, clean, printable, no step up."""
    return (
        0 < len(name) <= 4096 and name.isprintable() and not name.startswith("/")
        and posixpath.normpath(name) == name and name != "." and ".." not in name.split("/")
    )  # fmt: skip


def _bare_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and name.isprintable()


def _manifest_digest_ok(data: dict[str, Any]) -> bool:
    """Required from version 2 on; version 1 manifests predate it."""
    value = data.get("manifest_digest")
    if value is None:
        return bool(data["format_version"] == 1)
    return isinstance(value, str) and IMAGE_ID_RE.fullmatch(value) is not None


def _unpacked_ok(data: dict[str, Any], key: str) -> bool:
    """A squashfs's alone, and optional (a squashfs exported before it was written has none)."""
    value = data.get(key, 0)
    kind_ok = key not in data or data.get("kind") == SQUASHFS
    return kind_ok and isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _uncompressed_size_ok(data: dict[str, Any]) -> bool:
    value = data.get("uncompressed_size")
    if value is None:
        return bool(data["format_version"] == 1)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def read_manifest(path: Path) -> Manifest:
    try:
        regular = stat.S_ISREG(path.stat().st_mode)  # a FIFO would block the read for ever
        text = path.read_text(encoding="utf-8") if regular else ""
    except FileNotFoundError:
        msg = f"manifest {path}: not found; give the .json that export wrote next to the archive"
        raise BadInput(msg) from None
    except (OSError, UnicodeDecodeError) as e:  # unreadable, a name too long, not UTF-8
        msg = f"manifest {path}: cannot be read ({e})"
        raise BadInput(msg) from None
    if not regular:
        msg = f"manifest {path}: not a regular file; give the .json that export wrote next to the archive"
        raise BadInput(msg)
    try:
        data = json.loads(text)
    except ValueError as e:
        msg = f"manifest {path}: not valid JSON ({e}); export the image again"
        raise BadInput(msg) from None
    except RecursionError:  # nesting deeper than the interpreter's stack: no manifest is
        msg = f"manifest {path}: JSON nested too deeply to read; export the image again"
        raise BadInput(msg) from None
    return parse_manifest(data, str(path))
