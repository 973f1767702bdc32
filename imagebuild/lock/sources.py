"""Ask one pin's source for its current immutable identity.

Dispatches on the pin's kind (the RESOLVERS table) to git, the registry, the
file hasher or the package index, and turns their errors into a
:class:`SourceError` that names the pin, the URL, the cause and what to check.
Every identity a source returns is checked against the form pins.toml
requires before it is used, so a source that answers garbage is blamed, not
the pins file it would corrupt. :class:`RemoteSources` is this, behind the
lock's :class:`~imagebuild.lock.repository.Sources` interface.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.debian import SNAPSHOT_ID_RE
from imagebuild.lock.apt_snapshot import newest_snapshot
from imagebuild.lock.committime import commit_time
from imagebuild.lock.files import hash_url
from imagebuild.lock.git import GitOptions, GitProcesses, resolve_ref
from imagebuild.lock.http import Http, refuse_plain_http
from imagebuild.lock.pypi import (
    NoMatchingWheel,
    choose_wheel,
    list_files,
    newest_release,
    project_url,
    target_tags,
)
from imagebuild.lock.registry import RegistryClient, parse_image_name
from imagebuild.lock.registry_auth import Credentials
from imagebuild.lock.repository import Resolved, Sources, SourceSettings
from imagebuild.lock.source_errors import SourceError, SourceFailure
from imagebuild.pins import (
    COMMIT_RE,
    COMMITTED_RE,
    DIGEST_RE,
    SHA256_RE,
    AptPin,
    GitPin,
    ImagePin,
    LockState,
    Pin,
    PinKind,
    PypiPin,
    TarballPin,
    WheelPin,
)


@dataclass(frozen=True, kw_only=True)
class SourceContext:
    http: Http
    registry: RegistryClient
    git: GitOptions
    arch: ArchProfile
    python: str | None  # the base image's python, for wheel tags


def source_url(pin: Pin) -> str:
    """Where the pin's identity comes from, for messages."""
    return pin.source_url


def resolve_pin(pin: Pin, ctx: SourceContext) -> Resolved:
    resolver = RESOLVERS.get(pin.kind)
    if resolver is None:
        msg = f"nothing to resolve for a {pin.kind} pin"
        raise AssertionError(msg)
    try:
        resolved = resolver(pin, ctx)
    except SourceError:
        raise
    except SourceFailure as e:
        raise SourceError.blaming(pin, e) from e
    _check_identity(pin, resolved)
    return resolved


_FORMS: dict[str, tuple[re.Pattern[str], str]] = {
    "commit": (COMMIT_RE, "a 40-hex commit SHA"),
    "tag_object": (re.compile(f"(?:{COMMIT_RE.pattern})?"), "a 40-hex tag object SHA"),
    "digest": (DIGEST_RE, "a sha256 digest"),
    "platform_digest": (DIGEST_RE, "a sha256 digest"),
    "sha256": (SHA256_RE, "a 64-hex sha256"),
    "committed": (COMMITTED_RE, "a UTC time like 2026-01-01T00:00:00Z"),
    "snapshot": (SNAPSHOT_ID_RE, "a snapshot ID like 20261201T000000Z"),
}


def _check_identity(pin: Pin, resolved: Resolved) -> None:
    for key, value in resolved.fields.items():
        form = _FORMS.get(key)
        if form is not None and not (isinstance(value, str) and form[0].fullmatch(value)):
            raise SourceError(
                pin,
                source_url(pin),
                f"the source answered {key} = {value!r}, which is not {form[1]}",
                "The source is at fault; pins.toml was left as it was",
            )


def _git(pin: GitPin, ctx: SourceContext) -> Resolved:
    """The commit the pin's ref names (a tag peeled, with its tag object), and the commit's time.

    A commit-only pin is asked for its time; a pinned SHA that turns out to be a tag object is
    answered with the commit it points at (plan.py normalises the pin to it).
    """
    if pin.tag or pin.branch:
        ref = resolve_ref(pin.url, tag=pin.tag, branch=pin.branch, options=ctx.git)
        commit, tag_object = ref.commit, ref.tag_object
        detail = f"{ref.ref} (annotated, peeled)" if ref.annotated else ref.ref
        committed = _committed(pin, commit, ctx)
    else:
        assert pin.commit is not None  # a commit-only pin without a commit is not resolved (Refresh.NEVER)
        found = commit_time(pin.url, pin.commit, ctx.git)
        commit, committed, detail = found.commit, found.committed, "commit"
        tag_object = pin.commit if found.commit != pin.commit else None
    fields: dict[str, str | int] = {"commit": commit, "tag_object": tag_object or "", "committed": committed}
    recorded: dict[str, str | int] = {}
    if pin.commit and pin.commit not in (commit, tag_object) and pin.lock_state is not LockState.MATCHES:
        # The recorded commit may be kept (a moved tag not accepted): its own time, not the one recorded.
        recorded = {"committed": commit_time(pin.url, pin.commit, ctx.git).committed}
    return Resolved(fields=fields, detail=detail, recorded=recorded)


def _committed(pin: GitPin, commit: str, ctx: SourceContext) -> str:
    """The commit's time: kept when lock recorded it for this very commit (it cannot change), else fetched."""
    if commit == pin.commit and pin.committed and pin.lock_state is LockState.MATCHES:
        return pin.committed
    return commit_time(pin.url, commit, ctx.git).committed


def _image(pin: ImagePin, ctx: SourceContext) -> Resolved:
    name = parse_image_name(pin.image)
    digests = ctx.registry.resolve(name, pin.tag, ctx.arch.platform)
    kind = "index" if digests.platform_digest != digests.digest else "single manifest"
    detail = f"{kind} {digests.media_type}; {ctx.arch.platform} = {digests.platform_digest}"
    return Resolved(
        fields={"digest": digests.digest, "platform_digest": digests.platform_digest}, detail=detail
    )


def _wheel(pin: WheelPin, ctx: SourceContext) -> Resolved:
    digest = hash_url(ctx.http, pin.url, zip_required=True)
    return Resolved(fields={"sha256": digest.sha256, "size": digest.size})


def _tarball(pin: TarballPin, ctx: SourceContext) -> Resolved:
    digest = hash_url(ctx.http, pin.url)
    return Resolved(fields={"sha256": digest.sha256, "size": digest.size})


def _pypi(pin: PypiPin, ctx: SourceContext) -> Resolved:
    if ctx.python is None:
        raise SourceError(
            pin,
            pin.index,
            "no target python: pins.toml has no image pin named 'base' with a `python` field",
            'Add [base] (kind = "image", python = "3.12") so wheels can be matched',
        )
    tags = target_tags(ctx.python, ctx.arch.machine)
    files = list_files(ctx.http, pin.index, pin.project)
    try:
        choice = choose_wheel(files, pin.project, pin.version, tags)
    except NoMatchingWheel as e:
        raise SourceError(
            pin,
            project_url(pin.index, pin.project),
            str(e),
            f"Check `version` in pins.toml, or whether the release supports python {ctx.python} "
            f"on {ctx.arch.platform}",
        ) from e
    refuse_plain_http(choice.file.url)  # pip downloads it from there at build time, hash or not
    sha256 = choice.file.sha256
    if sha256 is None:  # an index without hashes: hash the file ourselves
        sha256 = hash_url(ctx.http, choice.file.url, zip_required=True).sha256
    return Resolved(
        fields={"filename": choice.file.filename, "sha256": sha256},
        detail=f"best tag {choice.tag} of {len(choice.candidates)} file(s)",
        yanked=choice.file.yanked,
        newest=newest_release(files, pin.project),
    )


def _apt(pin: AptPin, ctx: SourceContext) -> Resolved:
    return newest_snapshot(pin, ctx.http)


# One resolver per kind of pin with a remote source; each takes a pin of its kind.
Resolver = Callable[[Any, SourceContext], Resolved]
RESOLVERS: dict[PinKind, Resolver] = {
    PinKind.GIT: _git,
    PinKind.IMAGE: _image,
    PinKind.WHEEL: _wheel,
    PinKind.TARBALL: _tarball,
    PinKind.PYPI: _pypi,
    PinKind.APT: _apt,
}


class RemoteSources(Sources):
    """The real sources: git, registries, file servers and package indexes, for one lock run."""

    def __init__(self, settings: SourceSettings) -> None:
        self.cancel = threading.Event()
        self.processes = GitProcesses()
        self.http = Http(
            timeout=settings.timeout,
            deadline=settings.deadline,
            cancel=self.cancel,
            on_retry=settings.on_retry,
        )
        self.context = SourceContext(
            http=self.http,
            registry=RegistryClient(self.http, _credentials(settings.registries)),
            git=GitOptions(
                timeout=settings.timeout,
                deadline=settings.deadline,
                cancel=self.cancel,
                processes=self.processes,
                on_retry=settings.on_retry,
            ),
            arch=settings.arch,
            python=settings.python,
        )

    def resolve(self, pin: Pin) -> Resolved:
        return resolve_pin(pin, self.context)

    def close(self) -> None:
        # Done, failed, deadline or Ctrl-C: nothing may keep running, git least of all.
        self.cancel.set()
        self.processes.kill_all()
        self.http.close()


def _credentials(registries: frozenset[str]) -> dict[str, Credentials]:
    """docker's credentials for each registry the lock will ask; read before any request."""
    if not registries:
        return {}
    from imagebuild.engine.credentials import registry_credentials  # docker-py loads only when needed

    found = {registry: registry_credentials(registry) for registry in sorted(registries)}
    return {registry: creds for registry, creds in found.items() if creds is not None}


__all__ = [
    "RESOLVERS",
    "RemoteSources",
    "Resolved",
    "SourceContext",
    "SourceError",
    "resolve_pin",
    "source_url",
]
