"""Attestations attached to an image: artifact manifests, the referrers index, references, refusals.

The manifests and the fallback index are pure data (distribute/referrers.py), tested here byte for
byte; the push itself is tested against the sample registry (tests/integration/test_attach.py). A
registry that refuses the push is a loopback HTTP server answering every request as a registry
denying access does (distribution's error body), so publish's real client meets a real refusal.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from imagebuild.distribute.archive_files import carried_name
from imagebuild.distribute.attached import parse_reference
from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.local_import import import_manifest
from imagebuild.distribute.publish import PublishOptions, publish_image
from imagebuild.distribute.referrers import (
    EMPTY_DIGEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    ReferrersError,
    artifact_of,
    fallback_tag,
    merged_index,
    referrers_in,
)
from imagebuild.distribute.registry_http import docker_tls_files
from imagebuild.errors import ConfigError, ExitCode, IntegrityError, RegistryError
from imagebuild.lock.http import Http, TlsFiles
from imagebuild.testing import FakeEngine

IMAGE = Descriptor(
    media_type="application/vnd.docker.distribution.manifest.v2+json", digest="sha256:" + "ab" * 32, size=1234
)
TAG = "imagebuild/kimi-k3:gfx942"


def test_an_artifact_manifest_is_the_oci_1_1_shape_with_the_image_as_subject() -> None:
    blob = b'{"bomFormat": "CycloneDX"}\n'
    artifact = artifact_of("gfx942-0123456789ab.sbom.cdx.json", blob, IMAGE)
    manifest = json.loads(artifact.manifest)
    assert manifest["mediaType"] == OCI_MANIFEST
    assert manifest["artifactType"] == "application/vnd.cyclonedx+json"
    assert manifest["config"] == {
        "mediaType": "application/vnd.oci.empty.v1+json", "digest": EMPTY_DIGEST, "size": 2, "data": "e30=",
    }  # fmt: skip
    assert "sha256:" + hashlib.sha256(b"{}").hexdigest() == EMPTY_DIGEST
    (layer,) = manifest["layers"]
    assert layer["digest"] == "sha256:" + hashlib.sha256(blob).hexdigest()
    assert layer["size"] == len(blob)
    assert layer["annotations"] == {"org.opencontainers.image.title": "gfx942-0123456789ab.sbom.cdx.json"}
    assert manifest["subject"] == {"mediaType": IMAGE.media_type, "digest": IMAGE.digest, "size": 1234}
    # The same document about the same image is the same manifest: a second publish adds nothing.
    assert artifact_of("gfx942-0123456789ab.sbom.cdx.json", blob, IMAGE).manifest == artifact.manifest
    descriptor = artifact.descriptor
    assert descriptor.digest == "sha256:" + hashlib.sha256(artifact.manifest).hexdigest()
    assert descriptor.artifact_type == "application/vnd.cyclonedx+json"


@pytest.mark.parametrize(
    ("name", "artifact_type"),
    [
        ("gfx942-0123456789ab.provenance.intoto.json", "application/vnd.in-toto+json"),
        ("gfx942-0123456789ab.provenance.dsse.json", "application/vnd.dsse.envelope.v1+json"),
        ("gfx942-0123456789ab.sbom.dsse.json", "application/vnd.dsse.envelope.v1+json"),
        ("gfx942-0123456789ab.publish.intoto.json", "application/vnd.in-toto+json"),
    ],
)
def test_each_document_gets_the_artifact_type_of_what_it_is(name: str, artifact_type: str) -> None:
    assert json.loads(artifact_of(name, b"{}", IMAGE).manifest)["artifactType"] == artifact_type


def test_the_fallback_tag_is_the_digest_with_a_dash() -> None:
    assert fallback_tag(IMAGE.digest) == "sha256-" + "ab" * 32
    with pytest.raises(ReferrersError, match="not a sha256 digest"):
        fallback_tag("latest")


def test_the_fallback_index_lists_each_artifact_once_and_keeps_what_others_listed() -> None:
    sbom = artifact_of("a.sbom.cdx.json", b"1", IMAGE).descriptor
    provenance = artifact_of("a.provenance.intoto.json", b"2", IMAGE).descriptor
    first, changed = merged_index(None, [sbom, provenance], "r:tag")
    assert changed
    index = json.loads(first)
    assert index["mediaType"] == OCI_INDEX
    assert [e["digest"] for e in index["manifests"]] == [sbom.digest, provenance.digest]
    assert index["manifests"][0]["artifactType"] == "application/vnd.cyclonedx+json"
    again, changed = merged_index(first, [sbom, provenance], "r:tag")
    assert not changed
    assert again == first
    # A signature another tool attached stays, first, and ours are added after it once.
    foreign = {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "cd" * 32, "size": 9, "artifactType": "application/vnd.dev.cosign.artifact.sig.v1+json"}
    theirs = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [foreign]}).encode()
    merged, changed = merged_index(theirs, [sbom, sbom], "r:tag")
    assert changed
    assert [e["digest"] for e in json.loads(merged)["manifests"]] == [foreign["digest"], sbom.digest]
    assert [d.digest for d in referrers_in(merged, "r:tag")] == [foreign["digest"], sbom.digest]


@pytest.mark.parametrize(
    ("held", "why"),
    [
        (b"not json", "not JSON"),
        (json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {}}).encode(), "not " + re.escape(OCI_INDEX)),
        (json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, "digest": "sha256:1", "size": 1}]}).encode(), "is not sha256"),
        (json.dumps({"schemaVersion": 1, "manifests": []}).encode(), "not an OCI image index"),
    ],
)
def test_a_fallback_tag_holding_something_else_is_not_rewritten(held: bytes, why: str) -> None:
    with pytest.raises(ReferrersError, match=why):
        merged_index(held, [artifact_of("a.sbom.cdx.json", b"1", IMAGE).descriptor], "r:tag")


def test_a_reference_is_a_digest_or_a_tag_of_a_registry_repository() -> None:
    by_digest = parse_reference(f"127.0.0.1:55000/ml/kimi-k3@{IMAGE.digest}")
    assert (by_digest.repository, by_digest.reference) == ("127.0.0.1:55000/ml/kimi-k3", IMAGE.digest)
    by_tag = parse_reference("registry.example.com/ml/kimi-k3:gfx942-0123456789ab")
    assert (by_tag.repository, by_tag.reference) == ("registry.example.com/ml/kimi-k3", "gfx942-0123456789ab")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("127.0.0.1:55000/ml/kimi-k3@sha256:abc", "the digest after '@' must be sha256"),
        ("127.0.0.1:55000/ml/kimi-k3", "give HOST"),
        ("kimi-k3:latest", "is not a registry repository"),
        ("user:secret@127.0.0.1:55000/x:y", "carries no user name or password"),
        ("user:secret@127.0.0.1:55000", "carries no user name or password"),
        # A digest without a registry is a wrong reference, not a credential (one rule decides both).
        (f"kimi-k3@{IMAGE.digest}", "is not a registry repository"),
    ],
)
def test_a_bad_reference_is_one_line_naming_it(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        parse_reference(text)
    assert "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)


class _Refusing(BaseHTTPRequestHandler):
    """A registry that refuses everything, as distribution does: 403 and its error body."""

    def _deny(self) -> None:
        body = json.dumps({"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]})
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_HEAD = do_POST = do_PUT = _deny

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def refusing_registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_registry_refusing_the_attestations_fails_in_one_line_and_the_image_stays_pushed(
    tmp_path: Path, refusing_registry: str
) -> None:
    engine = FakeEngine()
    image_id = engine.add_saved_image(TAG, labels={"io.imagebuild.arch": "gfx942"})
    sbom = tmp_path / f"gfx942-{image_id[7:19]}.sbom.cdx.json"
    sbom.write_text('{"bomFormat": "CycloneDX"}\n')
    record = tmp_path / "gfx942.build.json"
    record.write_text(json.dumps({"image_id": image_id, "attestations": [str(sbom)]}))
    repository = f"{refusing_registry}/ml/kimi-k3"
    with pytest.raises(RegistryError) as caught:
        publish_image(PublishOptions(image=TAG, repository=repository, record_path=record), engine, report=lambda _: None)
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.REGISTRY
    assert "\n" not in message
    tag = f"{repository}:gfx942-{image_id[7:19]}"
    assert f"stays pushed and tagged {tag}" in message
    assert "DENIED requested access to the resource is denied" in message
    assert tag in engine.pushed  # the image itself went
    assert json.loads(record.read_text())["published"] == [f"{repository}@{engine.pushed[tag]}"]


def test_export_carries_the_build_documents_and_import_checks_them_first(tmp_path: Path) -> None:
    source = FakeEngine()
    image_id = source.add_saved_image(TAG, labels={"io.imagebuild.arch": "gfx942"})
    build = tmp_path / "build"
    build.mkdir()
    sbom = build / f"gfx942-{image_id[7:19]}.sbom.cdx.json"
    provenance = build / f"gfx942-{image_id[7:19]}.provenance.intoto.json"
    sbom.write_text(json.dumps({"bomFormat": "CycloneDX", "components": [{"name": "ü"}]}, indent=2))
    provenance.write_text(json.dumps({"_type": "https://in-toto.io/Statement/v1"}, indent=2))
    record = build / "gfx942.build.json"
    record.write_text(json.dumps({"image_id": image_id, "attestations": [str(sbom), str(provenance)]}))
    options = ExportOptions(image=TAG, output=tmp_path / "out", compression=Compression.NONE, record_path=record)
    result = export_image(options, source, report=lambda _: None)
    archive = result.manifest.archive
    beside = {path.name for path in result.manifest_path.parent.iterdir()}
    carried = [result.manifest_path.parent / carried_name(archive, doc) for doc in (sbom, provenance)]
    assert [p.name for p in carried] == [f"{archive}.sbom.cdx.jsonl", f"{archive}.provenance.intoto.jsonl"]
    assert {p.name for p in carried} <= beside
    assert list(result.manifest_path.parent.glob("*.json")) == [result.manifest_path]  # still only the manifest
    assert json.loads(carried[0].read_text()) == json.loads(sbom.read_text())  # the same document, one line
    assert carried[0].read_text().count("\n") == 1
    for path in carried:
        assert result.manifest.attestations[path.name] == hashlib.sha256(path.read_bytes()).hexdigest()

    carried[0].write_text(carried[0].read_text().replace("ü", "u"))  # changed after export
    node = FakeEngine()
    with pytest.raises(IntegrityError, match=r"attestation .*sbom\.cdx\.jsonl: sha256 mismatch .* nothing was loaded"):
        import_manifest(result.manifest_path, node, report=lambda _: None)
    assert node.tags == {}
    carried[0].unlink()
    with pytest.raises(ConfigError, match=r"sbom\.cdx\.jsonl: not found \(named by"):
        import_manifest(result.manifest_path, node, report=lambda _: None)


def test_docker_s_certificates_for_the_registry_are_the_client_s(tmp_path: Path) -> None:
    host = tmp_path / "registry.example.com:5000"
    host.mkdir()
    assert docker_tls_files("registry.example.com:5000", tmp_path) == TlsFiles()  # nothing there: the system's
    (host / "ca.crt").write_text("ca")
    (host / "client.cert").write_text("cert")
    (host / "client.key").write_text("key")
    tls = docker_tls_files("registry.example.com:5000", tmp_path)
    assert tls == TlsFiles(ca=host / "ca.crt", client=(host / "client.cert", host / "client.key"))
    assert docker_tls_files("other.example.com", tmp_path) == TlsFiles()
    with Http(timeout=1, tls=tls) as http:
        session = http._session()
        assert session.verify == str(host / "ca.crt")
        assert session.cert == (str(host / "client.cert"), str(host / "client.key"))
