"""Signed attestations: DSSE envelopes with the user's key, every bad key one line, and verification."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from imagebuild.attest.dsse import pae, sign_envelope
from imagebuild.attest.keys import load_signing_key, load_verification_key
from imagebuild.attest.verify import verify_attestation
from imagebuild.build.record import BuildRecord
from imagebuild.cli import main
from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.errors import ConfigError, ExitCode, UnverifiedError
from imagebuild.testing import FakeEngine

Replay = Callable[..., tuple[FakeEngine, BuildRecord]]  # the replay fixture (tests/unit/conftest.py)
PASSPHRASE = "correct-horse-battery-staple-9f3"  # must reach no output and no file


def write_key(tmp_path: Path, key: object, name: str, *, passphrase: str | None = None) -> tuple[Path, Path]:
    """(private PEM, public PEM) of ``key`` under tmp_path."""
    encryption = (
        serialization.BestAvailableEncryption(passphrase.encode())
        if passphrase
        else serialization.NoEncryption()
    )
    private = tmp_path / f"{name}.pem"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)  # type: ignore[attr-defined]
    )
    public = tmp_path / f"{name}.pub"
    public.write_bytes(
        key.public_key().public_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


@pytest.fixture
def ed_key(tmp_path: Path) -> tuple[Path, Path]:
    return write_key(tmp_path, ed25519.Ed25519PrivateKey.generate(), "ed")


@pytest.fixture
def p256_key(tmp_path: Path) -> tuple[Path, Path]:
    return write_key(tmp_path, ec.generate_private_key(ec.SECP256R1()), "p256")


def test_pae_is_the_dsse_specification_s_test_vector() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


@pytest.mark.parametrize("which", ["ed_key", "p256_key"])
def test_an_envelope_verifies_with_its_key_and_not_with_another(
    which: str, request: pytest.FixtureRequest, tmp_path: Path, ed_key: tuple[Path, Path]
) -> None:
    private, public = request.getfixturevalue(which)
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "x", "digest": {"sha256": "a" * 64}}],
                 "predicateType": "urn:test", "predicate": {}}  # fmt: skip
    envelope = sign_envelope(json.dumps(statement).encode(), load_signing_key(private))
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    path = tmp_path / "x.dsse.json"
    path.write_text(json.dumps(envelope))
    verified = verify_attestation(path, load_verification_key(public), image="sha256:" + "a" * 64)
    assert verified.subjects == (("x", "sha256:" + "a" * 64),)
    other = write_key(tmp_path, ec.generate_private_key(ec.SECP256R1()), "other")[1]
    with pytest.raises(UnverifiedError, match="no signature verifies with") as raised:
        verify_attestation(path, load_verification_key(other))
    assert raised.value.exit_code == ExitCode.UNVERIFIED


def test_unsigned_tampered_and_another_image_s_statements_are_exit_11(tmp_path: Path, ed_key: tuple[Path, Path]) -> None:
    private, public = ed_key
    key = load_verification_key(public)
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "x", "digest": {"sha256": "a" * 64}}],
                 "predicateType": "urn:test", "predicate": {}}  # fmt: skip
    bare = tmp_path / "bare.intoto.json"
    bare.write_text(json.dumps(statement))
    with pytest.raises(UnverifiedError, match="an unsigned in-toto statement"):
        verify_attestation(bare, key)
    envelope = sign_envelope(json.dumps(statement).encode(), load_signing_key(private))
    tampered = dict(envelope, payload=base64.b64encode(json.dumps({**statement, "predicate": {"x": 1}}).encode()).decode())
    (tmp_path / "t.dsse.json").write_text(json.dumps(tampered))
    with pytest.raises(UnverifiedError, match="changed after it was signed"):
        verify_attestation(tmp_path / "t.dsse.json", key)
    (tmp_path / "none.dsse.json").write_text(json.dumps(dict(envelope, signatures=[])))
    with pytest.raises(UnverifiedError, match="carries no signature"):
        verify_attestation(tmp_path / "none.dsse.json", key)
    (tmp_path / "ok.dsse.json").write_text(json.dumps(envelope))
    with pytest.raises(UnverifiedError, match="about another image"):
        verify_attestation(tmp_path / "ok.dsse.json", key, image="sha256:" + "b" * 64)


def test_bad_keys_are_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encrypted = write_key(tmp_path, ed25519.Ed25519PrivateKey.generate(), "enc", passphrase=PASSPHRASE)[0]
    rsa_key = write_key(tmp_path, rsa.generate_private_key(public_exponent=65537, key_size=2048), "rsa")[0]
    p384 = write_key(tmp_path, ec.generate_private_key(ec.SECP384R1()), "p384")[0]
    unreadable = tmp_path / "unreadable.pem"
    unreadable.write_bytes(encrypted.read_bytes())
    unreadable.chmod(0)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    cases = [
        (lambda: load_signing_key(tmp_path / "missing.pem"), "no such file"),
        (lambda: load_signing_key(tmp_path), "a directory, not a key file"),
        (lambda: load_signing_key(rsa_key), "a RSA key; give an ed25519 or ECDSA P-256 key"),
        (lambda: load_signing_key(p384), "curve secp384r1"),
        (lambda: load_signing_key(garbage), "not a PEM private key"),
        (lambda: load_signing_key(encrypted), "the key is encrypted; name the environment variable"),
        (lambda: load_signing_key(encrypted, passphrase_env="NO_SUCH_VARIABLE_HERE"), "is not set or empty"),
    ]
    if os.geteuid() != 0:  # root reads a mode-0 file
        cases.append((lambda: load_signing_key(unreadable), "cannot read it"))
    monkeypatch.setenv("WRONG_PASSPHRASE", "not-it")
    cases.append((lambda: load_signing_key(encrypted, passphrase_env="WRONG_PASSPHRASE"), "does not decrypt the key"))
    for load, expected in cases:
        with pytest.raises(ConfigError) as raised:
            load()
        message = str(raised.value)
        assert raised.value.exit_code == 2
        assert len(message.splitlines()) == 1
        assert expected in message, message
    monkeypatch.setenv("KEY_PASSPHRASE", PASSPHRASE)
    assert load_signing_key(encrypted, passphrase_env="KEY_PASSPHRASE").keyid


def test_a_signed_export_verifies_against_the_archive_and_names_the_image(
    tmp_path: Path, p256_key: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = p256_key
    engine = FakeEngine()
    engine.add_saved_image("imagebuild/kimi-k3:gfx942")
    result = export_image(
        ExportOptions(image="imagebuild/kimi-k3:gfx942", output=tmp_path / "out", compression=Compression.GZIP,
                      signing_key=load_signing_key(private)),
        engine, report=lambda _: None,
    )  # fmt: skip
    archive = result.manifest_path.parent / result.manifest.archive
    envelope = archive.with_name(f"{archive.name}.export.dsse.jsonl")
    assert set(result.manifest.attestations) == {f"{archive.name}.export.intoto.jsonl", envelope.name}
    identity = result.manifest.image_id
    assert main(["attestations", "verify", str(envelope), "--key", str(public), "--image", identity]) == 0
    assert capsys.readouterr().out == identity + "\n"
    assert main(["attestations", "verify", str(envelope), "--key", str(public), "--image", "sha256:" + "0" * 64, "--json"]) == 11
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 11
    assert "about another image" in document["error"]
    assert main(["attestations", "verify", str(envelope), "--key", str(private)]) == 2  # a private key
    assert "not a PEM public key (that is a private key" in capsys.readouterr().err


def test_a_signed_build_writes_envelopes_and_the_passphrase_reaches_no_output_or_file(
    replay: Replay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = write_key(tmp_path, ed25519.Ed25519PrivateKey.generate(), "signer", passphrase=PASSPHRASE)
    monkeypatch.setenv("IMAGEBUILD_KEY_PASSPHRASE", PASSPHRASE)
    key = load_signing_key(private, passphrase_env="IMAGEBUILD_KEY_PASSPHRASE")
    _, record = replay("success", signing_key=key)
    sbom_envelope, provenance_envelope = record.signed
    assert json.loads((tmp_path / "record.json").read_text())["attestations"][2:] == [str(p) for p in record.signed]
    for envelope in record.signed:
        verified = verify_attestation(envelope, load_verification_key(public), image=record.image_id)
        assert verified.image == record.image_id
    assert verify_attestation(sbom_envelope, load_verification_key(public)).predicate_type == "https://cyclonedx.org/bom"
    assert verify_attestation(provenance_envelope, load_verification_key(public)).predicate_type == "https://slsa.dev/provenance/v1"
    # The CLI refuses the encrypted key without its variable before it looks for a checkout or engine.
    monkeypatch.delenv("IMAGEBUILD_KEY_PASSPHRASE")
    assert main(["-C", str(Path(__file__).resolve().parents[2]), "build", "--sign-key", str(private)]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1
    assert "the key is encrypted" in err
    assert PASSPHRASE not in out + err
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != private.name:
            assert PASSPHRASE.encode() not in path.read_bytes(), path


def test_a_signed_publish_names_the_pushed_digest_beside_the_record(tmp_path: Path, ed_key: tuple[Path, Path]) -> None:
    from imagebuild.distribute.publish import PublishOptions, publish_image

    private, public = ed_key
    engine = FakeEngine()
    image_id = engine.add_saved_image("imagebuild/kimi-k3:gfx942", labels={"io.imagebuild.arch": "gfx942"})
    record = tmp_path / "gfx942.build.json"
    record.write_text(json.dumps({"image_id": image_id, "attestations": ["build/x.sbom.cdx.json"]}))
    options = PublishOptions(image="imagebuild/kimi-k3:gfx942", repository="127.0.0.1:5000/kimi-k3",
                             record_path=record, signing_key=load_signing_key(private), attach=False)  # fmt: skip
    result = publish_image(options, engine, report=lambda _: None)
    statement_path, envelope = result.attestations
    assert statement_path == tmp_path / f"gfx942-{image_id[7:19]}.publish.intoto.json"
    statement = json.loads(statement_path.read_text())
    assert statement["subject"][0]["digest"] == {"sha256": result.digest.removeprefix("sha256:")}
    assert statement["predicate"]["image"] == {"identity": image_id, "manifestDigest": result.digest}
    key = load_verification_key(public)
    assert verify_attestation(envelope, key, image=result.digest).image == image_id
    assert verify_attestation(envelope, key, image=image_id).image == image_id
    assert json.loads(record.read_text())["attestations"] == ["build/x.sbom.cdx.json", str(statement_path), str(envelope)]
    without_record = PublishOptions(image="imagebuild/kimi-k3:gfx942", repository="127.0.0.1:5000/kimi-k3",
                                    signing_key=load_signing_key(private))  # fmt: skip
    pushed_before = dict(engine.pushed)
    with pytest.raises(ConfigError, match="give --record FILE"):
        publish_image(without_record, engine, report=lambda _: None)
    assert engine.pushed == pushed_before  # refused before anything was pushed
