"""The portable archive: every engine's save layout in, one archive that both kinds of loader read out.

Each case is a save as that engine writes it (Docker 20.10, Docker 25+, the containerd image store,
Podman). The output is read twice, as the two loaders do: ``manifest.json`` (graph-driver stores)
and ``oci-layout`` + ``index.json`` (the containerd store, Podman's OCI path), following symlinks
within the archive; both must give the same config, and every layer by its diffID.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest

from imagebuild.distribute.archive_layout import ArchiveLayoutError, portable_archive
from tests.unit.imagetars import Item, config, digest, layer

LAYERS = [layer([Item("etc/base", data=b"base")]), layer([Item("app/x", data=b"x" * 5000)])]
CONFIG = json.dumps(config(LAYERS), sort_keys=True).encode()
CONFIG_DIGEST = digest(CONFIG)


def _tar(entries: list[tuple[str, bytes | str]]) -> bytes:
    """Regular files (bytes) and symlinks (str: the target) in this order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in entries:
            info = tarfile.TarInfo(name)
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def _blob(data: bytes) -> str:
    return f"blobs/sha256/{digest(data)[7:]}"


def _manifest(layers: list[tuple[str, bytes]], media_type: str) -> bytes:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": CONFIG_DIGEST, "size": len(CONFIG)},
            "layers": [{"mediaType": kind, "digest": digest(data), "size": len(data)} for kind, data in layers],
        }
    ).encode()


def docker20_save() -> bytes:
    names = [f"{hashlib.sha256(bytes([i])).hexdigest()}/layer.tar" for i in range(len(LAYERS))]
    legacy = [{"Config": f"{CONFIG_DIGEST[7:]}.json", "RepoTags": None, "Layers": names}]
    return _tar(
        [*zip(names, LAYERS, strict=True), (f"{CONFIG_DIGEST[7:]}.json", CONFIG), ("manifest.json", json.dumps(legacy).encode())]
    )


def docker26_save() -> bytes:
    """Docker 25+ on a graph driver: an OCI layout, legacy names as symlinks into blobs/."""
    manifest = _manifest([("application/vnd.oci.image.layer.v1.tar", d) for d in LAYERS], "application/vnd.oci.image.manifest.v1+json")
    index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest), "annotations": {"io.containerd.image.name": "docker.io/x/y:z"}}]}
    legacy = [{"Config": _blob(CONFIG), "RepoTags": ["x/y:z"], "Layers": [_blob(d) for d in LAYERS]}]
    return _tar(
        [
            *((_blob(d), d) for d in LAYERS),
            (_blob(CONFIG), CONFIG),
            (_blob(manifest), manifest),
            ("abc/layer.tar", f"../{_blob(LAYERS[0])}"),
            ("index.json", json.dumps(index).encode()),
            ("manifest.json", json.dumps(legacy).encode()),
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("repositories", b'{"x/y":{"z":"abc"}}'),
        ]
    )


def containerd_save() -> tuple[bytes, bytes]:
    """The containerd store: the base layer gzip-compressed as pulled, a Docker v2 manifest (its ID)."""
    pulled = gzip.compress(LAYERS[0], mtime=0)
    manifest = _manifest(
        [("application/vnd.docker.image.rootfs.diff.tar.gzip", pulled), ("application/vnd.oci.image.layer.v1.tar", LAYERS[1])],
        "application/vnd.docker.distribution.manifest.v2+json",
    )
    index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": digest(manifest), "size": len(manifest)}]}
    legacy = [{"Config": _blob(CONFIG), "RepoTags": None, "Layers": [_blob(pulled), _blob(LAYERS[1])]}]
    save = _tar(
        [
            (_blob(manifest), manifest),
            (_blob(pulled), pulled),
            (_blob(CONFIG), CONFIG),
            (_blob(LAYERS[1]), LAYERS[1]),
            ("index.json", json.dumps(index).encode()),
            ("manifest.json", json.dumps(legacy).encode()),
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
        ]
    )
    return save, manifest


def podman_save() -> bytes:
    """Podman: each layer at the top as ``<diffID hex>.tar``, ``<id>/layer.tar`` a symlink to it."""
    tops = [f"{digest(d)[7:]}.tar" for d in LAYERS]
    legacy = [{"Config": f"{CONFIG_DIGEST[7:]}.json", "RepoTags": ["localhost/x:y"], "Layers": tops}]
    return _tar(
        [
            *zip(tops, LAYERS, strict=True),
            *((f"{i}{'0' * 63}/layer.tar", f"../{top}") for i, top in enumerate(tops)),
            (f"{CONFIG_DIGEST[7:]}.json", CONFIG),
            ("manifest.json", json.dumps(legacy).encode()),
        ]
    )


def _chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


class Archive:
    """The written archive, read as a loader reads it: files by name, symlinks followed."""

    def __init__(self, data: bytes) -> None:
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.order: list[str] = []
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                self.order.append(member.name)
                if member.issym():
                    self.links[member.name] = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), member.linkname))
                elif member.isreg():
                    self.files[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]

    def read(self, name: str) -> bytes:
        while name in self.links:
            name = self.links[name]
        return self.files[name]

    def json(self, name: str) -> Any:
        return json.loads(self.read(name))


def _uncompressed(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def check_both_loaders(archive: Archive, manifest_digest: str) -> None:
    """What a graph-driver load and a containerd-store load would each take from the archive."""
    diff_ids = json.loads(CONFIG)["rootfs"]["diff_ids"]
    (legacy,) = archive.json("manifest.json")
    assert legacy["RepoTags"] is None  # a load tags nothing
    assert digest(archive.read(legacy["Config"])) == CONFIG_DIGEST
    assert [digest(_uncompressed(archive.read(p))) for p in legacy["Layers"]] == diff_ids
    assert archive.json("oci-layout") == {"imageLayoutVersion": "1.0.0"}
    (descriptor,) = archive.json("index.json")["manifests"]
    assert "annotations" not in descriptor  # no name: the containerd store makes no tag either
    assert descriptor["digest"] == manifest_digest
    manifest_bytes = archive.read(f"blobs/sha256/{manifest_digest[7:]}")
    assert digest(manifest_bytes) == manifest_digest
    assert len(manifest_bytes) == descriptor["size"]
    manifest = json.loads(manifest_bytes)
    assert manifest["config"]["digest"] == CONFIG_DIGEST
    assert digest(archive.read(f"blobs/sha256/{CONFIG_DIGEST[7:]}")) == CONFIG_DIGEST
    for layer_descriptor, diff_id in zip(manifest["layers"], diff_ids, strict=True):
        blob = archive.read(f"blobs/sha256/{layer_descriptor['digest'][7:]}")
        assert digest(blob) == layer_descriptor["digest"]
        assert len(blob) == layer_descriptor["size"]
        assert digest(_uncompressed(blob)) == diff_id
    assert archive.order[-3:] == ["oci-layout", "index.json", "manifest.json"]


def _write(save: bytes) -> tuple[Archive, Any]:
    out = io.BytesIO()
    result = portable_archive(_chunks(save), out)
    return Archive(out.getvalue()), result


@pytest.mark.parametrize("save", [docker20_save, docker26_save, podman_save], ids=["docker20", "docker26", "podman"])
def test_every_graph_driver_layout_becomes_one_both_loaders_read(save: Any) -> None:
    archive, result = _write(save())
    assert result.config_digest == CONFIG_DIGEST
    assert result.diff_ids == tuple(json.loads(CONFIG)["rootfs"]["diff_ids"])
    check_both_loaders(archive, result.manifest_digest)


def test_a_legacy_save_gets_a_manifest_of_its_layers_as_they_are() -> None:
    archive, result = _write(docker20_save())
    manifest = archive.json(f"blobs/sha256/{result.manifest_digest[7:]}")
    assert [d["mediaType"] for d in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar"] * 2
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    # The layers stay where the engine put them; blobs/ holds links to them, not second copies.
    assert sum(len(data) for data in archive.files.values()) < sum(map(len, LAYERS)) + len(CONFIG) + 2048


def test_the_same_legacy_save_gives_the_same_manifest_digest() -> None:
    assert _write(docker20_save())[1].manifest_digest == _write(podman_save())[1].manifest_digest


def test_the_containerd_store_keeps_its_own_manifest_so_its_image_id_survives() -> None:
    save, manifest = containerd_save()
    archive, result = _write(save)
    assert result.manifest_digest == digest(manifest)  # the image ID the building engine gave it
    assert result.config_digest == CONFIG_DIGEST
    check_both_loaders(archive, result.manifest_digest)
    assert archive.files[_blob(gzip.compress(LAYERS[0], mtime=0))][:2] == b"\x1f\x8b"  # not decompressed


def test_the_index_files_of_the_save_are_replaced_and_every_other_byte_passes_through() -> None:
    save = docker26_save()
    archive, _ = _write(save)
    assert "repositories" not in archive.files  # it names a tag
    original = Archive(save)
    for name, data in original.files.items():
        if name not in ("manifest.json", "index.json", "oci-layout", "repositories"):
            assert archive.files[name] == data


def _legacy(entries: list[dict[str, Any]], files: list[tuple[str, bytes | str]]) -> bytes:
    return _tar([*files, ("manifest.json", json.dumps(entries).encode())])


@pytest.mark.parametrize(
    ("save", "message"),
    [
        (b"not a tar at all" * 64, "is not a complete tar archive"),
        (_legacy([], []), "does not describe exactly one image"),
        (_tar([("x", b"y")]), "has neither manifest.json nor index.json"),
        (
            _legacy([{"Config": "c.json", "Layers": ["l.tar"]}], [("c.json", CONFIG), ("l.tar", LAYERS[0])]),
            "config names 2 layers and its archive holds 1",
        ),
        (
            _legacy([{"Config": "c.json", "Layers": ["a.tar", "b.tar"]}], [("c.json", CONFIG), ("a.tar", LAYERS[1]), ("b.tar", LAYERS[0])]),
            "has another digest",
        ),
        (_legacy([{"Config": "c.json", "Layers": []}], []), "which its archive does not hold"),
        (_legacy([{"Config": "c.json", "Layers": []}], [("c.json", "c.json")]), "which its archive does not hold"),
        (
            _tar([("index.json", json.dumps({"manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + "0" * 64}]}).encode())]),
            "not one image's manifest",
        ),
    ],
    ids=["not-tar", "no-image", "no-index", "layer-missing", "layer-swapped", "config-missing", "link-loop", "nested-index"],
)
def test_a_save_that_is_not_one_image_is_refused_naming_why(save: bytes, message: str) -> None:
    with pytest.raises(ArchiveLayoutError, match=message):
        _write(save)


def test_a_save_cut_short_inside_a_layer_is_refused() -> None:
    save = docker20_save()
    with pytest.raises(ArchiveLayoutError):
        _write(save[: len(save) // 2])
