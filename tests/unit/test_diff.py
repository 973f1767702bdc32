"""`imagebuild diff` on hand-made archives: what differs, grouped, and exit codes."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.diff.report import format_diff
from imagebuild.diff.sources import diff_images, load_snapshot
from imagebuild.diff.tree import Kind, flatten
from tests.unit.imagetars import AFTER, Item, config, go_style, layer, saved

BASE = layer(
    [
        Item("etc/", tarfile.DIRTYPE, mode=0o755),
        Item("etc/os-release", data=b"base\n"),
        Item("etc/motd", data=b"hi\n"),
        Item("opt/old/", tarfile.DIRTYPE, mode=0o755),
        Item("opt/old/a", data=b"a"),
        Item("opt/old/b", data=b"b"),
        Item("usr/bin/python3", data=b"py", mode=0o755),
    ]
)


def top(
    router: bytes = b"router 1", versions: bytes = b"ROUTER=1\n", shift: int = 0, mode: int = 0o755
) -> bytes:
    return layer(
        [
            Item("app/", tarfile.DIRTYPE, mode=0o755, mtime=AFTER + shift),
            Item("app/versions.txt", data=versions, mtime=AFTER + shift),
            Item("usr/local/bin/vllm-router", data=router, mode=mode, mtime=AFTER + shift),
            Item("usr/bin/py", tarfile.SYMTYPE, link="python3", mtime=AFTER + shift),
            Item("etc/.wh.motd"),
            Item("opt/old/.wh..wh..opq"),
            Item("opt/old/c", data=b"c"),
        ]
    )


def write(tmp_path: Path, name: str, layers: list[bytes], *, compress: bool = False, **cfg: object) -> Path:
    data = saved(layers, config(layers, **cfg))  # type: ignore[arg-type]
    path = tmp_path / name
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def test_flattening_applies_whiteouts_and_opaque_directories(tmp_path: Path) -> None:
    image = load_snapshot(str(write(tmp_path, "a.tar", [BASE, top()])), None).image
    tree = flatten(image.layers)
    assert "etc/motd" not in tree  # whiteout
    assert {p for p in tree if p.startswith("opt/old/")} == {"opt/old/c"}  # opaque: a and b hidden
    assert tree["usr/bin/py"].kind is Kind.SYMLINK
    assert tree["usr/bin/py"].link == "python3"


def test_same_content_with_other_mtimes_is_identical_unless_asked(tmp_path: Path) -> None:
    a = write(tmp_path, "a.tar", [BASE, top()])
    b = write(tmp_path, "b.tar.gz", [BASE, top(shift=99)], compress=True, created="2027-01-01T00:00:00Z")
    assert diff_images(str(a), str(b)).identical
    with_times = diff_images(str(a), str(b), mtime=True)
    assert not with_times.identical
    assert {c.path for c in with_times.files} == {
        "app",
        "app/versions.txt",
        "usr/local/bin/vllm-router",
        "usr/bin/py",
    }
    assert {c.key for c in with_times.config} >= {"created", "history[0] created"}


def test_a_changed_pin_shows_exactly_its_files_and_labels(tmp_path: Path) -> None:
    a = write(tmp_path, "a.tar", [BASE, top()], labels={"io.imagebuild.pin.router": "1" * 40})
    b = write(
        tmp_path,
        "b.tar",
        [BASE, top(router=b"router 2!", versions=b"ROUTER=2\n")],
        labels={"io.imagebuild.pin.router": "2" * 40},
    )
    diff = diff_images(str(a), str(b))
    assert [(c.path, c.change, sorted(c.fields)) for c in diff.files] == [
        ("app/versions.txt", "changed", ["sha256"]),
        ("usr/local/bin/vllm-router", "changed", ["sha256", "size"]),
    ]
    assert [(c.key, c.a, c.b) for c in diff.config] == [
        ("label io.imagebuild.pin.router", "1" * 40, "2" * 40)
    ]
    assert [layer.index for layer in diff.layers] == [1]  # the base layer is the same bytes
    text = format_diff(diff)
    assert (
        "  changed (2):\n    /app: versions.txt (content)\n    /usr/local/bin: vllm-router (size, content)"
        in text
    )


def test_modes_added_and_removed_files(tmp_path: Path) -> None:
    extra = layer([Item("srv/new", data=b"n")])
    a = write(tmp_path, "a.tar", [BASE, top()])
    b = write(tmp_path, "b.tar", [BASE, top(mode=0o700), extra])
    diff = diff_images(str(a), str(b))
    changes = {(c.path, c.change): c for c in diff.files}
    assert changes["usr/local/bin/vllm-router", "changed"].fields == {"mode": ("0o755", "0o700")}
    assert ("srv/new", "added") in changes
    assert ("srv", "added") not in changes  # the layer has no entry for srv/ itself
    assert diff.layers[-1].a is None  # layer 2 exists only in B
    assert "only in B (1):\n    /srv: new (file)" in format_diff(diff)


def test_cli_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path, "a.tar", [BASE, top()])
    same = write(tmp_path, "same.tar", [BASE, top(shift=5)])
    other = write(tmp_path, "other.tar", [BASE, top(router=b"changed")])
    assert main(["diff", str(a), str(same)]) == 0
    assert "identical; mtimes not compared" in capsys.readouterr().out
    assert main(["diff", str(a), str(other), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["identical"] is False
    assert [f["path"] for f in report["files"]] == ["usr/local/bin/vllm-router"]
    assert main(["diff", str(a), str(same), "--mtime"]) == 1


def test_an_export_manifest_stands_for_its_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = write(tmp_path, "kimi-k3-0123.tar.gz", [BASE, top()], compress=True)
    manifest = tmp_path / "kimi-k3-0123.tar.gz.json"
    manifest.write_text(json.dumps({"archive": archive.name, "image_id": "sha256:x"}))
    assert main(["diff", str(manifest), str(archive)]) == 0
    manifest.write_text(json.dumps({"archive": "gone.tar.zst"}))
    assert main(["diff", str(manifest), str(archive)]) == 2
    assert "names the archive gone.tar.zst, which is not beside it" in capsys.readouterr().err


def test_a_file_that_is_not_an_image_archive_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    good = write(tmp_path, "a.tar", [BASE, top()])
    assert main(["diff", str(junk), str(good)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "notes.txt" in err[0]
    assert "docker save" in err[0]


def test_the_file_type_bits_docker_puts_in_the_mode_field_are_no_difference(tmp_path: Path) -> None:
    """Docker's (Go's) tar writer puts 0o40000 in a directory's mode field; Python's writer, so the rewriter, does not."""
    docker_like = go_style(top())
    assert docker_like != top()
    a = write(tmp_path, "a.tar", [BASE, docker_like])
    b = write(tmp_path, "b.tar", [BASE, top()])
    assert diff_images(str(a), str(b)).identical


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_a_cut_or_corrupt_zstd_archive_is_bad_input_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: float
) -> None:
    import zstandard

    data = zstandard.ZstdCompressor().compress(saved([BASE, top()], config([BASE, top()])))
    corrupt = tmp_path / "a.tar.zst"
    corrupt.write_bytes(data[: int(len(data) * cut)])
    good = write(tmp_path, "b.tar", [BASE, top()])
    assert main(["diff", str(corrupt), str(good)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("imagebuild: error: ")
    assert "a.tar.zst" in line


def test_an_archive_operand_is_checked_before_the_engine_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")  # asking it would be exit 3
    junk = tmp_path / "notes.tar"
    junk.write_text("hello\n")
    assert main(["diff", str(junk), "imagebuild/kimi-k3:gfx942"]) == 2
    assert "notes.tar: not a tar archive" in capsys.readouterr().err
