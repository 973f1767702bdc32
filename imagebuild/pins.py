"""pins.toml: every source of the image, as typed, validated pins.

A pin records what a human tracks (a tag, a branch, a version, a URL) beside
the immutable identity the build uses (a commit SHA, an image digest, a file's
sha256). Only this module reads or writes pins.toml; everything else sees the
frozen dataclasses below. Writing (for ``imagebuild lock``) goes through
tomlkit so comments, order and formatting survive, and is atomic.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

import tomlkit

from imagebuild.errors import ConfigError, UnpinnedError
from imagebuild.schema import Table, read_toml, suggest

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
PIN_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class PinKind(StrEnum):
    IMAGE = "image"
    GIT = "git"
    WHEEL = "wheel"
    PYPI = "pypi"
    TOOLCHAIN = "toolchain"


@dataclass(frozen=True, kw_only=True)
class Pin:
    """Common part of every pin. ``identity`` is None until locked."""

    kind: ClassVar[PinKind]
    # Keys an identity is stored under; lock writes only these.
    identity_keys: ClassVar[tuple[str, ...]]

    name: str
    source: Path = field(compare=False, repr=False)

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

    def build_args(self) -> dict[str, str]:
        """The Docker ARGs this pin provides; unlocked identities are empty."""
        raise NotImplementedError

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
    identity_keys: ClassVar[tuple[str, ...]] = ("digest", "platform_digest")

    image: str
    tag: str
    digest: str | None
    platform_digest: str | None
    python: str
    site_packages: str

    @property
    def identity(self) -> str | None:
        return self.digest

    @property
    def tracked(self) -> str:
        return f"tag {self.tag}"

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
    identity_keys: ClassVar[tuple[str, ...]] = ("commit",)

    url: str
    tag: str | None
    branch: str | None
    commit: str | None

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

    def build_args(self) -> dict[str, str]:
        p = self.arg_prefix
        return {f"{p}_REPO": self.url, f"{p}_COMMIT": self.commit or ""}


@dataclass(frozen=True, kw_only=True)
class WheelPin(Pin):
    kind: ClassVar[PinKind] = PinKind.WHEEL
    identity_keys: ClassVar[tuple[str, ...]] = ("sha256", "size")

    url: str
    version: str
    sha256: str | None
    size: int

    @property
    def identity(self) -> str | None:
        return self.sha256

    @property
    def tracked(self) -> str:
        return f"url of {self.version}"

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
    identity_keys: ClassVar[tuple[str, ...]] = ("filename", "sha256")

    project: str
    version: str
    index: str
    filename: str | None
    sha256: str | None

    @property
    def identity(self) -> str | None:
        return self.sha256

    @property
    def tracked(self) -> str:
        return f"{self.project}=={self.version}"

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
    identity_keys: ClassVar[tuple[str, ...]] = ()

    version: str

    @property
    def identity(self) -> str | None:
        # An exact toolchain version is its own identity: rustup verifies
        # the channel's signed manifest for that version.
        return self.version

    @property
    def tracked(self) -> str:
        return f"version {self.version}"

    def build_args(self) -> dict[str, str]:
        return {f"{self.arg_prefix}_VERSION": self.version}


_COMMON_KEYS = ("kind",)
_KEYS: dict[PinKind, tuple[str, ...]] = {
    PinKind.IMAGE: ("image", "tag", "digest", "platform_digest", "python", "site_packages"),
    PinKind.GIT: ("url", "tag", "branch", "commit"),
    PinKind.WHEEL: ("url", "version", "sha256", "size"),
    PinKind.PYPI: ("project", "version", "index", "filename", "sha256"),
    PinKind.TOOLCHAIN: ("version",),
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


def _parse_pin(name: str, t: Table, source: Path) -> Pin:
    kinds = [k.value for k in PinKind]
    kind_text = t.string("kind")
    if kind_text not in kinds:
        msg = f"{t.where}: unknown kind '{kind_text}'.{suggest(kind_text, kinds)} Known kinds: {', '.join(kinds)}"
        raise ConfigError(msg)
    kind = PinKind(kind_text)
    t.check_keys(_COMMON_KEYS + _KEYS[kind])
    common: dict[str, Any] = {"name": name, "source": source}
    if kind is PinKind.IMAGE:
        return ImagePin(
            **common,
            image=t.string("image"),
            tag=t.string("tag"),
            digest=_identity(t, "digest", DIGEST_RE, "'sha256:' + 64 hex digest"),
            platform_digest=_identity(t, "platform_digest", DIGEST_RE, "'sha256:' + 64 hex digest"),
            python=t.string("python"),
            site_packages=t.string("site_packages"),
        )
    if kind is PinKind.GIT:
        tag, branch = t.optional_string("tag"), t.optional_string("branch")
        if tag and branch:
            msg = f"{t.where}: set either 'tag' or 'branch', not both"
            raise ConfigError(msg)
        return GitPin(
            **common,
            url=t.string("url"),
            tag=tag,
            branch=branch,
            commit=_identity(t, "commit", COMMIT_RE, "40-hex commit SHA"),
        )
    if kind is PinKind.WHEEL:
        return WheelPin(
            **common,
            url=t.string("url"),
            version=t.string("version"),
            sha256=_identity(t, "sha256", SHA256_RE, "64-hex sha256"),
            size=t.integer("size", default=0),
        )
    if kind is PinKind.PYPI:
        return PypiPin(
            **common,
            project=t.string("project"),
            version=t.string("version"),
            index=t.string("index"),
            filename=t.optional_string("filename") or None,
            sha256=_identity(t, "sha256", SHA256_RE, "64-hex sha256"),
        )
    return ToolchainPin(**common, version=t.string("version"))


@dataclass(frozen=True)
class PinSet:
    """All pins of one pins file, in file order."""

    path: Path
    pins: tuple[Pin, ...]

    def __iter__(self) -> Iterator[Pin]:
        return iter(self.pins)

    def names(self) -> list[str]:
        return [p.name for p in self.pins]

    def get(self, name: str) -> Pin:
        for pin in self.pins:
            if pin.name == name:
                return pin
        msg = f"{self.path}: no pin named '{name}'.{suggest(name, self.names())} Pins: {', '.join(self.names())}"
        raise ConfigError(msg)

    def image(self, name: str) -> ImagePin:
        pin = self.get(name)
        if not isinstance(pin, ImagePin):
            msg = f'{self.path}: [{name}] must be kind = "image", is "{pin.kind}"'
            raise ConfigError(msg)
        return pin

    def build_args(self) -> dict[str, str]:
        """Every pin's ARGs; ARG names are unique across pins by construction."""
        args: dict[str, str] = {}
        for pin in self.pins:
            args.update(pin.build_args())
        return args

    def arg_owner(self) -> dict[str, Pin]:
        return {arg: pin for pin in self.pins for arg in pin.build_args()}


def load_pins(path: Path) -> PinSet:
    return parse_pins(read_toml(path), path)


def parse_pins(data: Mapping[str, Any], path: Path) -> PinSet:
    pins: list[Pin] = []
    for name, value in data.items():
        if not isinstance(value, dict):
            msg = f"{path}: top-level key '{name}' must be a table [{name}]"
            raise ConfigError(msg)
        if not PIN_NAME_RE.fullmatch(name):
            msg = f"{path}: pin name '{name}' must be lowercase letters, digits and '_'"
            raise ConfigError(msg)
        pins.append(_parse_pin(name, Table(value, f"{path} [{name}]"), path))
    return PinSet(path, tuple(pins))


# Writing -------------------------------------------------------------------

IdentityUpdate = Mapping[str, Mapping[str, str | int]]
"""pin name -> {identity key -> new value}."""


def render_updates(path: Path, updates: IdentityUpdate) -> str:
    """pins.toml's text with the identity fields in ``updates`` replaced.

    Only identity keys may change: what a human tracks is never rewritten.
    """
    pinset = load_pins(path)
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    for name, fields in updates.items():
        pin = pinset.get(name)
        for key, value in fields.items():
            if key not in pin.identity_keys:
                msg = f"{path}: [{name}] '{key}' is not an identity field of a {pin.kind} pin"
                raise ConfigError(msg)
            table = doc[name]
            assert isinstance(table, tomlkit.items.Table)
            table[key] = value
    text = tomlkit.dumps(doc)
    parse_pins(tomllib.loads(text), path)  # never write a file we could not read back
    return text
