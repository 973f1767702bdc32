"""Write the SBOM and the provenance of a build next to its build record, signed when a key is given.

The pure documents are made by :mod:`imagebuild.build.sbom` and :mod:`imagebuild.build.provenance`
from the build's record (:mod:`imagebuild.build.record`, which holds the input files' digests taken
before the build); this module asks the engine for the two facts the record cannot hold: what the
built image's layers hold (its dpkg status, os-release and every site directory's distributions,
read by imagebuild.attest.image_contents; nothing runs in the image) and the engine's version.

Both documents are named by the image's identity (``gfx942-<id12>.sbom.cdx.json``), so a record names
exactly its own image's documents, even beside another build's record in the same directory. Two
labels name them on the image. A label must be known before the build, so it cannot carry the image
ID or a hash of the SBOM; it carries the SBOM's kind and arch and the digest of the build inputs (the
sha256 of the deterministic build context, which holds the rendered Dockerfile with every pin, the
constraint file and everything COPYed). The SBOM and the provenance record the same inputs digest,
so an image is matched to its documents by that label, and both name the image identity itself.

With a signing key, each document is also written as a DSSE envelope beside it (``.dsse.json``): the
provenance statement, and an in-toto statement whose predicate is the SBOM.
"""

from __future__ import annotations

import importlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.build.record import BuildRecord
from imagebuild.build.stream import RUNNING_MARK
from imagebuild.engine.interface import Engine
from imagebuild.errors import AttestationError, EngineError
from imagebuild.inputs.layout import PROVENANCE_SUFFIX, SBOM_SUFFIX, attestation_file_name

if TYPE_CHECKING:
    from imagebuild.attest.keys import SigningKey

# A fully cached build writes no document: what writes them (image contents, statements, DSSE
# with its cryptography) is imported when a document is written, not on a no-op build's path.

# CycloneDX's schema validator takes about a second to import (jsonschema's format checkers
# compile their grammars): these are imported when needed, or while the engine builds.
HEAVY_MODULES = ("imagebuild.build.sbom", "imagebuild.build.provenance")


@dataclass(frozen=True, kw_only=True)
class AttestationPaths:
    sbom: Path
    provenance: Path

    @classmethod
    def beside(cls, record_path: Path, arch: str, identity: str) -> AttestationPaths:
        """The documents of the image ``identity``, in the record's directory."""
        return cls(
            sbom=record_path.with_name(attestation_file_name(arch, identity, SBOM_SUFFIX)),
            provenance=record_path.with_name(attestation_file_name(arch, identity, PROVENANCE_SUFFIX)),
        )

    def envelopes(self) -> tuple[Path, ...]:
        """The DSSE envelopes a signed build writes beside them."""
        from imagebuild.attest.statement import envelope_path

        return (envelope_path(self.sbom), envelope_path(self.provenance))


def load_attestation_modules_in_background() -> None:
    """Import the SBOM and provenance makers in a daemon thread, so their import overlaps the build."""

    def load() -> None:
        for name in HEAVY_MODULES:
            importlib.import_module(name)

    threading.Thread(target=load, name="imagebuild-attestation-import", daemon=True).start()


class AttestationWarmup:
    """Reads the build's output; the first time a step really runs, loads the attestation makers.

    The classic builder starts a container only for a step its cache does not hold, so a new image,
    and new documents, will follow: their makers load while the engine works. A fully cached
    build never starts one, and never pays for the import.
    """

    def __init__(self) -> None:
        self.started = False

    def feed(self, text: str) -> None:
        if not self.started and RUNNING_MARK in text:
            self.started = True
            load_attestation_modules_in_background()


def attestations_describe(record: BuildRecord) -> bool:
    """Whether both documents (and their envelopes, when signed) exist and name this image and this
    inputs digest (a cached rebuild)."""
    marks = (record.image_id.removeprefix("sha256:"), record.inputs_digest.removeprefix("sha256:"))
    try:
        texts = [path.read_text(encoding="utf-8") for path in (record.sbom, record.provenance, *record.signed)]
    except OSError:
        return False
    if record.signed:  # an envelope holds its statement in base64
        texts = texts[:2]
    return all(mark in text for text in texts for mark in marks)


def base_diff_ids(engine: Engine, reference: str) -> tuple[str, ...]:
    """The base image's layers, as the engine holds it; () when it cannot say (nothing is then marked the base's)."""
    try:
        return engine.inspect_image(reference).layers
    except EngineError:
        return ()


def write_attestations(record: BuildRecord, engine: Engine, *, key: SigningKey | None = None) -> None:
    """Make, validate and write both documents where the record names them; nothing unless both could be made."""
    from imagebuild.attest.image_contents import read_image_contents
    from imagebuild.attest.statement import (
        CYCLONEDX_PREDICATE,
        STATEMENT_TYPE,
        ImageIdentity,
        statement_text,
        write_attestation,
    )
    from imagebuild.build.provenance import make_provenance
    from imagebuild.build.sbom import make_sbom

    try:
        # The engine's name for it on every store: its tag.
        contents = read_image_contents(engine, record.tag, base_diff_ids=record.base_diff_ids)
        sbom = make_sbom(record, contents)
    except (AttestationError, EngineError) as e:
        msg = f"the SBOM could not be made: {e}"
        raise AttestationError(msg) from e
    try:
        provenance = make_provenance(record, engine_version=engine.version())
    except (AttestationError, EngineError) as e:
        msg = f"the provenance could not be made: {e}"
        raise AttestationError(msg) from e
    identity = ImageIdentity(identity=record.image_id, manifest_digest=record.manifest_digest)
    sbom_statement = {
        "_type": STATEMENT_TYPE,
        "subject": identity.subjects(record.tag),
        "predicateType": CYCLONEDX_PREDICATE,
        "predicate": json.loads(sbom),
    }
    try:
        record.sbom.parent.mkdir(parents=True, exist_ok=True)
        write_attestation(record.sbom, sbom, statement=sbom_statement, key=key)
        write_attestation(record.provenance, statement_text(provenance), key=key)
    except OSError as e:
        msg = f"the SBOM and provenance could not be written to {record.sbom.parent}: {e.strerror or e}"
        raise AttestationError(msg) from e
