"""Write the SBOM and the provenance of a build next to its build record.

The pure documents are made by :mod:`imagebuild.build.sbom` and :mod:`imagebuild.build.provenance`
from the build's record (:mod:`imagebuild.build.record`, which holds the input files' digests taken
before the build); this module asks the engine for the two facts the record cannot hold: the pip
inventory of the built image (read in a throw-away container) and the engine's version.

Two labels name them on the image. A label must be known before the build, so it cannot carry
the image ID or a hash of the SBOM; it carries the SBOM's file name and the digest of the
build inputs (the sha256 of the deterministic build context, which holds the rendered Dockerfile
with every pin, the constraint file and everything COPYed). The SBOM and the provenance record
the same inputs digest, so an image is matched to its documents by that label, and the
provenance's subject is the image ID itself.
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
from imagebuild.inputs.layout import sbom_file_name
from imagebuild.util.files import write_atomically

if TYPE_CHECKING:
    from imagebuild.build.sbom import InstalledDistribution

# CycloneDX's schema validator takes about a second to import (jsonschema's format checkers
# compile their grammars): these are imported when needed, or while the engine builds.
HEAVY_MODULES = ("imagebuild.build.sbom", "imagebuild.build.provenance")

_MARK = "imagebuild-inventory:"
# Standard library only: runs on whatever python the image has, without pip's warnings in the output.
INVENTORY_SCRIPT = (
    "import json, importlib.metadata as m; "
    "found = sorted({(d.metadata['Name'], d.version) for d in m.distributions() if d.metadata['Name']}); "
    f"print({_MARK!r} + json.dumps(found))"
)


@dataclass(frozen=True, kw_only=True)
class AttestationPaths:
    sbom: Path
    provenance: Path

    @classmethod
    def beside(cls, record_path: Path, arch: str) -> AttestationPaths:
        return cls(
            sbom=record_path.with_name(sbom_file_name(arch)),
            provenance=record_path.with_name(f"{arch}.provenance.intoto.json"),
        )


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
    """Whether both documents exist and name this image and this inputs digest (a cached rebuild)."""
    marks = (record.image_id.removeprefix("sha256:"), record.inputs_digest.removeprefix("sha256:"))
    try:
        texts = [record.sbom.read_text(encoding="utf-8"), record.provenance.read_text(encoding="utf-8")]
    except OSError:
        return False
    return all(mark in text for text in texts for mark in marks)


def read_inventory(engine: Engine, image: str) -> tuple[InstalledDistribution, ...]:
    """The distributions installed in the image, read by its own python, in a container with no
    network (as verify's): the inventory needs none, and the image's code gets none."""
    try:
        code, output = engine.run(image, ["python3", "-I", "-c", INVENTORY_SCRIPT], network_mode="none")
    except EngineError as e:
        raise AttestationError(str(e)) from e
    line = next((ln for ln in output.splitlines() if ln.startswith(_MARK)), None)
    if code != 0 or line is None:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        msg = f"could not read the pip inventory of {image} for the SBOM (exit {code}: {tail[0]})"
        raise AttestationError(msg)
    from imagebuild.build.sbom import InstalledDistribution

    pairs = json.loads(line.removeprefix(_MARK))
    return tuple(InstalledDistribution(name=str(n), version=str(v)) for n, v in pairs)


def write_attestations(record: BuildRecord, engine: Engine) -> None:
    """Make, validate and write both documents where the record names them; nothing unless both could be made."""
    from imagebuild.build.provenance import provenance_text
    from imagebuild.build.sbom import make_sbom

    try:
        sbom = make_sbom(record, read_inventory(engine, record.tag))  # the engine's name for it on every store
    except AttestationError as e:
        msg = f"the SBOM could not be made: {e}"
        raise AttestationError(msg) from e
    try:
        provenance = provenance_text(record, engine_version=engine.version())
    except (AttestationError, EngineError) as e:
        msg = f"the provenance could not be made: {e}"
        raise AttestationError(msg) from e
    try:
        record.sbom.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(record.sbom, sbom)
        write_atomically(record.provenance, provenance)
    except OSError as e:
        msg = f"the SBOM and provenance could not be written to {record.sbom.parent}: {e.strerror or e}"
        raise AttestationError(msg) from e
