"""in-toto Statement v1: what an attestation is about (its subjects), and how it is written beside an output.

Every attestation imagebuild writes names the image by its identity (the normalised config's
digest, the same on every engine: README "One identity on every engine") and, where known, the
digest of its canonical manifest, each as a subject with the OCI media type saying which digest it
is. ``export`` and ``publish`` write a second statement each, a *distribution* statement: its
subject is what they produced (the archive by its sha256, the pushed manifest by its digest) and its
predicate names the image identity, so a node holding only the archive or the pushed digest can
check it against the build's attestations.

Files are written whole (temporary name, fsync, rename) with mode 0644, so the jobs of other users on
shared storage can read them; with a signing key, the statement's DSSE envelope is written beside
it (``NAME.dsse.json``), made in memory first, so a key that cannot sign leaves nothing half-written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild import __version__
from imagebuild.attest.dsse import sign_envelope
from imagebuild.attest.keys import SigningKey
from imagebuild.util.files import atomic_file

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
DISTRIBUTION_PREDICATE = "urn:imagebuild:predicate:distribution:v1"
CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"  # in-toto's predicate type for a CycloneDX SBOM
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
FILE_MODE = 0o644
# What an envelope's name replaces: x.intoto.json -> x.dsse.json; beside an archive, where `*.json` must
# find only the manifest, x.intoto.jsonl (one statement a line, in-toto's bundle form) -> x.dsse.jsonl.
ENVELOPE_SUFFIXES = {".intoto.jsonl": ".dsse.jsonl", ".intoto.json": ".dsse.json", ".cdx.json": ".dsse.json", ".json": ".dsse.json"}


def hex_of(digest: str) -> str:
    return digest.removeprefix("sha256:")


@dataclass(frozen=True, kw_only=True)
class ImageIdentity:
    """An image as attestations name it: its identity, and its canonical manifest's digest when known."""

    identity: str  # sha256:... of the normalised config
    manifest_digest: str = ""  # sha256:... of the manifest engines and registries name it by

    def subjects(self, name: str) -> list[dict[str, Any]]:
        found = [{"name": name, "digest": {"sha256": hex_of(self.identity)}, "mediaType": CONFIG_MEDIA_TYPE}]
        if self.manifest_digest and self.manifest_digest != self.identity:
            found.append(
                {"name": name, "digest": {"sha256": hex_of(self.manifest_digest)}, "mediaType": MANIFEST_MEDIA_TYPE}
            )
        return found

    def to_json(self) -> dict[str, str]:
        described = {"identity": self.identity}
        if self.manifest_digest:
            described["manifestDigest"] = self.manifest_digest
        return described

    @property
    def short(self) -> str:
        """12 hex digits of the identity: what file names carry."""
        return hex_of(self.identity)[:12]


def distribution_statement(
    *, subject: Mapping[str, Any], image: ImageIdentity, action: str, details: Mapping[str, Any]
) -> dict[str, Any]:
    """The statement of an export or a publish: ``subject`` is what it produced, the predicate names the image."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [dict(subject)],
        "predicateType": DISTRIBUTION_PREDICATE,
        "predicate": {"action": action, "image": image.to_json(), "imagebuild": __version__, **details},
    }


def envelope_path(path: Path) -> Path:
    """``x.provenance.intoto.json`` -> ``x.provenance.dsse.json``; ``x.sbom.cdx.json`` -> ``x.sbom.dsse.json``;
    ``x.export.intoto.jsonl`` -> ``x.export.dsse.jsonl``."""
    name = path.name
    for suffix, replacement in ENVELOPE_SUFFIXES.items():
        if name.endswith(suffix):
            return path.with_name(name.removesuffix(suffix) + replacement)
    return path.with_name(name + ".dsse.json")


def statement_text(statement: Mapping[str, Any], *, one_line: bool = False) -> str:
    """The statement as a file holds it: indented, or one line for a ``.jsonl`` file."""
    if one_line:
        return json.dumps(statement, sort_keys=True, separators=(",", ":")) + "\n"
    return json.dumps(statement, indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True, kw_only=True)
class Written:
    """The files one attestation was written to: the document, and its signed envelope when signed."""

    document: Path
    envelope: Path | None = None

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.document,) if self.envelope is None else (self.document, self.envelope)


def write_file(path: Path, text: str) -> None:
    with atomic_file(path, mode=FILE_MODE) as file:
        file.write(text.encode("utf-8"))


def write_attestation(
    path: Path, document: str, *, statement: Mapping[str, Any] | None = None, key: SigningKey | None = None
) -> Written:
    """Write ``document`` to ``path``; with ``key``, also ``statement`` (the document itself when it is
    one) signed in a DSSE envelope beside it. Everything is made before the first file is written."""
    envelope = None
    if key is not None:
        payload = statement_text(statement).encode("utf-8") if statement is not None else document.encode("utf-8")
        signed = sign_envelope(payload, key)
        envelope = json.dumps(signed, separators=(",", ":")) if path.suffix == ".jsonl" else json.dumps(signed, indent=2)
        envelope += "\n"
    write_file(path, document)
    if envelope is None:
        return Written(document=path)
    beside = envelope_path(path)
    write_file(beside, envelope)
    return Written(document=path, envelope=beside)
