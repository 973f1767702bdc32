"""The keys attestations are signed and checked with: PEM files the user holds, ed25519 or ECDSA P-256.

`cryptography` reads them (the PyCA library cosign's and sigstore-python's keys also go through), so
imagebuild parses no key format itself. A key that is missing, unreadable, of another type, or
encrypted without its passphrase is one line naming the flag and the file, exit 2, before anything
is built or written. The passphrase of an encrypted key comes from an environment variable the user
names (never a flag value: a command line is visible to every user of the machine in ``ps``), and no
message ever holds it or the key: only the flag, the file and the variable's name.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from imagebuild.errors import ConfigError
from imagebuild.inputs.values import shown

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
KEY_TYPES = "an ed25519 or ECDSA P-256 key in PEM"


def key_id(public: PublicKey) -> str:
    """The sha256 of the key's SubjectPublicKeyInfo (DER): the same for the private key and its public half."""
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True, kw_only=True)
class VerificationKey:
    """A public key, and the id envelopes signed by its private half carry."""

    key: PublicKey = field(repr=False)
    keyid: str
    source: Path

    def verifies(self, signature: bytes, data: bytes) -> bool:
        try:
            if isinstance(self.key, ed25519.Ed25519PublicKey):
                self.key.verify(signature, data)
            else:
                self.key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, kw_only=True)
class SigningKey:
    """A private key read from the user's file; never shown (``repr`` leaves it out)."""

    key: PrivateKey = field(repr=False)
    keyid: str
    source: Path

    def sign(self, data: bytes) -> bytes:
        """ed25519's 64 bytes, or ECDSA P-256 over SHA-256 as DER (what cosign and DSSE's reference use)."""
        if isinstance(self.key, ed25519.Ed25519PrivateKey):
            return self.key.sign(data)
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))

    def public(self) -> VerificationKey:
        public = self.key.public_key()
        return VerificationKey(key=public, keyid=self.keyid, source=self.source)


def _read(path: Path, flag: str) -> bytes:
    where = f"{flag} {shown(str(path))}"
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        msg = f"{where}: no such file; give {KEY_TYPES}"
        raise ConfigError(msg) from e
    except IsADirectoryError as e:
        msg = f"{where}: a directory, not a key file; give {KEY_TYPES}"
        raise ConfigError(msg) from e
    except OSError as e:
        msg = f"{where}: cannot read it ({e.strerror or type(e).__name__}); fix its permissions or give another key"
        raise ConfigError(msg) from e


def _passphrase(env_name: str | None) -> bytes | None:
    if env_name is None:
        return None
    value = os.environ.get(env_name)
    if not value:
        msg = (
            f"--sign-key-passphrase-env {shown(env_name)}: that environment variable is not set or empty; "
            "export it with the key's passphrase"
        )
        raise ConfigError(msg)
    return value.encode("utf-8")


def _checked_type(key: object, where: str) -> None:
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1):
            return
        msg = f"{where}: an ECDSA key on curve {key.curve.name}; give {KEY_TYPES} (curve secp256r1)"
        raise ConfigError(msg)
    kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "") or "unknown"
    msg = f"{where}: a {kind} key; give {KEY_TYPES}"
    raise ConfigError(msg)


def load_signing_key(path: Path, *, passphrase_env: str | None = None, flag: str = "--sign-key") -> SigningKey:
    """The private key at ``path``; ConfigError (exit 2) naming the flag and file for every kind of bad key."""
    where = f"{flag} {shown(str(path))}"
    data = _read(path, flag)
    password = _passphrase(passphrase_env)
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except TypeError as e:  # cryptography: encrypted without a password, or a password for a plain key
        if password is None:
            msg = f"{where}: the key is encrypted; name the environment variable holding its passphrase with --sign-key-passphrase-env NAME"
        else:
            msg = f"{where}: the key is not encrypted; leave out --sign-key-passphrase-env"
        raise ConfigError(msg) from e
    except UnsupportedAlgorithm as e:
        msg = f"{where}: a key type this machine's cryptography cannot read; give {KEY_TYPES}"
        raise ConfigError(msg) from e
    except ValueError as e:
        if password is not None and b"ENCRYPTED" in data:
            msg = f"{where}: the passphrase in ${passphrase_env} does not decrypt the key; export the right one"
        else:
            msg = f"{where}: not a PEM private key; give {KEY_TYPES} (e.g. openssl genpkey -algorithm ed25519)"
        raise ConfigError(msg) from e
    _checked_type(key, where)
    assert isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey)
    return SigningKey(key=key, keyid=key_id(key.public_key()), source=path)


def load_verification_key(path: Path, *, flag: str = "--key") -> VerificationKey:
    """The public key at ``path`` (a PEM ``PUBLIC KEY``, as ``openssl pkey -pubout`` and cosign write)."""
    where = f"{flag} {shown(str(path))}"
    data = _read(path, flag)
    try:
        key = serialization.load_pem_public_key(data)
    except UnsupportedAlgorithm as e:
        msg = f"{where}: a key type this machine's cryptography cannot read; give {KEY_TYPES}"
        raise ConfigError(msg) from e
    except ValueError as e:
        hint = " (that is a private key: give its public half, openssl pkey -pubout)" if b"PRIVATE KEY" in data else ""
        msg = f"{where}: not a PEM public key{hint}; give {KEY_TYPES}"
        raise ConfigError(msg) from e
    _checked_type(key, where)
    assert isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey)
    return VerificationKey(key=key, keyid=key_id(key), source=path)
