"""The pins of one downloaded file, known by its sha256: a wheel or a source tarball at a URL, a release on PyPI.

What the two share (the version, the sha256 that is their identity, when lock hashes them
again, how the SBOM names them) is ``FilePin``; each kind adds where its file comes from.
The other kinds (images, git repositories, the toolchain's versions) are in ``kinds``,
which also maps each ``kind =`` value of pins.toml to its class.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from packaging.utils import canonicalize_name

from imagebuild.errors import ConfigError
from imagebuild.inputs.schema import Table
from imagebuild.inputs.values import (
    FILE_NAME,
    FINGERPRINT,
    HTTPS_URL,
    PROJECT_NAME,
    SHA256,
    VERSION,
    shown,
)
from imagebuild.pins.base import (
    PYPI_SIMPLE,
    Drift,
    Pin,
    PinKind,
    Refresh,
    simple_project_url,
)
from imagebuild.pins.description import Link, PackageUrl, PinDescription


@dataclass(frozen=True, kw_only=True)
class FilePin(Pin):
    """A python package's file, downloaded and checked against its sha256.

    The sha256 is the identity: other bytes never carry the same one, so lock hashes the file
    only while the sha256 is empty (or on upgrade).
    """

    version: str
    sha256: str | None

    @property
    def identity(self) -> str | None:
        return self.sha256

    @property
    def refresh(self) -> Refresh:
        return Refresh.WHEN_EMPTY

    def _describe_file(
        self,
        project: str,
        *,
        qualifiers: tuple[tuple[str, str], ...],
        links: tuple[tuple[Link, str], ...] = (),
        uri: str | None = None,
        python_project: str | None = None,
    ) -> PinDescription:
        """The SBOM's library entry: a pypi purl of ``project`` and the sha256 as hash and digest."""
        sha256 = self.require_identity()
        return PinDescription(
            role="library",
            name=project,
            version=self.version,
            purl=PackageUrl(type="pypi", name=project, version=self.version, qualifiers=qualifiers),
            hashes=(("sha256", sha256),),
            links=links,
            uri=uri,
            python_project=python_project,
            digest=(("sha256", sha256),),
        )


@dataclass(frozen=True, kw_only=True)
class UrlFilePin(FilePin):
    """A file at a URL the pin names (a wheel, a source tarball): lock hashes it and records its size.

    Its file name (the URL's last segment, %-decoded) becomes an ARG and a path in the image, so each
    kind says which names it takes (``_accepts``) and reaches the build as ``<PIN>_<ARG_WORD>_*``.
    """

    keys: ClassVar[tuple[str, ...]] = ("url", "version", "sha256", "size", "fingerprint")
    identity_keys: ClassVar[tuple[str, ...]] = ("sha256", "size")
    declared_keys: ClassVar[tuple[str, ...]] = ("url",)
    arg_word: ClassVar[str]  # WHEEL, TARBALL: the build args' middle word
    expected_name: ClassVar[str]  # what the file name should be, for the error line

    url: str
    size: int

    @classmethod
    def _accepts(cls, filename: str) -> bool:
        raise NotImplementedError

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        pin = cls(
            name=name,
            source=source,
            url=t.string("url", kind=HTTPS_URL),
            version=t.string("version", kind=VERSION),
            sha256=t.optional_string("sha256", kind=SHA256),
            size=t.integer("size", default=0),
            fingerprint=t.optional_string("fingerprint", kind=FINGERPRINT),
        )
        if pin.size < 0:
            msg = f"{t.where}: 'size' = {pin.size} is negative; clear it and run `imagebuild lock`"
            raise ConfigError(msg)
        if FILE_NAME.problem(pin.filename) or not cls._accepts(pin.filename):
            msg = f"{t.where}: 'url' ends in {shown(pin.filename)}, not {cls.expected_name}"
            raise ConfigError(msg)
        return pin

    @property
    def tracked(self) -> str:
        return f"url of {self.version}"

    # drift: other bytes under a recorded URL are always "moved" (the default).

    @property
    def filename(self) -> str:
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1])

    def build_args(self) -> dict[str, str]:
        p, word = self.arg_prefix, self.arg_word
        return {
            f"{p}_{word}_URL": self.url,
            f"{p}_{word}_FILE": self.filename,
            f"{p}_{word}_SHA256": self.sha256 or "",
            f"{p}_VERSION": self.version,
        }

    @property
    def source_url(self) -> str:
        return self.url


@dataclass(frozen=True, kw_only=True)
class WheelPin(UrlFilePin):
    kind: ClassVar[PinKind] = PinKind.WHEEL
    arg_word: ClassVar[str] = "WHEEL"
    # pip reads the wheel's tags from its name: a plain wheel file name
    expected_name: ClassVar[str] = "a wheel file name (NAME-VERSION-TAGS.whl)"

    @classmethod
    def _accepts(cls, filename: str) -> bool:
        return filename.endswith(".whl")

    def describe(self) -> PinDescription:
        return self._describe_file(
            canonicalize_name(self.filename.split("-", 1)[0]),
            qualifiers=(("file_name", self.filename), ("download_url", self.url)),
            links=(("distribution", self.url),),
            uri=self.url,
        )


@dataclass(frozen=True, kw_only=True)
class PypiPin(FilePin):
    kind: ClassVar[PinKind] = PinKind.PYPI
    needs_target_python: ClassVar[bool] = True
    keys: ClassVar[tuple[str, ...]] = ("project", "version", "index", "filename", "sha256", "fingerprint")
    identity_keys: ClassVar[tuple[str, ...]] = ("filename", "sha256")
    declared_keys: ClassVar[tuple[str, ...]] = ("project", "version", "index")

    project: str
    index: str
    filename: str | None

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
            fingerprint=t.optional_string("fingerprint", kind=FINGERPRINT),
        )

    @property
    def tracked(self) -> str:
        return f"{self.project}=={self.version}"

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
        project = canonicalize_name(self.project)
        index = (("repository_url", self.index),) if self.index != PYPI_SIMPLE else ()
        return self._describe_file(
            project, qualifiers=(("file_name", self.filename or ""), *index), python_project=project
        )


# The archive endings a source tarball pin accepts: what `tar -xf` unpacks without an option.
TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar")


@dataclass(frozen=True, kw_only=True)
class TarballPin(UrlFilePin):
    """A source archive at a URL (googletest's release tarball): like a wheel, but no python package.

    The SBOM names it by its URL (pkg:generic with download_url and checksum): it has no registry.
    """

    kind: ClassVar[PinKind] = PinKind.TARBALL
    arg_word: ClassVar[str] = "TARBALL"
    expected_name: ClassVar[str] = f"a source archive ({', '.join(TARBALL_SUFFIXES)})"

    @classmethod
    def _accepts(cls, filename: str) -> bool:
        return filename.endswith(TARBALL_SUFFIXES)

    def describe(self) -> PinDescription:
        sha256 = self.require_identity()
        return PinDescription(
            role="library",
            name=self.name,
            version=self.version,
            purl=PackageUrl(
                type="generic",
                name=self.name,
                version=self.version,
                qualifiers=(("download_url", self.url), ("checksum", f"sha256:{sha256}")),
            ),
            hashes=(("sha256", sha256),),
            links=(("distribution", self.url),),
            uri=self.url,
            digest=(("sha256", sha256),),
        )
