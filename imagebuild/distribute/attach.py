"""Attach an image's attestations to it in the registry: publish's last step.

Each document (the SBOM, the provenance, their DSSE envelopes when signed, the publish statement)
is pushed as an OCI artifact whose ``subject`` is the pushed image manifest (``referrers``). Where
the registry answers the manifest push with ``OCI-Subject``, it has the referrers API and lists them
itself; where it does not, the referrers tag schema is kept up to date here: the index tagged
``sha256-<hex>`` is read, every artifact not yet listed is added, and it is written back, then read
once more to check that no other client's write replaced it in between (the registry offers no
conditional write); a lost race is merged again, up to RACE_ATTEMPTS times.

Pushing the same documents again makes the same manifests (no time in them), which the index
already lists: a second publish adds nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.distribute.referrers import (
    EMPTY_BLOB,
    OCI_INDEX,
    OCI_MANIFEST,
    Artifact,
    Descriptor,
    ReferrersError,
    artifact_from_file,
    fallback_tag,
    merged_index,
    referrers_in,
)
from imagebuild.distribute.registry_http import RegistryRepository, opened_repository
from imagebuild.errors import RegistryError

RACE_ATTEMPTS = 3


@dataclass(frozen=True, kw_only=True)
class AttachedDocument:
    path: Path
    sha256: str  # sha256: of the file, the artifact's layer
    size: int
    artifact_type: str
    manifest_digest: str  # the artifact manifest, as the referrers list names it


@dataclass(frozen=True, kw_only=True)
class AttachResult:
    subject: str  # the image manifest's digest
    documents: tuple[AttachedDocument, ...]
    listed_by: str  # "the referrers API", or "tag sha256-<hex>"
    index_updated: bool  # the fallback index was written (False: it already listed every document)
    seconds: float
    bytes_sent: int


def attach_documents(
    repository: str, digest: str, paths: Sequence[Path], *, report: Callable[[str], None]
) -> AttachResult:
    """Push each file at ``paths`` as an artifact referring to ``repository@digest``."""
    started = time.monotonic()
    with opened_repository(repository, push=True) as registry:
        subject = registry.descriptor(digest)
        try:
            artifacts = [artifact_from_file(path, subject) for path in paths]
        except OSError as e:
            msg = f"{e.filename}: cannot read it to attach it ({e.strerror})"
            raise RegistryError(msg) from e
        sent, processed = _push_artifacts(registry, artifacts)
        if processed:
            listed_by, updated = "the referrers API", False
        else:
            listed_by = f"tag {fallback_tag(digest)}"
            updated, index_size = update_fallback_index(registry, digest, [a.descriptor for a in artifacts])
            sent += index_size
    documents = tuple(
        AttachedDocument(
            path=path,
            sha256=artifact.blob_digest,
            size=len(artifact.blob),
            artifact_type=artifact.descriptor.artifact_type,
            manifest_digest=artifact.descriptor.digest,
        )
        for path, artifact in zip(paths, artifacts, strict=True)
    )
    seconds = time.monotonic() - started
    report(
        f"attached {len(documents)} attestations ({sum(d.size for d in documents) / 1e3:.0f} kB) to "
        f"{repository}@{digest[:19]} in {seconds:.2f}s, listed by {listed_by}"
        + ("" if updated or processed else " (it listed them all already)")
    )
    return AttachResult(
        subject=digest,
        documents=documents,
        listed_by=listed_by,
        index_updated=updated,
        seconds=seconds,
        bytes_sent=sent,
    )


def _push_artifacts(registry: RegistryRepository, artifacts: Sequence[Artifact]) -> tuple[int, bool]:
    """(bytes sent, whether every manifest push was answered with OCI-Subject)."""
    sent = len(EMPTY_BLOB) if registry.put_blob(EMPTY_BLOB) else 0
    processed = bool(artifacts)
    for artifact in artifacts:
        if registry.put_blob(artifact.blob):
            sent += len(artifact.blob)
        pushed = registry.put_manifest(artifact.descriptor.digest, artifact.manifest, OCI_MANIFEST)
        sent += len(artifact.manifest)
        processed = processed and pushed.subject_processed
    return sent, processed


def update_fallback_index(
    registry: RegistryRepository, digest: str, added: Sequence[Descriptor]
) -> tuple[bool, int]:
    """Read-modify-write the referrers tag schema's index of ``digest``; (whether written, bytes sent)."""
    tag = fallback_tag(digest)
    where = f"{registry.where}:{tag}"
    wanted = {d.digest for d in added}
    sent, written = 0, False
    for _ in range(RACE_ATTEMPTS):
        found = registry.manifest(tag)
        try:
            index, changed = merged_index(found[0] if found else None, added, where)
        except ReferrersError as e:
            msg = f"{where}: the referrers tag holds something else ({e}); it is left as it is"
            raise RegistryError(msg) from e
        if not changed:
            return written, sent
        registry.put_manifest(tag, index, OCI_INDEX)
        sent, written = sent + len(index), True
        again = registry.manifest(tag)
        try:
            if again is not None and wanted <= {d.digest for d in referrers_in(again[0], where)}:
                return written, sent
        except ReferrersError:
            pass  # replaced by something else in between: merge again
    msg = f"{where}: another client kept rewriting the referrers index ({RACE_ATTEMPTS} tries); publish again"
    raise RegistryError(msg)
