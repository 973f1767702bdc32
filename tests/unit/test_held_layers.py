"""Import leaves out the files of layers the engine already holds: export lists each layer's file, the
importer asks a graph-driver engine which chains it holds, and the tar filter drops those files (and
hard links to them) while every byte of the archive is still hashed."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from imagebuild.distribute.local_import import import_manifest
from imagebuild.engine.chain_ids import chain_ids
from imagebuild.errors import IntegrityError
from imagebuild.importer.failures import BadInput
from imagebuild.importer.held_layers import files_to_skip
from imagebuild.importer.manifest import parse_manifest
from imagebuild.importer.tar_filter import TarFilter
from imagebuild.testing import FakeEngine
from imagebuild.testing.archives import untarred
from tests.unit.export_support import exported, manifest_document, node_holding, plain_tar


def test_export_lists_each_layer_and_the_file_holding_it(tmp_path: Path) -> None:
    path, diff_ids = exported(tmp_path)
    layers = json.loads(path.read_text())["layers"]
    assert [layer["diff_id"] for layer in layers] == list(diff_ids)
    files = untarred(io.BytesIO(plain_tar(path)).read())
    loaded = json.loads(files["manifest.json"])[0]["Layers"]
    assert [layer["file"] for layer in layers] == loaded  # the files manifest.json names


def test_a_node_holding_the_base_is_sent_the_build_layers_alone(tmp_path: Path) -> None:
    path, diff_ids = exported(tmp_path)
    node = node_holding(diff_ids[:2])
    messages: list[str] = []
    result = import_manifest(path, node, report=messages.append)

    assert not result.already_present
    assert node.has_image(result.image_id)
    files = {layer["file"]: layer["diff_id"] for layer in json.loads(path.read_text())["layers"]}
    sent = untarred(node.received[0])
    assert {f for f in files if f in sent} == {f for f, d in files.items() if d == diff_ids[2]}
    assert "2 of its 3 layers are in the engine already: read and hashed, not sent" in messages
    assert len(node.received[0]) < len(plain_tar(path)) - 2 * (1 << 20)


def test_nothing_is_left_out_for_an_engine_that_holds_none_of_them_or_names_images_by_manifest(tmp_path: Path) -> None:
    path, diff_ids = exported(tmp_path)
    for node in (FakeEngine(), node_holding(diff_ids, manifest_ids=True)):
        import_manifest(path, node, report=lambda _: None)
        assert node.received == [plain_tar(path)]


def test_a_damaged_skipped_layer_still_fails_the_archives_hash(tmp_path: Path) -> None:
    path, diff_ids = exported(tmp_path)
    manifest = json.loads(path.read_text())
    archive = path.parent / manifest["archive"]
    data = bytearray(archive.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the base's layers: never sent, still hashed
    archive.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="sha256 mismatch"):
        import_manifest(path, node_holding(diff_ids[:2]), report=lambda _: None)


def test_only_files_of_held_chains_are_skipped() -> None:
    diff_ids = ["sha256:" + c * 64 for c in "abc"]
    chains = chain_ids(diff_ids)
    manifest = parse_manifest(manifest_document(layers=[{"diff_id": d, "file": f"{d[7:19]}/layer.tar"} for d in diff_ids]), "m")
    assert files_to_skip(manifest, frozenset(chains[:2])) == {f"{d[7:19]}/layer.tar" for d in diff_ids[:2]}
    # The second layer alone is not held: its chain includes the first.
    assert files_to_skip(manifest, frozenset({diff_ids[1]})) == frozenset()
    # One file holding a held layer and one the engine lacks (the same empty layer twice) is sent.
    shared = parse_manifest(manifest_document(layers=[{"diff_id": diff_ids[0], "file": "x/layer.tar"}, {"diff_id": diff_ids[1], "file": "x/layer.tar"}]), "m")  # fmt: skip
    assert files_to_skip(shared, frozenset(chains[:1])) == frozenset()


@pytest.mark.parametrize(
    "layers",
    [
        [{"diff_id": "sha256:" + "a" * 64, "file": "../etc/layer.tar"}],
        [{"diff_id": "sha256:" + "a" * 64, "file": "/abs/layer.tar"}],
        [{"diff_id": "sha256:" + "a" * 64, "file": "a/./layer.tar"}],
        [{"diff_id": "sha256:" + "a" * 64, "file": "a/layer.tar\n"}],
        [{"diff_id": "sha256:" + "a" * 64, "file": ""}],
        [{"diff_id": "sha256:short", "file": "a/layer.tar"}],
        [{"diff_id": "sha256:" + "a" * 64, "file": "a/layer.tar", "extra": 1}],
        {"diff_id": "sha256:" + "a" * 64},
    ],
)
def test_a_bad_layers_list_is_refused_in_one_line(layers: object) -> None:
    with pytest.raises(BadInput, match=r"^manifest m: 'layers' must list a docker archive's layers"):
        parse_manifest(manifest_document(layers=layers), "m")


def test_the_filter_drops_a_skipped_file_its_records_and_hard_links_to_it() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("base/layer.tar", b"B" * 1000), ("build/layer.tar", b"N" * 700)):
            info = tarfile.TarInfo(name)
            info.size, info.pax_headers = len(data), {"comment": "x" * 300}
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("blobs/sha256/base")
        link.type, link.linkname = tarfile.LNKTYPE, "base/layer.tar"
        tar.addfile(link)
        symlink = tarfile.TarInfo("blobs/sha256/build")
        symlink.type, symlink.linkname = tarfile.SYMTYPE, "../../build/layer.tar"
        tar.addfile(symlink)
    tar_filter = TarFilter("a.tar", frozenset({"base/layer.tar"}))
    sent = b"".join([*tar_filter.feed(out.getvalue()), *tar_filter.end()])
    with tarfile.open(fileobj=io.BytesIO(sent)) as tar:
        assert tar.getnames() == ["build/layer.tar", "blobs/sha256/build"]
        assert tar.extractfile("build/layer.tar").read() == b"N" * 700  # type: ignore[union-attr]
    assert tar_filter.skipped == 1000
