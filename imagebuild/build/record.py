"""The one record of a build's facts: the build record JSON, the SBOM and the provenance are made from it.

Each fact (the image, its tags, the arch, the times, the pins, the python lock, the input files'
digests) is gathered once, while the build runs, and written down here; ``to_json`` is the build
record, :func:`imagebuild.build.sbom.make_sbom` and :func:`imagebuild.build.provenance.make_provenance`
are pure functions of it. So the three documents cannot disagree about what was built from what.

Light on purpose (no CycloneDX): the build imports it before the engine is asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from imagebuild.build.stream import StepTiming
from imagebuild.inputs.apt_lock import AptLock
from imagebuild.inputs.python_lock import PythonLock
from imagebuild.pins import PinSet


@dataclass(frozen=True, kw_only=True)
class FileDigest:
    """One file a build was made from, hashed before the build started."""

    name: str  # relative to the checkout, e.g. stages/04-mori.toml
    sha256: str


@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    """What one build made, from what, and how it went."""

    # The image.
    image_id: str  # sha256:..., after normalisation when it ran
    tag: str  # the record's tag: the first of ``tags``
    tags: list[str]  # every name tagged, the record's tag first
    arch: str
    labels: dict[str, str]
    # What it was made from, as read before the build started.
    pins: PinSet
    lock: PythonLock | None  # pylock.toml beside the pins file (None: not locked)
    inputs_digest: str  # sha256 of the deterministic build context, also an image label
    files: tuple[FileDigest, ...]  # pins, lock, stages, arch profile, constraints, Dockerfile, context
    build_args: Mapping[str, str]  # as sent: the checkout's labels and the user's tunables
    no_cache: bool
    network: str | None
    source_date_epoch: int  # of the last step: the normalised image's created time
    tool_version: str  # imagebuild's
    # How the build went.
    started: datetime  # UTC
    finished: datetime
    steps: list[StepTiming]
    total_seconds: float
    all_cached: bool
    normalization: dict[str, object] | None  # None with --no-normalize
    # Where its documents are.
    log: Path
    sbom: Path  # CycloneDX 1.6 JSON, next to the record
    provenance: Path  # in-toto Statement with a SLSA v1 provenance predicate
    pushed: str | None = None  # repository@sha256:... once published; a build pushes nothing
    manifest_digest: str = ""  # the canonical manifest's digest, where the build knows it (containerd store)
    base_diff_ids: tuple[str, ...] = ()  # the base image's layers: what the SBOM marks as the base's
    signed: tuple[Path, ...] = ()  # the DSSE envelopes of the SBOM and provenance, when signed
    # The launcher recipes the image carries, by name: `imagebuild slurm --from-record` runs one of them.
    recipes: tuple[str, ...] = ()
    apt_lock: AptLock | None = None  # apt.lock.toml beside the pins file, when step 4 installed from it
    # --compile-cache: the cache (a directory, or a URL without its credentials) and what ccache asked of it.
    compile_cache: Mapping[str, object] | None = None

    def to_json(self) -> dict[str, object]:
        """The build record file (build/ARCH.build.json), its keys in their long-standing order."""
        return {
            "image_id": self.image_id,
            "tag": self.tag,
            "tags": list(self.tags),
            "arch": self.arch,
            "labels": dict(self.labels),
            "pins": {pin.name: pin.require_identity() for pin in self.pins},
            "steps": [asdict(step) for step in self.steps],
            "total_seconds": self.total_seconds,
            "all_cached": self.all_cached,
            "log": str(self.log),
            "started_at": self.started.isoformat(),
            "finished_at": self.finished.isoformat(),
            "sbom": str(self.sbom),
            "provenance": str(self.provenance),
            "manifest_digest": self.manifest_digest or None,
            "attestations": [str(path) for path in (self.sbom, self.provenance, *self.signed)],
            "source_date_epoch": self.source_date_epoch,
            "normalization": self.normalization,
            "recipes": list(self.recipes),
        } | ({"compile_cache": dict(self.compile_cache)} if self.compile_cache is not None else {})
