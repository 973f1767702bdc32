"""The kinds of pin: one class per kind, with everything that differs between kinds.

A pin records what a human tracks (a tag, a branch, a version, a URL) beside
the immutable identity the build uses (a commit SHA, an image digest, a file's
sha256). Each kind's class says which keys its table in pins.toml has and how
they parse, which fields are its identity, which Docker ARGs it provides, when
``imagebuild lock`` asks its source again (and where: ``source_url``, ``registry``)
and what a changed identity means, and what the SBOM and the provenance say
about it (``describe``). The file pins (wheel, pypi) are in ``files``, the apt snapshot pin in ``apt``. Adding a kind is
adding a class and listing it in PIN_TYPES (and a resolver in lock/sources.py when it has a
remote source); ``tests/unit/test_pin_kinds.py`` checks both are there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Self

from imagebuild.errors import ConfigError
from imagebuild.inputs.references import parse_image_name
from imagebuild.inputs.schema import Table, suggest
from imagebuild.inputs.values import (
    ABSOLUTE_PATH,
    ARCH_NAME,
    COMMIT,
    COMMITTED,
    COMMITTED_FORMAT,
    DIGEST,
    FINGERPRINT,
    GIT_REF,
    GIT_URL,
    IMAGE_NAME,
    IMAGE_TAG,
    PYTHON_VERSION,
    TOOLCHAIN_VERSION,
    shown,
)
from imagebuild.pins.apt import AptPin
from imagebuild.pins.base import (
    Drift,
    LockState,
    Pin,
    PinKind,
    Refresh,
)
from imagebuild.pins.description import PackageUrl, PinDescription, git_package_url
from imagebuild.pins.files import PypiPin, TarballPin, WheelPin


@dataclass(frozen=True, kw_only=True)
class ImagePin(Pin):
    kind: ClassVar[PinKind] = PinKind.IMAGE
    keys: ClassVar[tuple[str, ...]] = (
        "image",
        "tag",
        "digest",
        "platform_digest",
        "python",
        "site_packages",
        "fingerprint",
    )
    identity_keys: ClassVar[tuple[str, ...]] = ("digest", "platform_digest")
    declared_keys: ClassVar[tuple[str, ...]] = ("image", "tag")

    image: str
    tag: str
    digest: str | None
    platform_digest: str | None
    python: str
    site_packages: str

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        return cls(
            name=name,
            source=source,
            image=t.string("image", kind=IMAGE_NAME),
            tag=t.string("tag", kind=IMAGE_TAG),
            digest=t.optional_string("digest", kind=DIGEST),
            platform_digest=t.optional_string("platform_digest", kind=DIGEST),
            python=t.string("python", kind=PYTHON_VERSION),
            site_packages=t.string("site_packages", kind=ABSOLUTE_PATH),
            fingerprint=t.optional_string("fingerprint", kind=FINGERPRINT),
        )

    @property
    def identity(self) -> str | None:
        return self.digest

    @property
    def tracked(self) -> str:
        return f"tag {self.tag}"

    @property
    def refresh(self) -> Refresh:
        return Refresh.ALWAYS

    def drift(
        self, differs: Collection[str], old: Mapping[str, str | int], new: Mapping[str, str | int]
    ) -> Drift:
        # Same tag, other index: the tag moved. Same index, other platform entry:
        # only the arch profile changed.
        return "moved" if "digest" in differs else "updated"

    @property
    def reference(self) -> str:
        """image@digest when locked, else image:tag (only for --allow-unpinned)."""
        return f"{self.image}@{self.digest}" if self.digest else f"{self.image}:{self.tag}"

    def build_args(self) -> dict[str, str]:
        p = self.arg_prefix
        return {
            f"{p}_IMAGE": self.reference,
            f"{p}_PYTHON": self.python,
            f"{p}_SITE_PACKAGES": self.site_packages,
        }

    @property
    def source_url(self) -> str:
        return f"{self.image}:{self.tag}"

    @property
    def registry(self) -> str:
        return parse_image_name(self.image).registry

    def describe(self) -> PinDescription:
        digest = self.require_identity()
        name = parse_image_name(self.image)
        where = f"{name.registry}/{name.repository}"
        platform = (("platform-digest", self.platform_digest),) if self.platform_digest else ()
        return PinDescription(
            role="container",
            name=where,
            version=digest,
            purl=PackageUrl(
                type="oci",
                name=name.repository.rsplit("/", 1)[-1],
                version=digest,
                qualifiers=(("repository_url", where), ("tag", self.tag)),
            ),
            hashes=(("sha256", digest.removeprefix("sha256:")),),
            properties=(("tag", self.tag), *platform),
            digest=(("sha256", digest.removeprefix("sha256:")),),
            annotations=(("platformDigest", self.platform_digest),) if self.platform_digest else (),
        )


@dataclass(frozen=True, kw_only=True)
class GitPin(Pin):
    kind: ClassVar[PinKind] = PinKind.GIT
    keys: ClassVar[tuple[str, ...]] = (
        "url",
        "tag",
        "branch",
        "commit",
        "tag_object",
        "committed",
        "fingerprint",
    )
    identity_keys: ClassVar[tuple[str, ...]] = ("commit", "tag_object", "committed")
    declared_keys: ClassVar[tuple[str, ...]] = ("url", "tag", "branch")
    derived_keys: ClassVar[tuple[str, ...]] = ("committed",)
    optional_keys: ClassVar[tuple[str, ...]] = ("tag_object",)

    url: str
    tag: str | None
    branch: str | None
    # Always the commit (what `git rev-parse HEAD` gives after the checkout), never a tag object.
    commit: str | None
    # The committer time of ``commit`` (UTC, RFC 3339): the build's SOURCE_DATE_EPOCH comes from it.
    committed: str | None = None
    # An annotated tag's own object (what `git ls-remote` lists for refs/tags/NAME, and what
    # references like MAD's Dockerfile pin); None for a lightweight tag or a branch.
    tag_object: str | None = None

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        tag, branch = t.optional_string("tag", kind=GIT_REF), t.optional_string("branch", kind=GIT_REF)
        if tag and branch:
            msg = f"{t.where}: set either 'tag' or 'branch', not both"
            raise ConfigError(msg)
        return cls(
            name=name,
            source=source,
            url=t.string("url", kind=GIT_URL),
            tag=tag,
            branch=branch,
            commit=t.optional_string("commit", kind=COMMIT),
            committed=t.optional_string("committed", kind=COMMITTED),
            tag_object=t.optional_string("tag_object", kind=COMMIT),
            fingerprint=t.optional_string("fingerprint", kind=FINGERPRINT),
        )

    @property
    def identity(self) -> str | None:
        return self.commit

    @property
    def locked(self) -> bool:
        return self.commit is not None and self.committed is not None and not self.edited

    @property
    def commit_time(self) -> int | None:
        """``committed`` as seconds since the epoch; None until locked, and for a pin edited since.

        An edited pin's recorded time may be another commit's: no SOURCE_DATE_EPOCH comes from it.
        """
        if self.committed is None or self.edited:
            return None
        return int(datetime.strptime(self.committed, COMMITTED_FORMAT).replace(tzinfo=UTC).timestamp())

    @property
    def tracked(self) -> str:
        if self.tag:
            return f"tag {self.tag}"
        if self.branch:
            return f"branch {self.branch}"
        return "commit"

    @property
    def refresh(self) -> Refresh:
        # A commit-only pin is asked once more for its commit time (SOURCE_DATE_EPOCH), and
        # whenever its fingerprint does not vouch that the recorded time is this commit's.
        unvouched = self.commit is not None and (
            self.committed is None or self.lock_state is not LockState.MATCHES
        )
        return Refresh.ALWAYS if self.tag or self.branch or unvouched else Refresh.NEVER

    def drift(
        self, differs: Collection[str], old: Mapping[str, str | int], new: Mapping[str, str | int]
    ) -> Drift:
        # A tag is meant to stay put; a branch is meant to move on.
        return "moved" if self.tag else "updated"

    def build_args(self) -> dict[str, str]:
        p = self.arg_prefix
        return {f"{p}_REPO": self.url, f"{p}_COMMIT": self.commit or ""}

    @property
    def source_url(self) -> str:
        return self.url

    def describe(self) -> PinDescription:
        commit = self.require_identity()
        path, purl = git_package_url(self.url, commit)
        return PinDescription(
            role="library",
            name=path,
            version=commit,
            purl=purl,
            # A commit ID is the SHA-1 of the commit object: the source's identity.
            hashes=(("sha1", commit),),
            links=(("vcs", self.url),),
            properties=(("tracked", self.tracked),),
            uri=f"git+{self.url}",
            digest=(("gitCommit", commit),),
        )


@dataclass(frozen=True, kw_only=True)
class ToolchainPin(Pin):
    kind: ClassVar[PinKind] = PinKind.TOOLCHAIN
    keys: ClassVar[tuple[str, ...]] = ("version",)
    identity_keys: ClassVar[tuple[str, ...]] = ()

    version: str

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        return cls(name=name, source=source, version=t.string("version", kind=TOOLCHAIN_VERSION))

    @property
    def identity(self) -> str | None:
        # An exact toolchain version is its own identity: rustup verifies
        # the channel's signed manifest for that version.
        return self.version

    @property
    def tracked(self) -> str:
        return f"version {self.version}"

    @property
    def refresh(self) -> Refresh:
        return Refresh.NEVER

    def build_args(self) -> dict[str, str]:
        return {f"{self.arg_prefix}_VERSION": self.version}

    def describe(self) -> PinDescription:
        return PinDescription(
            role="application",
            name=self.name,
            version=self.version,
            purl=PackageUrl(type="generic", name=self.name, version=self.version),
        )


PIN_TYPES: dict[PinKind, type[Pin]] = {
    cls.kind: cls for cls in (ImagePin, GitPin, WheelPin, TarballPin, PypiPin, ToolchainPin, AptPin)
}


def parse_pin(name: str, t: Table, source: Path) -> Pin:
    kinds = [k.value for k in PinKind]
    kind_text = t.string("kind")
    if kind_text not in kinds:
        msg = f"{t.where}: unknown kind {shown(kind_text)}.{suggest(kind_text, kinds)} Known kinds: {', '.join(kinds)}"
        raise ConfigError(msg)
    pin_type = PIN_TYPES[PinKind(kind_text)]
    t.check_keys(("kind", "arches", *pin_type.keys))
    pin = pin_type.from_table(
        Table({k: v for k, v in t.data.items() if k != "arches"}, t.where), name=name, source=source
    )
    # Any kind of pin may belong to some arch profiles only (imagebuild.pins.arch_pins).
    arches = tuple(t.strings("arches", kind=ARCH_NAME))
    return replace(pin, arches=arches) if arches else pin
