"""The kinds of pin: one class per kind, with everything that differs between kinds.

A pin records what a human tracks (a tag, a branch, a version, a URL) beside
the immutable identity the build uses (a commit SHA, an image digest, a file's
sha256). Each kind's class says which keys its table in pins.toml has and how
they parse, which fields are its identity, which Docker ARGs it provides, when
``imagebuild lock`` asks its source again (and where: ``source_url``, ``registry``)
and what a changed identity means, and what the SBOM and the provenance say
about it (``describe``). Adding a kind is adding a class here (and a resolver in lock/sources.py when it
has a remote source); ``tests/unit/test_pin_kinds.py`` checks both are there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Self

from packaging.utils import canonicalize_name

from imagebuild.errors import ConfigError
from imagebuild.pins.base import (
    PYPI_SIMPLE,
    Drift,
    Pin,
    PinKind,
    Refresh,
    simple_project_url,
)
from imagebuild.pins.description import PackageUrl, PinDescription, git_package_url
from imagebuild.references import parse_image_name
from imagebuild.schema import Table, suggest
from imagebuild.values import (
    ABSOLUTE_PATH,
    COMMIT,
    COMMITTED,
    COMMITTED_FORMAT,
    DIGEST,
    FILE_NAME,
    GIT_REF,
    GIT_URL,
    HTTPS_URL,
    IMAGE_NAME,
    IMAGE_TAG,
    PROJECT_NAME,
    PYTHON_VERSION,
    SHA256,
    TOOLCHAIN_VERSION,
    VERSION,
    shown,
)


@dataclass(frozen=True, kw_only=True)
class ImagePin(Pin):
    kind: ClassVar[PinKind] = PinKind.IMAGE
    keys: ClassVar[tuple[str, ...]] = ("image", "tag", "digest", "platform_digest", "python", "site_packages")
    identity_keys: ClassVar[tuple[str, ...]] = ("digest", "platform_digest")

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
    keys: ClassVar[tuple[str, ...]] = ("url", "tag", "branch", "commit", "committed")
    identity_keys: ClassVar[tuple[str, ...]] = ("commit", "committed")

    url: str
    tag: str | None
    branch: str | None
    commit: str | None
    # The commit's committer time (UTC, RFC 3339): the build's SOURCE_DATE_EPOCH comes from it.
    committed: str | None = None

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
        )

    @property
    def identity(self) -> str | None:
        return self.commit

    @property
    def locked(self) -> bool:
        return self.commit is not None and self.committed is not None

    @property
    def commit_time(self) -> int | None:
        """``committed`` as seconds since the epoch, or None until locked."""
        if self.committed is None:
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
        # A commit-only pin is asked once more, for its commit time (SOURCE_DATE_EPOCH).
        missing_time = self.commit is not None and self.committed is None
        return Refresh.ALWAYS if self.tag or self.branch or missing_time else Refresh.NEVER

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
class WheelPin(Pin):
    kind: ClassVar[PinKind] = PinKind.WHEEL
    keys: ClassVar[tuple[str, ...]] = ("url", "version", "sha256", "size")
    identity_keys: ClassVar[tuple[str, ...]] = ("sha256", "size")

    url: str
    version: str
    sha256: str | None
    size: int

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        pin = cls(
            name=name,
            source=source,
            url=t.string("url", kind=HTTPS_URL),
            version=t.string("version", kind=VERSION),
            sha256=t.optional_string("sha256", kind=SHA256),
            size=t.integer("size", default=0),
        )
        if pin.size < 0:
            msg = f"{t.where}: 'size' = {pin.size} is negative; clear it and run `imagebuild lock`"
            raise ConfigError(msg)
        # The file name is the URL's last segment, %-decoded: it becomes an ARG and a path in the
        # image, and pip reads its tags, so it must be a plain wheel file name.
        if FILE_NAME.problem(pin.filename) or not pin.filename.endswith(".whl"):
            msg = f"{t.where}: 'url' ends in {shown(pin.filename)}, not a wheel file name (NAME-VERSION-TAGS.whl)"
            raise ConfigError(msg)
        return pin

    @property
    def identity(self) -> str | None:
        return self.sha256

    @property
    def tracked(self) -> str:
        return f"url of {self.version}"

    @property
    def refresh(self) -> Refresh:
        return Refresh.WHEN_EMPTY

    # drift: other bytes under a recorded URL are always "moved" (the default).

    @property
    def filename(self) -> str:
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1])

    def build_args(self) -> dict[str, str]:
        p = self.arg_prefix
        return {
            f"{p}_WHEEL_URL": self.url,
            f"{p}_WHEEL_FILE": self.filename,
            f"{p}_WHEEL_SHA256": self.sha256 or "",
            f"{p}_VERSION": self.version,
        }

    @property
    def source_url(self) -> str:
        return self.url

    def describe(self) -> PinDescription:
        sha256 = self.require_identity()
        project = canonicalize_name(self.filename.split("-", 1)[0])
        return PinDescription(
            role="library",
            name=project,
            version=self.version,
            purl=PackageUrl(
                type="pypi",
                name=project,
                version=self.version,
                qualifiers=(("file_name", self.filename), ("download_url", self.url)),
            ),
            hashes=(("sha256", sha256),),
            links=(("distribution", self.url),),
            uri=self.url,
            digest=(("sha256", sha256),),
        )


@dataclass(frozen=True, kw_only=True)
class PypiPin(Pin):
    kind: ClassVar[PinKind] = PinKind.PYPI
    needs_target_python: ClassVar[bool] = True
    keys: ClassVar[tuple[str, ...]] = ("project", "version", "index", "filename", "sha256")
    identity_keys: ClassVar[tuple[str, ...]] = ("filename", "sha256")

    project: str
    version: str
    index: str
    filename: str | None
    sha256: str | None

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        return cls(
            name=name,
            source=source,
            project=t.string("project", kind=PROJECT_NAME),
            version=t.string("version", kind=VERSION),
            index=t.string("index", kind=HTTPS_URL),
            filename=t.optional_string("filename", kind=FILE_NAME),
            sha256=t.optional_string("sha256", kind=SHA256),
        )

    @property
    def identity(self) -> str | None:
        return self.sha256

    @property
    def tracked(self) -> str:
        return f"{self.project}=={self.version}"

    @property
    def refresh(self) -> Refresh:
        return Refresh.WHEN_EMPTY

    def drift(
        self, differs: Collection[str], old: Mapping[str, str | int], new: Mapping[str, str | int]
    ) -> Drift:
        # Other bytes under the recorded filename moved; another file of the release is an update.
        return "moved" if old.get("filename") == new.get("filename") else "updated"

    def build_args(self) -> dict[str, str]:
        p = self.arg_prefix
        return {
            f"{p}_VERSION": self.version,
            f"{p}_FILE": self.filename or "",
            f"{p}_SHA256": self.sha256 or "",
        }

    @property
    def source_url(self) -> str:
        return simple_project_url(self.index, self.project)

    def describe(self) -> PinDescription:
        sha256 = self.require_identity()
        project = canonicalize_name(self.project)
        index = (("repository_url", self.index),) if self.index != PYPI_SIMPLE else ()
        return PinDescription(
            role="library",
            name=project,
            version=self.version,
            purl=PackageUrl(
                type="pypi",
                name=project,
                version=self.version,
                qualifiers=(("file_name", self.filename or ""), *index),
            ),
            hashes=(("sha256", sha256),),
            python_project=project,
            digest=(("sha256", sha256),),
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
    cls.kind: cls for cls in (ImagePin, GitPin, WheelPin, PypiPin, ToolchainPin)
}


def parse_pin(name: str, t: Table, source: Path) -> Pin:
    kinds = [k.value for k in PinKind]
    kind_text = t.string("kind")
    if kind_text not in kinds:
        msg = f"{t.where}: unknown kind {shown(kind_text)}.{suggest(kind_text, kinds)} Known kinds: {', '.join(kinds)}"
        raise ConfigError(msg)
    pin_type = PIN_TYPES[PinKind(kind_text)]
    t.check_keys(("kind", *pin_type.keys))
    return pin_type.from_table(t, name=name, source=source)
