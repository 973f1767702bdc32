"""publish against a fake engine: the reference, the build record, and arguments checked first.

The fake engine's registry is not there, so these publish with attach=False; attaching is tested
against the sample registry (tests/integration/test_attach.py) and, for a registry that refuses it,
a loopback server (tests/unit/test_attach.py).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.distribute.publish import PublishOptions, check_repository, publish_image
from imagebuild.engine.transfer_events import PushEvent, push_event
from imagebuild.errors import ConfigError, RegistryError
from imagebuild.testing import FakeEngine

TAG = "imagebuild/kimi-k3:gfx942"
REPOSITORY = "127.0.0.1:5000/ml/kimi-k3"


def _record(path: Path, image_id: str) -> Path:
    path.write_text(json.dumps({"image_id": image_id, "tag": TAG}))
    return path


def test_publish_returns_the_digest_reference_and_records_it(tmp_path: Path) -> None:
    engine = FakeEngine()
    image_id = engine.add_saved_image(TAG, labels={"io.imagebuild.arch": "gfx942"})
    record = _record(tmp_path / "gfx942.build.json", image_id)
    lines: list[str] = []
    result = publish_image(
        PublishOptions(image=TAG, repository=REPOSITORY, record_path=record, attach=False), engine, report=lines.append
    )
    tag = f"gfx942-{image_id.removeprefix('sha256:')[:12]}"
    assert result.tag == tag
    assert result.reference == f"{REPOSITORY}@{engine.pushed[f'{REPOSITORY}:{tag}']}"
    assert result.recorded_in == record
    assert json.loads(record.read_text())["published"] == [result.reference]
    assert any("1/1 layers done" in line for line in lines)
    again = publish_image(
        PublishOptions(image=TAG, repository=REPOSITORY, record_path=record, attach=False), engine, report=lines.append
    )
    assert again.reference == result.reference
    assert json.loads(record.read_text())["published"] == [result.reference]  # once, however often pushed


def test_a_record_of_another_image_is_left_alone(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_saved_image(TAG)
    record = _record(tmp_path / "gfx942.build.json", "sha256:" + "0" * 64)
    before = record.read_text()
    lines: list[str] = []
    result = publish_image(
        PublishOptions(image=TAG, repository=REPOSITORY, record_path=record, attach=False), engine, report=lines.append
    )
    assert result.recorded_in is None
    assert record.read_text() == before
    assert any("describes image sha256:0000" in line and "not recorded" in line for line in lines)


def test_in_a_project_that_never_built_here_the_statement_goes_into_a_new_build_dir(tmp_path: Path) -> None:
    """The default record, build/gfx942.build.json, of a checkout with no build/ yet (the image was
    built elsewhere, or with --record elsewhere): the push is not followed by a failure to write."""
    engine = FakeEngine()
    image_id = engine.add_saved_image(TAG, labels={"io.imagebuild.arch": "gfx942"})
    record = tmp_path / "build" / "gfx942.build.json"
    lines: list[str] = []
    result = publish_image(
        PublishOptions(image=TAG, repository=REPOSITORY, record_path=record, attach=False), engine, report=lines.append
    )
    assert result.recorded_in is None
    (statement,) = result.attestations
    assert statement.parent == record.parent
    assert json.loads(statement.read_text())["subject"][0]["digest"] == {"sha256": result.digest.removeprefix("sha256:")}
    assert any(f"no build record at {record}" in line for line in lines)
    assert image_id


def test_a_statement_place_that_cannot_be_made_is_refused_before_the_push(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_saved_image(TAG)
    (tmp_path / "build").write_text("a file where the directory would go\n")
    record = tmp_path / "build" / "gfx942.build.json"
    with pytest.raises(ConfigError, match=r"cannot write the publish statement beside the build record \(.*build: File exists\)"):
        publish_image(PublishOptions(image=TAG, repository=REPOSITORY, record_path=record, attach=False), engine, report=lambda _: None)
    assert engine.pushed == {}


@pytest.mark.parametrize(
    ("repository", "message"),
    [
        ("kimi-k3", "must start with the registry"),
        ("ml/kimi-k3", "must start with the registry"),
        ("127.0.0.1:5000/kimi-k3:v1", "without a tag or digest"),
        ("127.0.0.1:5000/kimi-k3@sha256:" + "0" * 64, "without a tag or digest"),
        ("127.0.0.1:5000/Kimi-K3", "not a valid repository"),
        ("127.0.0.1:5000/kimi k3", "not a valid repository"),
        ("127.0.0.1:5000/kimi\nk3", "not a valid repository"),
    ],
)
def test_a_bad_repository_is_refused_naming_the_flag(repository: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        check_repository(repository)
    assert str(e.value).startswith("--repository ")


@pytest.mark.parametrize(
    "repository", ["127.0.0.1:5000/kimi-k3", "localhost/ml/kimi-k3", "reg.example.com/a/b_c"]
)
def test_a_good_repository_passes(repository: str) -> None:
    assert check_repository(repository) == repository


def test_publish_checks_its_arguments_before_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    # No engine is reachable from unit tests: reaching it would fail with exit 3, not 2.
    assert main(["publish", TAG, "--repository", "kimi-k3"]) == 2
    assert main(["publish", TAG, "--repository", REPOSITORY, "--tag", "bad/tag"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("imagebuild: error: --repository 'kimi-k3': must start with the registry")
    assert err[1].startswith("imagebuild: error: --tag 'bad/tag': a tag is 1-128 letters")


def test_a_registry_failure_is_a_registry_error(tmp_path: Path) -> None:
    engine = FakeEngine(refuse_push="push of x: registry unreachable.example is unreachable")
    engine.add_saved_image(TAG)
    with pytest.raises(RegistryError) as e:
        publish_image(
            PublishOptions(image=TAG, repository="unreachable.example/x"), engine, report=lambda _: None
        )
    assert e.value.exit_code == 8


def test_export_and_import_check_their_arguments_before_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["export", TAG, "--output", str(blocker / "out")]) == 2
    assert main(["import", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "--output" in err[0]
    assert "not a directory" in err[0].lower()
    assert err[1].startswith(f"imagebuild: error: manifest {tmp_path / 'missing.json'}: not found")


def test_push_stream_messages_become_layer_progress_then_the_digest() -> None:
    layer = {"status": "Pushing", "progressDetail": {"current": 512, "total": 2048}, "id": "0a1b2c3d4e5f"}
    assert push_event(layer) == PushEvent(layer="0a1b2c3d4e5f", status="Pushing", current=512, total=2048)
    assert push_event({"status": "The push refers to repository [127.0.0.1:5000/ml/kimi-k3]"}) == PushEvent(
        status="The push refers to repository [127.0.0.1:5000/ml/kimi-k3]"
    )
    done = {"progressDetail": {}, "aux": {"Tag": "t", "Digest": "sha256:" + "a" * 64, "Size": 1234}}
    assert push_event(done) == PushEvent(digest="sha256:" + "a" * 64)


def test_podmans_push_stream_gives_the_digest_in_its_status_line() -> None:
    """Podman 4.3.1's POST /images/{name}/push, recorded: two status lines and no aux."""
    recorded = [
        {"status": "The push refers to repository [127.0.0.1:55000/podman/kimi:test]"},
        {"status": "test: digest: sha256:cbd2795b3ab3b95b0fe5cae52f889ed67268dd5f57ef9866afe4885cd37d490b size: 3678"},
    ]
    events = [push_event(message) for message in recorded]
    assert [e.digest for e in events] == [
        None,
        "sha256:cbd2795b3ab3b95b0fe5cae52f889ed67268dd5f57ef9866afe4885cd37d490b",
    ]


OCI_MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def _serving(documents: dict[str, bytes]) -> tuple[ThreadingHTTPServer, str]:
    """A loopback registry holding ``documents`` (manifests by path), answering 404 to anything else."""

    class Registry(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = documents.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", OCI_MANIFEST_TYPE if body else "application/json")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def test_an_identity_the_store_did_not_give_is_read_back_from_the_manifest_pushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docker-group user on Docker 29's containerd store: the engine names the image by its manifest
    and imagebuild may not read the store; the registry then holds that manifest, which names the config."""
    engine = FakeEngine(manifest_ids=True)
    engine.add_saved_image(TAG, labels={"io.imagebuild.arch": "gfx942"})
    unread = engine.inspect_image(TAG)
    engine.images[engine.images.index(unread)] = replace(unread, config_digest="", identity_unknown="cannot read it")
    identity = "sha256:" + "c" * 64
    manifest = json.dumps(
        {"schemaVersion": 2, "mediaType": OCI_MANIFEST_TYPE, "layers": [],
         "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": identity, "size": 2}}
    ).encode()  # fmt: skip
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    server, registry = _serving({f"/v2/ml/kimi-k3/manifests/{digest}": manifest})
    monkeypatch.setattr(engine, "push", lambda repository, tag: iter([PushEvent(digest=digest)]))
    record = _record(tmp_path / "gfx942.build.json", identity)
    lines: list[str] = []
    try:
        result = publish_image(
            PublishOptions(image=TAG, repository=f"{registry}/ml/kimi-k3", record_path=record, attach=False),
            engine,
            report=lines.append,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert (result.image_id, result.recorded_in) == (identity, record)
    assert json.loads(record.read_text())["published"] == [f"{registry}/ml/kimi-k3@{digest}"]
    assert f"its identity, from the manifest the registry now holds: {identity}" in lines
    assert not any("identity is unknown" in line for line in lines)
