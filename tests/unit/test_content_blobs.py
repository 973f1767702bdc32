"""A layer's tar from its blob in the containerd content store: decompressed as its media type says, checked."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import zstandard

from imagebuild.engine.content_blobs import BlobError, blob_chunks, checked_read, compression, layer_tar
from imagebuild.engine.interface import BlobLayer
from tests.unit import imagetars as tars
from tests.unit.imagetars import EVERY_KIND


def blob_layer(tmp_path: Path, blob: bytes, media_type: str, diff_id: str = tars.digest(EVERY_KIND)) -> BlobLayer:
    path = tmp_path / "blob"
    path.write_bytes(blob)
    return BlobLayer(diff_id=diff_id, blob=path, digest=tars.digest(blob), media_type=media_type, size=len(blob))


@pytest.mark.parametrize(
    ("media_type", "kind"),
    [
        ("application/vnd.oci.image.layer.v1.tar+gzip", "gzip"),
        ("application/vnd.docker.image.rootfs.diff.tar.gzip", "gzip"),
        ("application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", "gzip"),
        ("application/vnd.oci.image.layer.v1.tar+zstd", "zstd"),
        ("application/vnd.oci.image.layer.v1.tar", "none"),
        ("application/vnd.docker.image.rootfs.diff.tar", "none"),
        ("application/vnd.oci.image.config.v1+json", None),
        ("application/vnd.in-toto+json", None),
    ],
)
def test_the_media_type_says_how_a_layer_is_compressed(media_type: str, kind: str | None) -> None:
    assert compression(media_type) == kind


@pytest.mark.parametrize(
    ("media_type", "compress"),
    [
        (tars.GZIP_LAYER, lambda data: gzip.compress(data, mtime=0)),
        (tars.GZIP_LAYER, lambda data: gzip.compress(data[:5000]) + gzip.compress(data[5000:])),  # two members
        ("application/vnd.oci.image.layer.v1.tar+zstd", zstandard.ZstdCompressor().compress),
        (tars.PLAIN_LAYER, lambda data: data),
    ],
)
def test_the_layer_tar_comes_out_byte_for_byte(tmp_path: Path, media_type: str, compress: object) -> None:
    layer = blob_layer(tmp_path, compress(EVERY_KIND), media_type)  # type: ignore[operator]
    assert b"".join(layer_tar(layer)) == EVERY_KIND
    assert checked_read(layer, lambda tar: tar.read(100)) == EVERY_KIND[:100]  # the rest is read for the check


def test_a_damaged_gzip_blob_is_an_error_naming_it(tmp_path: Path) -> None:
    blob = bytearray(gzip.compress(EVERY_KIND, mtime=0))
    blob[len(blob) // 2] ^= 0xFF
    layer = blob_layer(tmp_path, bytes(blob), tars.GZIP_LAYER)
    with pytest.raises(BlobError, match=rf"the blob {layer.blob}: (not a valid gzip stream|its gzip stream ends early)"):
        b"".join(layer_tar(layer))


def test_a_cut_gzip_blob_is_an_error(tmp_path: Path) -> None:
    layer = blob_layer(tmp_path, gzip.compress(EVERY_KIND, mtime=0)[:-100], tars.GZIP_LAYER)
    with pytest.raises(BlobError, match="ends early"):
        b"".join(layer_tar(layer))


def test_a_blob_of_another_size_than_its_manifest_names_is_an_error(tmp_path: Path) -> None:
    layer = blob_layer(tmp_path, EVERY_KIND, tars.PLAIN_LAYER)
    with pytest.raises(BlobError, match=f"is not the {len(EVERY_KIND) + 1} bytes its manifest names"):
        b"".join(blob_chunks(layer.blob, layer.size + 1))
    with pytest.raises(BlobError, match=f"is not the {len(EVERY_KIND) - 1} bytes its manifest names"):
        b"".join(blob_chunks(layer.blob, layer.size - 1))


def test_a_blob_that_is_not_the_layer_fails_the_check(tmp_path: Path) -> None:
    layer = blob_layer(tmp_path, gzip.compress(EVERY_KIND, mtime=0), tars.GZIP_LAYER, diff_id=tars.digest(b"other"))
    with pytest.raises(BlobError, match=f"decompresses to sha256 {tars.digest(EVERY_KIND)}, not layer"):
        checked_read(layer, lambda tar: tar.read())
