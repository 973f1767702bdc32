"""The tar the engine is sent (importer/tar_filter.py): names out, everything else byte for byte, and
every header the engine's Go reader would read differently refused."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from imagebuild.importer.failures import IntegrityFailure
from imagebuild.importer.tar_filter import TAR_END, TarFilter

VICTIM = "victim:latest"
NAMED_MANIFEST = json.dumps([{"Config": "c.json", "RepoTags": [VICTIM], "Layers": ["l/layer.tar"]}]).encode()


def tar(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as archive:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def member(name: str, data: bytes = b"", **fields: object) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def filtered(data: bytes, step: int = 1 << 20) -> bytes:
    """The filter's output for ``data`` fed in pieces of ``step`` bytes (headers split across them)."""
    tar_filter = TarFilter("a.tar")
    out: list[bytes | memoryview] = []
    for at in range(0, len(data), step):
        out += tar_filter.feed(data[at : at + step])
    out += tar_filter.end()
    return b"".join(out)


def names_and_files(data: bytes) -> list[tuple[str, bytes | None]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return [(m.name, (archive.extractfile(m) or io.BytesIO()).read() if m.isreg() else None) for m in archive]


@pytest.mark.parametrize("step", [1 << 20, 512, 7])
def test_a_tar_without_names_passes_byte_for_byte_up_to_its_end_blocks(step: int) -> None:
    layer = bytes(range(256)) * 4000  # not a multiple of 512: padding passes too
    data = tar(member("l", type=tarfile.DIRTYPE), member("l/layer.tar", layer), member("c.json", b"{}"),
               member("blobs/sha256/ab", type=tarfile.SYMTYPE, linkname="../../l/layer.tar"))  # fmt: skip
    out = filtered(data, step)
    assert out.endswith(TAR_END)
    assert data.startswith(out)  # tarfile pads to a 10 KiB record after the end blocks: dropped
    assert set(data[len(out) :]) <= {0}


@pytest.mark.parametrize(
    ("entry", "fmt"),
    [
        pytest.param(member("manifest.json", NAMED_MANIFEST), tarfile.USTAR_FORMAT, id="plain"),
        pytest.param(member("./manifest.json", NAMED_MANIFEST), tarfile.USTAR_FORMAT, id="dot-slash"),
        pytest.param(member("l/../manifest.json", NAMED_MANIFEST), tarfile.USTAR_FORMAT, id="dot-dot"),
        pytest.param(member("decoy", NAMED_MANIFEST, pax_headers={"path": "manifest.json"}), tarfile.PAX_FORMAT, id="pax-path"),
        pytest.param(member("x" * 120 + "/../manifest.json", NAMED_MANIFEST), tarfile.GNU_FORMAT, id="gnu-longname"),
    ],
)
def test_manifest_json_by_its_effective_name_loses_its_repo_tags(entry: tuple[tarfile.TarInfo, bytes], fmt: int) -> None:
    data = tar(member("c.json", b"{}"), entry, fmt=fmt)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:  # the archive does name the victim
        assert VICTIM.encode() in (archive.extractfile(archive.getmembers()[-1]) or io.BytesIO()).read()
    out = filtered(data, 100)
    assert VICTIM.encode() not in out
    assert names_and_files(out)[-1] == (
        "manifest.json", b'[{"Config":"c.json","RepoTags":null,"Layers":["l/layer.tar"]}]'
    )  # a clean ustar header: no PAX or GNU record left to name it otherwise


def test_every_duplicate_manifest_json_is_rewritten_and_repositories_dropped() -> None:
    data = tar(
        member("manifest.json", NAMED_MANIFEST),
        member("repositories", json.dumps({"victim": {"latest": "ab" * 32}}).encode()),
        member("./manifest.json", json.dumps([{"Config": "c.json", "repotags": ["x:y"], "RepoTag\u017f": ["z:w"]}]).encode()),
    )
    out = filtered(data)
    assert [name for name, _ in names_and_files(out)] == ["manifest.json", "manifest.json"]
    assert [json.loads(content or b"") for _, content in names_and_files(out)] == [
        [{"Config": "c.json", "RepoTags": None, "Layers": ["l/layer.tar"]}],
        [{"Config": "c.json", "RepoTags": None}],  # Go matches keys case-insensitively (U+017F folds to s)
    ]


def test_index_json_loses_the_name_annotations_and_keeps_the_rest() -> None:
    index = {
        "schemaVersion": 2,
        "manifests": [{"digest": "sha256:" + "1" * 64, "size": 12345678901234567890, "annotations": {
            "io.containerd.image.name": "docker.io/library/victim:latest",
            "org.opencontainers.image.ref.name": "latest",
            "org.opencontainers.image.created": "2026-01-01T00:00:00Z",
        }}],
    }  # fmt: skip
    out = filtered(tar(member("index.json", json.dumps(index).encode())))
    ((name, content),) = names_and_files(out)
    assert name == "index.json"
    assert b"victim" not in out
    assert json.loads(content or b"") == {
        "schemaVersion": 2,
        "manifests": [{"digest": "sha256:" + "1" * 64, "size": 12345678901234567890,
                       "annotations": {"org.opencontainers.image.created": "2026-01-01T00:00:00Z"}}],
    }  # fmt: skip


def _set_checksum(header: bytearray) -> None:
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}\0 ".encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(tar(member("a", b"1"))[:-10240 + 512], "the tar ends early", id="no-end-blocks"),
        pytest.param(tar(member("a", b"1" * 2000))[:1024], r"the tar ends early \(at byte 1024, inside 'a'\)", id="inside-a-member"),
        pytest.param(tar(member("a", b"1"))[:700], "the tar ends early", id="inside-a-header"),
        pytest.param(b"", "the tar ends early", id="empty"),
        pytest.param(
            tar(member("manifest.json", type=tarfile.SYMTYPE, linkname="evil.json")),
            r"member 'manifest.json' at byte 0 is not a regular file", id="symlinked-manifest",
        ),
        pytest.param(
            tar(member("index.json", type=tarfile.LNKTYPE, linkname="evil.json")),
            r"member 'index.json' at byte 0 is not a regular file", id="hardlinked-index",
        ),
        pytest.param(
            tar(member("d", type=tarfile.SYMTYPE, linkname="."), member("d/manifest.json", NAMED_MANIFEST)),
            r"member 'd/manifest.json' at byte 512 lies under the symbolic link 'd'", id="through-a-symlink",
        ),
        pytest.param(tar(member("manifest.json", b"[{]")), r"its manifest.json is not JSON", id="not-json"),
    ],
)
def test_a_tar_the_engine_would_read_otherwise_is_refused_in_one_line(data: bytes, message: str) -> None:
    with pytest.raises(IntegrityFailure, match=message) as e:
        filtered(data)
    assert str(e.value).startswith("archive a.tar: ")
    assert "\n" not in str(e.value)


def test_a_wrong_header_checksum_is_refused() -> None:
    data = bytearray(tar(member("a", b"1")))
    data[0:1] = b"b"  # the name changes, the checksum does not
    with pytest.raises(IntegrityFailure, match=r"the tar header at byte 0 has a wrong checksum"):
        filtered(bytes(data))
    _set_checksum(header := bytearray(data[:512]))
    data[:512] = header
    assert names_and_files(filtered(bytes(data))) == [("b", b"1")]  # the same bytes with a right checksum


def test_a_pax_global_header_setting_a_path_is_refused_and_one_without_passes() -> None:
    with_path = io.BytesIO()
    with tarfile.open(fileobj=with_path, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"path": "manifest.json"}) as archive:
        info, data = member("decoy", NAMED_MANIFEST)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    with pytest.raises(IntegrityFailure, match=r"a PAX global header at byte 0 sets a path for the members after it"):
        filtered(with_path.getvalue())
    without = io.BytesIO()
    with tarfile.open(fileobj=without, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "hi"}) as archive:
        info, data = member("a", b"1")
        info.size = 1
        archive.addfile(info, io.BytesIO(data))
    assert without.getvalue().startswith(filtered(without.getvalue()))


def test_a_lone_zero_block_is_refused_as_go_refuses_it() -> None:
    one = tar(member("a", b"1"))
    data = one[:1024] + bytes(512) + one[:1024]
    with pytest.raises(IntegrityFailure, match=r"a lone zero block before byte 1536"):
        filtered(data)


def test_a_base256_size_is_read_as_go_reads_it() -> None:
    data = bytearray(tar(member("a", b"x" * 700)))
    data[124:136] = b"\x80" + (700).to_bytes(11, "big")
    _set_checksum(header := bytearray(data[:512]))
    data[:512] = header
    assert names_and_files(filtered(bytes(data))) == [("a", b"x" * 700)]


def test_an_empty_pax_global_header_ends_the_records_before_it_as_in_go() -> None:
    """x (path=decoy), an empty g, then manifest.json: Go forgets the x at the g, so the member is
    manifest.json, and must be rewritten."""
    x_record = b"19 path=decoy.json\n"
    assert len(x_record) == 19
    x_header, _ = member("PaxHeader", type=tarfile.XHDTYPE)
    g_header, _ = member("GlobalHead", type=tarfile.XGLTYPE)
    x_header.size, g_header.size = len(x_record), 0
    body = NAMED_MANIFEST
    info, _ = member("manifest.json")
    info.size = len(body)
    data = (
        x_header.tobuf(tarfile.USTAR_FORMAT) + x_record.ljust(512, b"\0") + g_header.tobuf(tarfile.USTAR_FORMAT)
        + info.tobuf(tarfile.USTAR_FORMAT) + body.ljust(512, b"\0") + TAR_END
    )  # fmt: skip
    out = filtered(data)
    assert VICTIM.encode() not in out
    assert names_and_files(out)[-1][0] == "manifest.json"
