"""An image exported from a fake engine, the nodes that import it, and a manifest document to vary:
what the tests of held layers and of the load's room share."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import zstandard

from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.testing import FakeEngine, image_info

TAG = "imagebuild/kimi-k3:gfx942"


def exported(tmp_path: Path, layers: int = 3) -> tuple[Path, tuple[str, ...]]:
    source = FakeEngine()
    image_id = source.add_saved_image(TAG, size=1 << 20, layers=layers)
    path = export_image(
        ExportOptions(image=TAG, output=tmp_path / "out"), source, report=lambda _: None
    ).manifest_path
    return path, source.inspect_image(image_id).layers


def node_holding(diff_ids: tuple[str, ...], **kwargs: object) -> FakeEngine:
    """A node whose engine holds an image of these layers (the base, say)."""
    base = replace(image_info("sha256:" + "b" * 64), layers=diff_ids)
    return FakeEngine(images=[base], **kwargs)  # type: ignore[arg-type]


def manifest_document(**changes: object) -> dict[str, object]:
    document: dict[str, object] = {
        "format": "imagebuild-image-archive", "format_version": 2, "archive": "a.tar.zst", "sha256": "0" * 64,
        "size": 1, "compression": "zstd", "image_id": "sha256:" + "1" * 64, "repo_tags": [], "pins": {},
        "labels": {}, "imagebuild_version": "0", "manifest_digest": "sha256:" + "2" * 64, "uncompressed_size": 1,
    }  # fmt: skip
    document.update(changes)
    return document


def plain_tar(path: Path) -> bytes:
    manifest = json.loads(path.read_text())
    return bytes(zstandard.ZstdDecompressor().decompressobj().decompress((path.parent / manifest["archive"]).read_bytes()))
