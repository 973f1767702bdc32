"""The kinds of pin: one class per kind, with everything that differs between kinds.

A pin records what a human tracks (a tag, a branch, a version, a URL) beside
the immutable identity the build uses (a commit SHA, an image digest, a file's
sha256). Each kind's class says which keys its table in pins.toml has and how
they parse, which fields are its identity, which Docker ARGs it provides, when
``imagebuild lock`` asks its source again and what a changed identity means.
Adding a kind is adding a class here (and a resolver in lock/sources.py when it
has a remote source); ``tests/unit/test_pin_kinds.py`` checks both are there.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Literal, Self

from imagebuild.errors import ConfigError, UnpinnedError
from imagebuild.schema import Table, suggest

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class PinKind(StrEnum):
    IMAGE = "image"
    GIT = "git"
    WHEEL = "wheel"
    PYPI = "pypi"
    TOOLCHAIN = "toolchain"


class Refresh(StrEnum):
    """When ``imagebuild lock`` asks a pin's source again (the policy is in lock/plan.py)."""

    NEVER = "never"  # nothing can move: a bare commit, an exact toolchain version
    ALWAYS = "always"  # a tag or branch: one cheap request tells whether it moved
    WHEN_EMPTY = "when-empty"  # a download to hash: only when the identity is empty, or on upgrade


Drift = Literal["moved", "updated"]
"""What a recorded identity that differs from the source means: the tracked name now
names other bits (moved: a supply-chain signal), or it moved on as intended (updated)."""


@dataclass(frozen=True, kw_only=True)
class Pin:
    """Common part of every pin. ``identity`` is None until locked.

    Everything that differs between kinds of pin is defined on the kind's class:
    its keys in pins.toml and how they parse (``keys``, ``from_table``), its
    identity fields, its ARGs, when lock asks its source again (``refresh``) and
    what a changed identity means (``drift``). A new kind is a new subclass here,
    plus a resolver in lock/sources.py if it has a remote source.
    """

    kind: ClassVar[PinKind]
    keys: ClassVar[tuple[str, ...]]  # keys of its table in pins.toml, besides 'kind'
    # Keys an identity is stored under; lock writes only these.
    identity_keys: ClassVar[tuple[str, ...]]

    name: str
    source: Path = field(compare=False, repr=False)

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        raise NotImplementedError

    @property
    def arg_prefix(self) -> str:
        return self.name.upper()

    @property
    def identity(self) -> str | None:
        raise NotImplementedError

    @property
    def tracked(self) -> str:
        """What a human follows, e.g. 'tag v1.2.2'."""
        raise NotImplementedError

    @property
    def refresh(self) -> Refresh:
        raise NotImplementedError

    def drift(
        self, differs: Collection[str], old: Mapping[str, str | int], new: Mapping[str, str | int]
    ) -> Drift:
        """What it means that the identity fields ``differs`` changed from ``old`` to ``new``."""
        return "moved"

    def build_args(self) -> dict[str, str]:
        """The Docker ARGs this pin provides; unlocked identities are empty."""
        raise NotImplementedError

    def identity_fields(self) -> dict[str, str | int]:
        """The recorded identity fields; empty ones as '' (strings) or 0 (sizes)."""
        values = {key: getattr(self, key) for key in self.identity_keys}
        return {key: "" if value is None else value for key, value in values.items()}

    def require_identity(self) -> str:
        if self.identity is None:
            msg = (
                f"{self.source}: [{self.name}] ({self.tracked}) has no immutable "
                f"identity yet; run `imagebuild lock` to resolve it"
            )
            raise UnpinnedError(msg)
        return self.identity


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
            image=t.string("image"),
            tag=t.string("tag"),
            digest=_identity(t, "digest", DIGEST_RE, "'sha256:' + 64 hex digest"),
            platform_digest=_identity(t, "platform_digest", DIGEST_RE, "'sha256:' + 64 hex digest"),
            python=t.string("python"),
            site_packages=t.string("site_packages"),
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


@dataclass(frozen=True, kw_only=True)
class GitPin(Pin):
    kind: ClassVar[PinKind] = PinKind.GIT
    keys: ClassVar[tuple[str, ...]] = ("url", "tag", "branch", "commit")
    identity_keys: ClassVar[tuple[str, ...]] = ("commit",)

    url: str
    tag: str | None
    branch: str | None
    commit: str | None

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        tag, branch = t.optional_string("tag"), t.optional_string("branch")
        if tag and branch:
            msg = f"{t.where}: set either 'tag' or 'branch', not both"
            raise ConfigError(msg)
        return cls(
            name=name,
            source=source,
            url=t.string("url"),
            tag=tag,
            branch=branch,
            commit=_identity(t, "commit", COMMIT_RE, "40-hex commit SHA"),
        )

    @property
    def identity(self) -> str | None:
        return self.commit

    @property
    def tracked(self) -> str:
        if self.tag:
            return f"tag {self.tag}"
        if self.branch:
            return f"branch {self.branch}"
        return "commit"

    @property
    def refresh(self) -> Refresh:
        return Refresh.ALWAYS if self.tag or self.branch else Refresh.NEVER

    def drift(
        self, differs: Collection[str], old: Mapping[str, str | int], new: Mapping[str, str | int]
    ) -> Drift:
        # A tag is meant to stay put; a branch is meant to move on.
        return "moved" if self.tag else "updated"

    def build_args(self) -> dict[str, str]:
        p = self.arg_prefix
        return {f"{p}_REPO": self.url, f"{p}_COMMIT": self.commit or ""}


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
        return cls(
            name=name,
            source=source,
            url=t.string("url"),
            version=t.string("version"),
            sha256=_identity(t, "sha256", SHA256_RE, "64-hex sha256"),
            size=t.integer("size", default=0),
        )

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


@dataclass(frozen=True, kw_only=True)
class PypiPin(Pin):
    kind: ClassVar[PinKind] = PinKind.PYPI
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
            project=t.string("project"),
            version=t.string("version"),
            index=t.string("index"),
            filename=t.optional_string("filename") or None,
            sha256=_identity(t, "sha256", SHA256_RE, "64-hex sha256"),
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


@dataclass(frozen=True, kw_only=True)
class ToolchainPin(Pin):
    kind: ClassVar[PinKind] = PinKind.TOOLCHAIN
    keys: ClassVar[tuple[str, ...]] = ("version",)
    identity_keys: ClassVar[tuple[str, ...]] = ()

    version: str

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        return cls(name=name, source=source, version=t.string("version"))

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


PIN_TYPES: dict[PinKind, type[Pin]] = {
    cls.kind: cls for cls in (ImagePin, GitPin, WheelPin, PypiPin, ToolchainPin)
}


def _identity(t: Table, key: str, pattern: re.Pattern[str], example: str) -> str | None:
    """An identity field: empty means 'not locked yet', anything else must be well formed."""
    value = t.string(key, default="")
    if not value:
        return None
    if not pattern.fullmatch(value):
        msg = (
            f"{t.where}: '{key}' = {value!r} is not a valid {example}; "
            f"fix it or clear it and run `imagebuild lock`"
        )
        raise ConfigError(msg)
    return value


def parse_pin(name: str, t: Table, source: Path) -> Pin:
    kinds = [k.value for k in PinKind]
    kind_text = t.string("kind")
    if kind_text not in kinds:
        msg = f"{t.where}: unknown kind '{kind_text}'.{suggest(kind_text, kinds)} Known kinds: {', '.join(kinds)}"
        raise ConfigError(msg)
    pin_type = PIN_TYPES[PinKind(kind_text)]
    t.check_keys(("kind", *pin_type.keys))
    return pin_type.from_table(t, name=name, source=source)
