"""`imagebuild publish`: push the image and hand back the reference nodes pull by digest.

A tag moves; a digest does not. So the only output is ``HOST[:PORT]/REPO@sha256:...``: pulling it on
any engine gives the image that was pushed, with the same image ID (the digest names the manifest, the
manifest names the config blob whose sha256 is the image ID). The reference is also recorded in the
build record when that record describes the pushed image. Beside the record, an in-toto statement
(``ARCH-<id12>.publish.intoto.json``; with a signing key also its DSSE envelope) names the pushed
digest as its subject and the image identity in its predicate, and the record lists it.

Then the attestations go with the image (``distribute.attach``): the SBOM, the provenance and their
envelopes that the build record of this image names, and the publish statement, each pushed as an
OCI artifact whose subject is the pushed manifest. A registry that refuses them fails the publish
with exit 8 and a message saying the image itself stays pushed and tagged.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from imagebuild.attest.keys import SigningKey
from imagebuild.attest.statement import (
    MANIFEST_MEDIA_TYPE,
    ImageIdentity,
    distribution_statement,
    statement_text,
    write_attestation,
)
from imagebuild.distribute.attach import AttachResult, attach_documents
from imagebuild.distribute.record_notes import ATTESTATIONS, PUBLISHED, build_documents, note_in_record
from imagebuild.distribute.referrers import config_digest_of
from imagebuild.distribute.registry_http import opened_repository
from imagebuild.engine.interface import Engine, ImageInfo
from imagebuild.engine.transfer_events import PushEvent
from imagebuild.errors import ConfigError, ImageBuildError, RegistryError
from imagebuild.inputs import references
from imagebuild.inputs.layout import attestation_file_name
from imagebuild.inputs.references import COMPONENT, TAG_RE
from imagebuild.inputs.values import shown
from imagebuild.log import logger
from imagebuild.secrets import redact
from imagebuild.util.files import writable_directory_problem

# A repository to push to starts with a host docker takes for a registry (a dot or a port, or
# localhost: without one, docker would push to Docker Hub), then docker's path components.
REGISTRY_HOST = r"(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|\[?[0-9A-Fa-f:.]+\]?)(?::[0-9]{1,5})?|[A-Za-z0-9-]+:[0-9]{1,5}"
REPOSITORY_RE = re.compile(rf"^(?:{REGISTRY_HOST})/{COMPONENT}(?:/{COMPONENT})*$")
PROGRESS_EVERY_S = 5.0
PUBLISH_SUFFIX = ".publish.intoto.json"  # the pushed digest's distribution statement, beside the build record
DONE_STATUSES = ("Pushed", "Layer already exists", "Mounted from")


@dataclass(frozen=True, kw_only=True)
class PublishOptions:
    image: str
    repository: str  # HOST[:PORT]/REPO, validated by check_repository
    tag: str | None = None  # default <arch>-<id12>
    record_path: Path | None = None  # the build record to note the reference in, when it is this image's
    signing_key: SigningKey | None = None  # --sign-key: the publish statement also as a signed DSSE envelope
    attach: bool = True  # push the attestations as OCI artifacts referring to the image (--no-attach: not)


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    reference: str  # HOST[:PORT]/REPO@sha256:...
    digest: str
    image_id: str  # the identity; "" when the engine's store could not say it (then not recorded)
    repository: str
    tag: str
    recorded_in: Path | None
    attestations: tuple[Path, ...] = ()  # the publish statement (and its envelope), beside the record
    attached: AttachResult | None = None  # the documents pushed as artifacts referring to the image


def shown_reference(text: str) -> str:
    """``text`` for a message: a user name and password before the host replaced, cut when long."""
    return shown(references.shown_reference(text))


def check_registry_host(text: str, flag: str) -> None:
    """The registry part of a reference: no credentials in it (they would be echoed and recorded),
    and a port a TCP port can be."""
    if references.userinfo_problem(text):
        msg = (f"{flag} {shown_reference(text)}: a registry address carries no user name or password; "
               "log in with `docker login HOST` (publish pushes with docker's credentials)")  # fmt: skip
        raise ConfigError(msg)
    host = text.partition("/")[0]
    port = host.rpartition(":")[2] if ":" in host else ""
    if port.isdigit() and not 1 <= int(port) <= 65535:
        msg = f"{flag} {shown_reference(text)}: port {port} is not a TCP port (1-65535)"
        raise ConfigError(msg)


def check_repository(text: str) -> str:
    check_registry_host(text, "--repository")
    if not text.isprintable() or not REPOSITORY_RE.match(text):
        if "@" in text or ":" in text.rsplit("/", 1)[-1]:
            msg = (
                f"--repository {shown(text)}: give HOST[:PORT]/REPO without a tag or digest; the tag goes in --tag"
            )
        elif "/" not in text or ("." not in text.split("/", 1)[0] and ":" not in text.split("/", 1)[0]):
            msg = f"--repository {shown(text)}: must start with the registry, e.g. registry.example.com/ml/kimi-k3 or 127.0.0.1:5000/kimi-k3"
        else:
            msg = f"--repository {shown(text)}: not a valid repository (lowercase letters, digits and . _ - between slashes)"
        raise ConfigError(msg)
    return text


def check_tag(text: str) -> str:
    if not TAG_RE.fullmatch(text):
        msg = f"--tag {shown(text)}: a tag is 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        raise ConfigError(msg)
    return text


def default_tag(info: ImageInfo) -> str:
    """``<arch>-<id12>``: unique per image, so a publish never moves a tag another image had."""
    arch = info.labels.get("io.imagebuild.arch", "image")
    return f"{arch if TAG_RE.fullmatch(arch) else 'image'}-{(info.identity or info.id).removeprefix('sha256:')[:12]}"


class _PushProgress:
    """Turns the per-layer push stream into a line every few seconds and a summary."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.layers: dict[str, PushEvent] = {}
        self.next_report = time.monotonic() + PROGRESS_EVERY_S

    def update(self, event: PushEvent) -> None:
        if not event.layer:
            return
        self.layers[event.layer] = event
        if time.monotonic() >= self.next_report:
            self.next_report = time.monotonic() + PROGRESS_EVERY_S
            self.report(f"pushing: {self.summary()}")

    def summary(self) -> str:
        done = sum(e.status.startswith(DONE_STATUSES) for e in self.layers.values())
        existed = sum(
            e.status != "Pushed" and e.status.startswith(DONE_STATUSES) for e in self.layers.values()
        )
        sent = sum(e.current for e in self.layers.values())
        return f"{done}/{len(self.layers)} layers done ({existed} already in the registry), {sent / 1e6:.0f} MB sent"


def check_statement_place(options: PublishOptions) -> None:
    """Where publish writes its statement, beside the build record, can be written: made if missing
    (as build makes build/) and checked before anything is pushed. A signed publish needs one."""
    if options.record_path is None:
        if options.signing_key is not None:
            msg = "--sign-key: publish writes its signed statement beside the build record; give --record FILE (or run in the checkout)"
            raise ConfigError(msg)
        return
    if problem := writable_directory_problem(options.record_path.parent):
        msg = (
            f"cannot write the publish statement beside the build record ({problem}); make it writable, "
            "or give --record FILE in a directory you can write"
        )
        raise ConfigError(msg)


def publish_image(options: PublishOptions, engine: Engine, *, report: Callable[[str], None]) -> PublishResult:
    repository = check_repository(options.repository)
    check_statement_place(options)
    info = engine.inspect_image(options.image)
    tag = check_tag(options.tag) if options.tag else default_tag(info)
    engine.tag(info.id, f"{repository}:{tag}")
    report(f"pushing {options.image} ({info.described}) from {engine.store().describe()} as {repository}:{tag}")
    started = time.monotonic()
    progress = _PushProgress(report)
    digest: str | None = None
    for event in engine.push(repository, tag):
        progress.update(event)
        digest = event.digest or digest
    if digest is None:
        msg = f"push of {repository}:{tag} ended without a manifest digest from the engine; push again"
        raise RegistryError(msg)
    report(f"pushed in {time.monotonic() - started:.1f}s: {progress.summary()}")
    reference = f"{repository}@{digest}"
    if not info.identity and (identity := _pushed_config(repository, digest)):
        info = replace(info, config_digest=identity, identity_unknown="")
        report(f"its identity, from the manifest the registry now holds: {identity}")
    if not info.identity:  # never a wrong identity: the digest still names exactly what was pushed
        report(f"the image's identity is unknown ({info.identity_unknown}); {reference} still names exactly what was pushed")
    written = _attest(options, info, repository, digest, report)
    recorded = note_in_record(
        options.record_path, image_id=info.identity, key=PUBLISHED, value=reference, report=report
    )
    for path in written:
        note_in_record(options.record_path, image_id=info.identity, key=ATTESTATIONS, value=str(path), report=report)
    attached = (
        _attach(options, info, repository=repository, tag=tag, digest=digest, written=written, report=report)
        if options.attach
        else None
    )
    return PublishResult(
        reference=reference,
        digest=digest,
        image_id=info.identity,
        repository=repository,
        tag=tag,
        recorded_in=recorded,
        attestations=written,
        attached=attached,
    )


def _pushed_config(repository: str, digest: str) -> str:
    """The config digest of the manifest just pushed, read back from the registry: the identity where
    the engine's store could not give it ("" when it cannot be read, or is an index)."""
    try:
        with opened_repository(repository, push=False) as registry:
            found = registry.manifest(digest)
    except ImageBuildError as e:
        logger.debug("could not read %s@%s back from the registry: %s", repository, digest, e)
        return ""
    return config_digest_of(found[0]) if found is not None else ""


def _attach(
    options: PublishOptions,
    info: ImageInfo,
    *,
    repository: str,
    tag: str,
    digest: str,
    written: tuple[Path, ...],
    report: Callable[[str], None],
) -> AttachResult | None:
    """The build's documents and the publish statement, pushed as artifacts referring to ``digest``."""
    documents = (*build_documents(options.record_path, image_id=info.identity, report=report), *written)
    if not documents:
        report("no attestations attached: there are none of this image to attach")
        return None
    try:
        return attach_documents(repository, digest, documents, report=report)
    except ImageBuildError as e:
        msg = (
            f"pushed {repository}@{digest}, which stays pushed and tagged {repository}:{tag}; "
            f"its attestations could not be attached: {redact(str(e))}"
        )
        raise RegistryError(msg) from e


def _attest(
    options: PublishOptions, info: ImageInfo, repository: str, digest: str, report: Callable[[str], None]
) -> tuple[Path, ...]:
    """The publish statement beside the build record: subject the pushed manifest, predicate the identity."""
    if options.record_path is None or not info.identity:
        why = "no build record to write it beside" if info.identity else "the image's identity is unknown"
        report(f"no publish statement written: {why}")
        return ()
    statement = distribution_statement(
        subject={"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}, "mediaType": MANIFEST_MEDIA_TYPE},
        image=ImageIdentity(identity=info.identity, manifest_digest=digest),
        action="publish",
        details={"reference": f"{repository}@{digest}"},
    )
    arch = info.labels.get("io.imagebuild.arch", "image")
    name = attestation_file_name(arch if TAG_RE.fullmatch(arch) else "image", info.identity, PUBLISH_SUFFIX)
    try:
        written = write_attestation(options.record_path.with_name(name), statement_text(statement), key=options.signing_key)
    except OSError as e:
        msg = f"pushed {repository}@{digest} (it stays pushed and tagged); its statement could not be written beside {options.record_path}: {e.strerror or e}"
        raise ImageBuildError(msg) from e
    report(f"publish statement: {', '.join(str(p) for p in written.paths)}")
    return written.paths

