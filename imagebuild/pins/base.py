"""What every pin has, whatever its kind: the Pin base class, when lock asks again, what a change means.

The kinds themselves (one class each) are in kinds.py and files.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Literal, Self

from packaging.utils import canonicalize_name

from imagebuild.errors import UnpinnedError
from imagebuild.inputs.schema import Table
from imagebuild.pins.description import PinDescription

PYPI_SIMPLE = "https://pypi.org/simple/"


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
    # lock picks its file for the base image's python (wheel tags), so needs that python.
    needs_target_python: ClassVar[bool] = False

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

    @property
    def source_url(self) -> str:
        """Where lock asks for its identity, for messages."""
        return self.name

    @property
    def registry(self) -> str | None:
        """The image registry lock asks (with docker's credentials for it), if any."""
        return None

    def describe(self) -> PinDescription:
        """What the SBOM and the provenance say about it (UnpinnedError without an identity)."""
        raise NotImplementedError

    def identity_fields(self) -> dict[str, str | int]:
        """The recorded identity fields; empty ones as '' (strings) or 0 (sizes)."""
        values = {key: getattr(self, key) for key in self.identity_keys}
        return {key: "" if value is None else value for key, value in values.items()}

    @property
    def locked(self) -> bool:
        """Whether every identity field the build needs is recorded."""
        return self.identity is not None

    def require_identity(self) -> str:
        if self.identity is None:
            msg = (
                f"{self.source}: [{self.name}] ({self.tracked}) has no immutable "
                f"identity yet; run `imagebuild lock` to resolve it"
            )
            raise UnpinnedError(msg)
        return self.identity


def simple_project_url(index: str, project: str) -> str:
    """A project's page on a PEP 503 simple index."""
    return f"{index.rstrip('/')}/{canonicalize_name(project)}/"
