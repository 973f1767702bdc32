"""`imagebuild attestations REF`: the documents attached to an image in a registry, listed and downloaded.

REF is ``HOST[:PORT]/REPO@sha256:...`` or ``HOST[:PORT]/REPO:TAG`` (resolved to the manifest the tag
names now). The referrers are asked of the referrers API first; a registry without it (404, 400 or
another answer than an OCI index) is read through the referrers tag schema, the index tagged
``sha256-<hex>``. Both lists are only hints: a download fetches each artifact manifest by digest and
takes it only when its ``subject`` is the image, then its one layer by digest, so what lands on
disk is what the artifact names, whoever wrote the list. Files are named by the layer's title when it
is a bare file name (else by their digest), written whole (temporary name, rename), mode 0644.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.attest.keys import VerificationKey
from imagebuild.attest.verify import VerifiedStatement, verify_attestation
from imagebuild.distribute.archive_files import made_directory
from imagebuild.distribute.publish import REPOSITORY_RE, check_registry_host
from imagebuild.distribute.referrers import (
    DSSE_TYPE,
    Descriptor,
    ReferrersError,
    artifact_subject,
    config_digest_of,
    fallback_tag,
    referrers_in,
    sha256_of,
)
from imagebuild.distribute.registry_http import RegistryRepository, opened_repository
from imagebuild.errors import ConfigError, RegistryError, UnverifiedError
from imagebuild.inputs.values import DIGEST_RE, shown
from imagebuild.util.files import atomic_file

TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
FILE_MODE = 0o644


@dataclass(frozen=True, kw_only=True)
class ImageReference:
    repository: str
    reference: str  # a digest or a tag

    @property
    def text(self) -> str:
        return f"{self.repository}{'@' if self.reference.startswith('sha256:') else ':'}{self.reference}"


@dataclass(frozen=True, kw_only=True)
class Referrers:
    repository: str
    digest: str  # the image manifest's
    config_digest: str  # the image's identity (its config), "" when the manifest names none
    listed_by: str  # "the referrers API", "tag sha256-<hex>", or "nothing" (no referrers at all)
    entries: tuple[Descriptor, ...]


@dataclass(frozen=True, kw_only=True)
class Downloaded:
    path: Path
    sha256: str
    size: int
    artifact_type: str


def parse_reference(text: str) -> ImageReference:
    """REF as a repository and a digest or tag; bad input is one line naming REF."""
    check_registry_host(text, "REF")
    repository, at, digest = text.partition("@")
    if at:
        if not DIGEST_RE.fullmatch(digest):
            msg = f"REF {shown(text)}: the digest after '@' must be sha256: and 64 hex digits"
            raise ConfigError(msg)
        reference = digest
    else:
        repository, colon, tag = text.rpartition(":")
        if not colon or "/" in tag or not TAG_RE.fullmatch(tag):
            msg = f"REF {shown(text)}: give HOST[:PORT]/REPO@sha256:... (what publish prints) or HOST[:PORT]/REPO:TAG"
            raise ConfigError(msg)
        reference = tag
    if not REPOSITORY_RE.match(repository):
        msg = f"REF {shown(text)}: {shown(repository)} is not a registry repository (HOST[:PORT]/REPO, lowercase)"
        raise ConfigError(msg)
    return ImageReference(repository=repository, reference=reference)


def _list(registry: RegistryRepository, digest: str) -> tuple[str, list[Descriptor]]:
    answer = registry.referrers(digest)
    where = f"{registry.where}/referrers/{digest[:19]}"
    listed_by = "the referrers API"
    if answer is None:
        listed_by = f"tag {fallback_tag(digest)}"
        where = f"{registry.where}:{fallback_tag(digest)}"
        found = registry.manifest(fallback_tag(digest))
        if found is None:
            return "nothing", []
        answer = found[0]
    try:
        return listed_by, referrers_in(answer, where)
    except ReferrersError as e:
        msg = f"{where}: not a referrers list ({e})"
        raise RegistryError(msg) from e


def list_referrers(reference: ImageReference) -> Referrers:
    with opened_repository(reference.repository, push=False) as registry:
        found = registry.manifest(reference.reference)
        if found is None:
            msg = f"{reference.text}: the registry has no such image; check REF (publish prints it)"
            raise RegistryError(msg)
        manifest, _ = found
        digest = sha256_of(manifest)  # a tag's manifest as it is now; a digest's, checked against it
        listed_by, entries = _list(registry, digest)
    return Referrers(
        repository=reference.repository,
        digest=digest,
        config_digest=config_digest_of(manifest),
        listed_by=listed_by,
        entries=tuple(entries),
    )


def _file_name(layer: Descriptor) -> str:
    name = layer.title
    if (
        name
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and name.isprintable()
        and not name.startswith(".")
    ):
        return name
    return layer.digest.removeprefix("sha256:") + ".json"


def downloaded_name(title: str, entry: Descriptor) -> str:
    """The file name of an artifact whose title another one listed beside it has too."""
    return f"{entry.digest.removeprefix('sha256:')[:12]}-{title}"


def download_referrers(referrers: Referrers, directory: Path) -> tuple[Downloaded, ...]:
    """Every listed artifact whose subject is the image: its document into ``directory`` (made once the
    documents are fetched; ``check_output_dir`` proved it can be, before the registry was asked)."""
    fetched: list[tuple[str, bytes, Descriptor]] = []
    with opened_repository(referrers.repository, push=False) as registry:
        for entry in referrers.entries:
            where = f"{referrers.repository}@{entry.digest[:19]}"
            found = registry.manifest(entry.digest)
            if found is None:
                continue  # listed, but deleted since: the list is a hint
            try:
                subject, layer = artifact_subject(found[0], where)
            except ReferrersError as e:
                msg = f"{where}: listed as an attestation of {referrers.digest[:19]}, but {e}"
                raise RegistryError(msg) from e
            if subject.digest != referrers.digest:
                msg = f"{where}: listed as an attestation of {referrers.digest[:19]}, but its subject is {subject.digest[:19]}: refused"
                raise RegistryError(msg)
            fetched.append((_file_name(layer), registry.blob(layer.digest), entry))
    names = [name for name, _, _ in fetched]
    # Titles several artifacts share (a rebuild's provenance beside the first one's): each by its digest.
    fetched = [(downloaded_name(n, e) if names.count(n) > 1 else n, b, e) for n, b, e in fetched]
    written = []
    with made_directory(directory, "--download"):
        try:
            for name, blob, entry in fetched:
                with atomic_file(directory / name, mode=FILE_MODE) as file:
                    file.write(blob)
                written.append(
                    Downloaded(
                        path=directory / name,
                        sha256=sha256_of(blob),
                        size=len(blob),
                        artifact_type=entry.artifact_type,
                    )
                )
        except OSError as e:
            msg = f"--download {directory}: cannot write there ({e.strerror}); choose a directory you can write"
            raise ConfigError(msg) from e
    return tuple(written)


def verify_downloaded(
    downloaded: tuple[Downloaded, ...], referrers: Referrers, key: VerificationKey, *, report: Callable[[str], None]
) -> tuple[VerifiedStatement, ...]:
    """The downloaded DSSE envelopes that verify with ``key`` and name this image (its manifest digest or
    its identity); at least one must. As cosign's verify-attestation: envelopes of other signers (or of
    an earlier key) may be attached beside them, each reported, none taken. Unsigned documents are not
    judged."""
    envelopes = [d for d in downloaded if d.artifact_type == DSSE_TYPE]
    where = f"{referrers.repository}@{referrers.digest[:19]}"
    if not envelopes:
        msg = f"{where}: none of its {len(downloaded)} attached documents is signed; build (or publish) with --sign-key and publish again"
        raise UnverifiedError(msg)
    image = {referrers.digest, referrers.config_digest} - {""}
    verified, refused = [], []
    for d in envelopes:
        try:
            verified.append(verify_attestation(d.path, key, any_of=image))
        # An attached document that is not JSON is one that does not verify, not the user's bad input;
        # each is named as attached, not by the (perhaps temporary) file it was fetched to.
        except (UnverifiedError, ConfigError) as e:
            refused.append(str(e).replace(str(d.path), f"{d.path.name} attached to {where}", 1))
    for reason in refused if verified else refused[:-1]:
        report(f"not verified: {reason}")
    if not verified:
        more = f" (and {len(refused) - 1} more envelopes, none verified)" if len(refused) > 1 else ""
        raise UnverifiedError(refused[-1] + more)
    return tuple(verified)
