"""Write the SBOM and the provenance of a build next to its build record.

The pure documents are made by :mod:`imagebuild.build.sbom` and :mod:`imagebuild.build.provenance`; this
module gathers what they need: the sha256 of the input files, the pip inventory of the built
image (read in a throw-away container) and the engine's version.

Two labels name them on the image. A label must be known before the build, so it cannot carry
the image ID or a hash of the SBOM; it carries the SBOM's file name and the digest of the
build inputs (the sha256 of the deterministic build context, which holds the rendered Dockerfile
with every pin, the constraint file and everything COPYed). The SBOM and the provenance record
the same inputs digest, so an image is matched to its documents by that label, and the
provenance's subject is the image ID itself.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild import __version__
from imagebuild.engine.interface import Engine
from imagebuild.errors import AttestationError
from imagebuild.inputs.layout import sbom_file_name
from imagebuild.inputs.python_lock import read_python_lock
from imagebuild.project import Inputs, Project
from imagebuild.render.context import inputs_digest
from imagebuild.util.files import write_atomically

if TYPE_CHECKING:
    from imagebuild.build.provenance import FileDigest
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


def attestations_describe(paths: AttestationPaths, image_id: str, context: bytes) -> bool:
    """Whether both documents exist and name this image and this inputs digest (a cached rebuild)."""
    marks = (image_id.removeprefix("sha256:"), inputs_digest(context).removeprefix("sha256:"))
    try:
        texts = [paths.sbom.read_text(encoding="utf-8"), paths.provenance.read_text(encoding="utf-8")]
    except OSError:
        return False
    return all(mark in text for text in texts for mark in marks)


def input_files(
    project: Project, inputs: Inputs, dockerfile_text: str, context: bytes
) -> tuple[FileDigest, ...]:
    """Every file the build was made from, by sha256, named relative to the checkout."""

    def name(path: Path) -> str:
        return path.relative_to(project.root).as_posix() if path.is_relative_to(project.root) else str(path)

    paths = [project.pins_path]
    if project.python_lock_path.is_file():
        paths.append(project.python_lock_path)
    paths += sorted(project.stages_dir.glob("*.toml"))
    paths.append(project.arch_dir / f"{inputs.arch.name}.toml")
    paths += sorted(project.constraints_dir.glob("*.txt"))
    from imagebuild.build.provenance import FileDigest

    files = [FileDigest(name=name(p), sha256=hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths]
    files.append(FileDigest(name="Dockerfile", sha256=hashlib.sha256(dockerfile_text.encode()).hexdigest()))
    files.append(FileDigest(name="build-context.tar", sha256=hashlib.sha256(context).hexdigest()))
    return tuple(files)


def read_inventory(engine: Engine, image: str) -> tuple[InstalledDistribution, ...]:
    """The distributions installed in the image, read by its own python."""
    code, output = engine.run(image, ["python3", "-I", "-c", INVENTORY_SCRIPT])
    line = next((ln for ln in output.splitlines() if ln.startswith(_MARK)), None)
    if code != 0 or line is None:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        msg = f"could not read the pip inventory of {image} for the SBOM (exit {code}: {tail[0]})"
        raise AttestationError(msg)
    from imagebuild.build.sbom import InstalledDistribution

    pairs = json.loads(line.removeprefix(_MARK))
    return tuple(InstalledDistribution(name=str(n), version=str(v)) for n, v in pairs)


@dataclass(frozen=True, kw_only=True)
class BuildFacts:
    """What the build itself knows: the image, its inputs and when it ran."""

    image_id: str
    tag: str
    started: datetime
    finished: datetime
    context: bytes
    dockerfile_text: str
    build_args: Mapping[str, str]
    no_cache: bool
    network: str | None
    pushed: str | None = None


def write_attestations(
    project: Project, inputs: Inputs, facts: BuildFacts, engine: Engine, paths: AttestationPaths
) -> None:
    """Make, validate and write both documents; nothing is written unless both could be made."""
    from imagebuild.build.provenance import ProvenanceInputs, provenance_text
    from imagebuild.build.sbom import SbomInputs, make_sbom

    lock = read_python_lock(project.python_lock_path)
    sbom = make_sbom(
        SbomInputs(
            image_id=facts.image_id,
            tag=facts.tag,
            arch=inputs.arch.name,
            finished=facts.finished,
            inputs_digest=inputs_digest(facts.context),
            tool_version=__version__,
            pins=inputs.pins,
            lock=lock,
            inventory=read_inventory(engine, facts.tag),  # the engine's name for it on every store
        )
    )
    provenance = provenance_text(
        ProvenanceInputs(
            image_id=facts.image_id,
            tag=facts.tag,
            arch=inputs.arch.name,
            pushed=facts.pushed,
            started=facts.started,
            finished=facts.finished,
            tool_version=__version__,
            engine_version=engine.version(),
            pins=inputs.pins,
            lock=lock,
            files=input_files(project, inputs, facts.dockerfile_text, facts.context),
            build_args=facts.build_args,
            no_cache=facts.no_cache,
            network=facts.network,
        )
    )
    paths.sbom.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(paths.sbom, sbom)
    write_atomically(paths.provenance, provenance)
