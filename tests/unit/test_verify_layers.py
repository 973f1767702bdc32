"""verify's layer scan: a credential in any layer's file is found, with its layer and path, also when a
later layer deletes or overwrites the file, also base64- or URL-encoded, under /tmp and /home."""

from __future__ import annotations

import base64
import gzip
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from imagebuild.engine import containerd_store
from imagebuild.inputs.layout import SECRET_SCAN_MAX_FILE_BYTES, SECRET_SCAN_ROOTS
from imagebuild.project import find_project
from imagebuild.testing import FakeEngine, image_info
from imagebuild.verify import VerifyOptions, prepare_verify, runner, verify
from imagebuild.verify.layers import layer_secrets_check
from tests.unit.cli_support import disk_full_after
from tests.unit.imagetars import Item, config, content_store_image, digest, layer, saved, stored_image

REPO = Path(__file__).resolve().parents[2]
TOKEN = "ghp_" + "Q7w" * 12
DOCKER_AUTH = base64.b64encode(f"deploy:{TOKEN}".encode()).decode()

# Layer 1 clones with a token and logs in; layer 2 deletes the clone's config and overwrites the
# docker login; layer 3 is clean. The final filesystem holds no credential at all.
LAYERS = [
    layer([
        Item("tmp/mori/.git/config", data=f"[remote]\n\turl = https://x-access-token:{TOKEN}@github.com/o/r\n".encode()),
        Item("root/.docker/config.json", data=f'{{"auths": {{"r.example.org": {{"auth": "{DOCKER_AUTH}"}}}}}}'.encode()),
        Item("home/builder/.profile", data=b"export REPO=https%3A%2F%2Fdeploy%3Ahunter2%40example.com%2Fr.git\n"),
        Item("usr/lib/outside.txt", data=f"GH_TOKEN={TOKEN}\n".encode()),  # not under a scan root
        Item("opt/model.bin", data=b"\0" * 16 + TOKEN.encode()),  # a binary file: not read
    ]),
    layer([
        Item("tmp/mori/.git/.wh.config"),
        Item("root/.docker/config.json", data=b'{"auths": {}}'),
    ]),
    layer([Item("app/versions.txt", data=b"MORI_REF=fe12a11a7d6c6acd0771b772366ed9ed5e0d3d44\n")]),
]  # fmt: skip
ROOTS = SECRET_SCAN_ROOTS


def _engine(layers: list[bytes], *, oci: bool = False) -> tuple[FakeEngine, str]:
    archive = saved(layers, config(layers), oci=oci)
    image_id = "sha256:" + "b" * 64
    engine = FakeEngine(images=[image_info(image_id, tags=["img"])])
    engine.saved[image_id] = archive
    return engine, image_id


@pytest.mark.parametrize("oci", [False, True], ids=["legacy save", "OCI save"])
def test_a_deleted_or_overwritten_file_is_still_found_with_its_layer_and_path(oci: bool) -> None:
    engine, image_id = _engine(LAYERS, oci=oci)
    check = layer_secrets_check(engine, engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES)
    assert check.outcome == "failed"
    first = digest(LAYERS[0])[:19]
    lines = check.message.splitlines()
    assert "(read from docker save)" in lines[0]
    assert lines[1:3] == ["expected: none in any layer (5 text files scanned)", "found:    3:"]
    assert lines[3:] == [
        f"layer 1 ({first}): /home/builder/.profile:1: password in a URL, URL-encoded: ...export <redacted 57 chars>",
        f"layer 1 ({first}): /root/.docker/config.json:1: GitHub token, base64-encoded: "
        f'...example.org": {{"auth": "<redacted {len(DOCKER_AUTH)} chars>',
        f"layer 1 ({first}): /tmp/mori/.git/config:2: GitHub token: ... https://x-access-token:<redacted 40 chars>",
    ]
    assert TOKEN not in check.message
    assert DOCKER_AUTH not in check.message
    assert "hunter2" not in check.message
    assert "outside.txt" not in check.message


def test_the_engines_layer_store_gives_the_same_findings(tmp_path: Path) -> None:
    engine, image_id = _engine(LAYERS)
    engine.stored[image_id] = stored_image(LAYERS, config(LAYERS), tmp_path / "store")
    from_save = layer_secrets_check(
        _engine(LAYERS)[0], engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES
    )
    from_store = layer_secrets_check(engine, engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES)
    assert "read from the engine's layer store" in from_store.message
    assert from_store.message.splitlines()[1:] == from_save.message.splitlines()[1:]


@pytest.mark.parametrize("damaged", [False, True], ids=["blobs", "a damaged blob: save"])
def test_the_containerd_store_s_blobs_give_the_same_findings(tmp_path: Path, damaged: bool) -> None:
    engine, image_id = _engine(LAYERS)
    stored_id = content_store_image(LAYERS, config(LAYERS), tmp_path)
    engine.stored[image_id] = containerd_store.stored_image(stored_id, data_root=str(tmp_path))
    if damaged:  # a valid gzip stream of another tar: its diffID is not the layer's
        blob = engine.stored[image_id].layers[0].blob  # type: ignore[union-attr]
        blob.write_bytes(gzip.compress(LAYERS[0] + bytes(512), mtime=0))
        engine.stored[image_id] = containerd_store.stored_image(stored_id, data_root=str(tmp_path))  # its new size
    from_save = layer_secrets_check(
        _engine(LAYERS)[0], engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES
    )
    saved: list[str] = []
    from_store = layer_secrets_check(
        engine, engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES, saved_config=saved.append
    )
    source = "docker save" if damaged else "the engine's content store"
    assert f"read from {source}" in from_store.message
    # The saved config's digest (the identity verify reports where the store did not give it), only when saved.
    assert [len(d) for d in saved if d.startswith("sha256:")] == ([71] if damaged else [])
    assert from_store.message.splitlines()[1:] == from_save.message.splitlines()[1:]


def test_an_image_without_credentials_passes() -> None:
    engine, image_id = _engine(LAYERS[2:])
    check = layer_secrets_check(engine, engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES)
    assert (check.outcome, check.message) == ("passed", "")


def test_a_file_over_the_size_limit_is_not_read() -> None:
    big = [layer([Item("etc/big.conf", data=f"GH_TOKEN={TOKEN}\n".encode() + b"x" * 2048)])]
    engine, image_id = _engine(big)
    check = layer_secrets_check(engine, engine.inspect_image(image_id), roots=ROOTS, max_bytes=1024)
    assert check.outcome == "passed"


def test_verify_reports_the_layer_scan_with_the_other_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "run_checks", lambda **_: ((), None))
    engine, _ = _engine(LAYERS)
    inputs = find_project(REPO, REPO / "tests" / "data" / "build_streams" / "pins.toml").load("gfx942")
    result = verify(prepare_verify(inputs, VerifyOptions(image="img")), engine)
    (check,) = result.checks
    assert (check.group, check.name, check.outcome) == ("secrets", "test_no_secrets_in_layers", "failed")
    assert "layer 1 (" in result.format_report()
    assert TOKEN not in result.format_report()


def test_a_save_that_is_no_archive_is_an_engine_error() -> None:
    engine, image_id = _engine(LAYERS)
    engine.saved[image_id] = b"not a tar" * 100
    with pytest.raises(Exception, match="could not be read to scan its layers") as raised:
        layer_secrets_check(engine, engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES)
    assert not isinstance(raised.value, tarfile.TarError)


PYTEST_JUNIT = (
    b'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="imagebuild-verify" errors="0" '
    b'failures="1" skipped="0" tests="2"><testcase classname="test_config" name="a"/>'
    b'<testcase classname="test_config" name="b"><failure message="x"/></testcase></testsuite></testsuites>'
)


def test_the_layer_check_joins_the_junit_file_and_its_counts() -> None:
    engine, image_id = _engine(LAYERS)
    check = layer_secrets_check(engine, engine.inspect_image(image_id), roots=ROOTS, max_bytes=SECRET_SCAN_MAX_FILE_BYTES)
    junit = runner.add_to_junit(PYTEST_JUNIT, check)
    suite = ET.fromstring(junit).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")
    (case,) = [c for c in suite.iter("testcase") if c.get("name") == "test_no_secrets_in_layers"]
    failure = case.find("failure")
    assert failure is not None
    assert "layer 1 (" in (failure.text or "")
    assert TOKEN.encode() not in junit


def test_the_junit_file_is_written_whole_with_the_layer_check_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "run_checks", lambda **_: ((), PYTEST_JUNIT))
    engine, _ = _engine(LAYERS)
    inputs = find_project(REPO, REPO / "tests" / "data" / "build_streams" / "pins.toml").load("gfx942")
    junit = tmp_path / "reports" / "verify.xml"
    verify(prepare_verify(inputs, VerifyOptions(image="img", junit=junit)), engine)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "3"  # pytest's two and the layer scan
    assert junit.stat().st_mode & 0o777 == 0o644
    disk_full_after(monkeypatch, files=0)
    with pytest.raises(OSError, match="No space left on device") as raised:
        verify(prepare_verify(inputs, VerifyOptions(image="img", junit=junit)), engine)
    assert raised.value.filename == str(junit)  # main names it in its one line
    assert ET.parse(junit).getroot().find("testsuite") is not None  # the last whole file is kept
    assert [p.name for p in junit.parent.iterdir()] == ["verify.xml"]
