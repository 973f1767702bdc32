"""Attestations attached to the pushed image, for real: the sample registry (Debian's docker-registry 2.8).

The session's sample image is published once, with its build record's SBOM and provenance (copied
with the record, so the session's record is left as it was) and a signed publish statement. That
registry has no referrers API, so the documents are listed by the referrers tag schema's index;
`imagebuild attestations REF` must find them there, download the very bytes that were pushed and
verify the signed one, and a second publish must not list anything twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from imagebuild.cli import main
from imagebuild.distribute.referrers import OCI_INDEX, fallback_tag
from sampleworld.world import World
from tests.integration.image_support import CHECKOUT

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

# Per checkout: several checkouts share one registry, and a shared repository's index would be theirs too.


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def _key_pair(directory: Path, name: str, seed: bytes | None = None) -> tuple[Path, Path]:
    key = ed25519.Ed25519PrivateKey.from_private_bytes(seed) if seed else ed25519.Ed25519PrivateKey.generate()
    private, public = directory / f"{name}.pem", directory / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # One key every session: ed25519 signs deterministically, so the publish envelope of the same image
    # is the same artifact each session, and the index does not grow with it.
    return _key_pair(tmp_path_factory.mktemp("keys"), "signer", hashlib.sha256(b"imagebuild test_attach").digest())


@pytest.fixture(scope="module")
def published(
    sample_image: dict[str, object], world: World, keys: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The sample image published with its documents attached; publish's --json and the record's directory."""
    sbom, provenance = Path(str(sample_image["sbom"])), Path(str(sample_image["provenance"]))
    record = sbom.with_name("record.json")  # the sample_image fixture's record, beside its documents
    assert json.loads(record.read_text())["image_id"] == sample_image["image_id"]
    copy = tmp_path_factory.mktemp("attach-record")
    for path in (record, sbom, provenance):
        shutil.copy(path, copy / path.name)
    repository = f"{world.registry}/imagebuild-test-attached-{CHECKOUT}/kimi-k3"
    code, out = _run(
        "publish", str(sample_image["tag"]), "-t", repository, "--record", str(copy / record.name),
        "--sign-key", str(keys[0]), "--json",
    )  # fmt: skip
    assert code == 0
    result: dict[str, Any] = json.loads(out)
    result["record_dir"] = copy
    return result


def _index(registry: str, repository: str, digest: str) -> bytes:
    path = repository.removeprefix(f"{registry}/")
    response = requests.get(
        f"http://{registry}/v2/{path}/manifests/{fallback_tag(digest)}", headers={"Accept": OCI_INDEX}, timeout=30
    )
    response.raise_for_status()
    return response.content


def test_publish_attaches_sbom_provenance_and_statement_listed_by_the_fallback_tag(
    published: dict[str, Any], world: World
) -> None:
    attached = published["attached"]
    digest = published["digest"]
    assert attached["subject"] == digest
    assert attached["listed_by"] == f"tag {fallback_tag(digest)}"
    names = sorted(Path(d["path"]).name for d in attached["documents"])
    short = str(published["image_id"])[7:19]
    assert names == sorted(
        f"gfx942-{short}.{kind}" for kind in ("sbom.cdx.json", "provenance.intoto.json", "publish.intoto.json", "publish.dsse.json")
    )
    # The registry has no referrers API: what lists them is the tag schema's index.
    path = published["repository"].removeprefix(f"{world.registry}/")
    assert requests.get(f"http://{world.registry}/v2/{path}/referrers/{digest}", timeout=30).status_code == 404
    listed = json.loads(_index(world.registry, published["repository"], digest))["manifests"]
    assert {d["manifest_digest"] for d in attached["documents"]} <= {e["digest"] for e in listed}

    code, out = _run("attestations", published["reference"], "--json")
    assert code == 0
    found = json.loads(out)
    assert found["digest"] == digest
    assert found["image"] == published["image_id"]
    assert found["listed_by"] == f"tag {fallback_tag(digest)}"
    assert len(found["referrers"]) >= 4
    by_digest = {e["digest"]: e for e in found["referrers"]}
    for document in attached["documents"]:
        entry = by_digest[document["manifest_digest"]]
        assert entry["artifactType"] == document["artifact_type"]
        assert entry["annotations"]["org.opencontainers.image.title"] == Path(document["path"]).name
    by_tag = json.loads(_run("attestations", f"{published['repository']}:{published['tag']}", "--json")[1])
    assert by_tag["referrers"] == found["referrers"]


def test_the_downloaded_documents_are_the_bytes_that_were_pushed(
    published: dict[str, Any], keys: tuple[Path, Path], tmp_path: Path
) -> None:
    listed = json.loads(_run("attestations", published["reference"], "--json")[1])["referrers"]
    titles = [e["annotations"]["org.opencontainers.image.title"] for e in listed]
    code, out = _run("attestations", published["reference"], "--download", str(tmp_path / "got"))
    assert code == 0
    lines = dict(reversed(line.split("  ", 1)) for line in out.splitlines())
    assert len(lines) == len(listed)
    for document in published["attached"]["documents"]:
        local = Path(document["path"])
        # A rebuild of the same image (an earlier session's) has its own provenance beside this one's.
        shared = titles.count(local.name) > 1
        got = tmp_path / "got" / (f"{document['manifest_digest'][7:19]}-{local.name}" if shared else local.name)
        assert got.read_bytes() == local.read_bytes()
        assert lines[str(got)] == document["sha256"] == "sha256:" + hashlib.sha256(local.read_bytes()).hexdigest()
        assert got.stat().st_mode & 0o644 == 0o644
        if got.name.endswith(".dsse.json"):  # a downloaded envelope verifies as a local one does
            assert _run("attestations", "verify", str(got), "--key", str(keys[1]))[1] == f"{published['image_id']}\n"


def test_verify_with_the_key_checks_the_attached_envelopes_against_the_image(
    published: dict[str, Any], keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _run("attestations", published["reference"], "--verify", "--key", str(keys[1]))
    assert code == 0
    assert out == f"{published['image_id']}\n"
    other = _key_pair(tmp_path, "other")[1]
    capsys.readouterr()
    assert _run("attestations", published["reference"], "--verify", "--key", str(other))[0] == 11
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines, one line
    assert error.startswith("imagebuild: error: ")
    assert f".publish.dsse.json attached to {published['repository']}@{published['digest'][:19]}" in error
    assert f"no signature verifies with {other}" in error


def test_a_second_publish_lists_nothing_twice(published: dict[str, Any], sample_image: dict[str, object], world: World) -> None:
    before = _index(world.registry, published["repository"], published["digest"])
    code, out = _run(
        "publish", str(sample_image["tag"]), "-t", published["repository"],
        "--record", str(published["record_dir"] / "record.json"), "--json",
    )  # fmt: skip
    assert code == 0
    again = json.loads(out)
    assert again["digest"] == published["digest"]
    assert not again["attached"]["index_updated"]
    after = _index(world.registry, published["repository"], published["digest"])
    assert after == before
    digests = [e["digest"] for e in json.loads(after)["manifests"]]
    assert len(digests) == len(set(digests))


def test_export_carries_the_documents_and_import_checks_them_before_loading(
    published: dict[str, Any], sample_image: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = published["record_dir"] / "record.json"
    code, out = _run(
        "export", str(sample_image["tag"]), "-o", str(tmp_path), "--compress", "none", "--record", str(record), "--json"
    )
    assert code == 0
    manifest_path = Path(json.loads(out)["manifest"])
    manifest = json.loads(manifest_path.read_text())
    archive = manifest["archive"]
    carried = {f"{archive}.sbom.cdx.jsonl": "sbom", f"{archive}.provenance.intoto.jsonl": "provenance"}
    assert set(carried) | {f"{archive}.export.intoto.jsonl"} == set(manifest["attestations"])
    for name, key in carried.items():
        path = tmp_path / name
        assert manifest["attestations"][name] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert json.loads(path.read_text()) == json.loads(Path(str(sample_image[key])).read_text())
    assert list(tmp_path.glob("*.json")) == [manifest_path]

    assert main(["import", str(manifest_path)]) == 0  # present already: checked all the same
    sbom = tmp_path / f"{archive}.sbom.cdx.jsonl"
    sbom.write_bytes(sbom.read_bytes().replace(b"CycloneDX", b"CycloneDx", 1))
    capsys.readouterr()
    assert main(["import", str(manifest_path)]) == 7
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"attestation {sbom}: sha256 mismatch" in error
    assert "nothing was loaded" in error
