"""What every pin has, whatever its kind: the Pin base class, when lock asks again, what a change means.

The kinds themselves (one class each) are in kinds.py and files.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
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
    TARBALL = "tarball"
    PYPI = "pypi"
    TOOLCHAIN = "toolchain"
    APT = "apt"


class Refresh(StrEnum):
    """When ``imagebuild lock`` asks a pin's source again (the policy is in lock/plan.py)."""

    NEVER = "never"  # nothing can move: a bare commit, an exact toolchain version
    ALWAYS = "always"  # a tag or branch: one cheap request tells whether it moved
    WHEN_EMPTY = "when-empty"  # a download to hash: only when the identity is empty, or on upgrade


class LockState(StrEnum):
    """Whether a pin is as ``imagebuild lock`` wrote it, read offline from its ``fingerprint``."""

    MATCHES = "matches"  # lock wrote these declared keys and this identity together
    UNRECORDED = "unrecorded"  # no fingerprint: written by hand, or by a lock before fingerprints
    DECLARED_CHANGED = "declared-changed"  # what the pin tracks (url, tag, branch, version) was edited since
    IDENTITY_EDITED = "identity-edited"  # its identity (a commit, its time, a sha256) was edited since


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
    # The keys that say which bits a human asked for (a url, a tag, a version): a change of one
    # is the user's intent, so lock resolves the pin again from them without -P.
    declared_keys: ClassVar[tuple[str, ...]] = ()
    # Identity keys that are facts about the rest of the identity (a commit's time): a recorded
    # value that the source contradicts is a correction, never a moved tag.
    derived_keys: ClassVar[tuple[str, ...]] = ()
    # Identity keys that stay empty in a complete identity when the source has nothing for them
    # (a lightweight tag's or a branch's tag object).
    optional_keys: ClassVar[tuple[str, ...]] = ()

    name: str
    source: Path = field(compare=False, repr=False)
    # What lock wrote the pin from (FINGERPRINT); None in a pin it never wrote.
    fingerprint: str | None = None
    # The arch profiles whose images may consume the pin (e.g. one arch's donor); (): every arch's.
    arches: tuple[str, ...] = ()

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

    def fingerprint_for(self, identity: Mapping[str, str | int]) -> str:
        """The fingerprint lock records with ``identity``: a digest of the declared keys, '.', one of the identity.

        Two halves, so an edit is told apart offline: the first changes when what the pin
        tracks changed (lock re-resolves it without -P), the second when its identity was
        edited by hand (a commit whose recorded time is no longer its own). It guards against
        edits, not attackers: the identities themselves are checked by the build.
        """
        declared = {key: getattr(self, key) or "" for key in self.declared_keys}
        recorded = {key: identity.get(key) or "" for key in self.identity_keys}
        return f"{_digest({'kind': str(self.kind), **declared})}.{_digest(recorded)}"

    def with_fingerprint(self) -> Self:
        """This pin as lock writes it: its recorded identity, fingerprinted."""
        return replace(self, fingerprint=self.fingerprint_for(self.identity_fields()))

    @property
    def lock_state(self) -> LockState:
        if not self.fingerprint or not self.declared_keys:
            return LockState.UNRECORDED
        declared, _, identity = self.fingerprint_for(self.identity_fields()).partition(".")
        recorded_declared, _, recorded_identity = self.fingerprint.partition(".")
        if declared != recorded_declared:
            return LockState.DECLARED_CHANGED
        if identity != recorded_identity:
            return LockState.IDENTITY_EDITED
        return LockState.MATCHES

    @property
    def edited(self) -> bool:
        """Whether pins.toml was edited since lock wrote this pin (its fingerprint disagrees)."""
        return self.lock_state in (LockState.DECLARED_CHANGED, LockState.IDENTITY_EDITED)

    @property
    def locked(self) -> bool:
        """Whether every identity field the build needs is recorded, as lock wrote it."""
        return self.identity is not None and not self.edited

    def edit_problem(self) -> str:
        """What an edited pin's fingerprint says, for the one line render, build and lock --check print."""
        if self.lock_state is LockState.DECLARED_CHANGED:
            return f"pins.toml changed: {self.name} now tracks {self.tracked}"
        return f"{self.name}'s identity was edited by hand since `imagebuild lock` recorded it"

    def require_identity(self) -> str:
        if self.identity is None:
            msg = (
                f"{self.source}: [{self.name}] ({self.tracked}) has no immutable "
                f"identity yet; run `imagebuild lock` to resolve it"
            )
            raise UnpinnedError(msg)
        return self.identity


def _digest(values: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


def simple_project_url(index: str, project: str) -> str:
    """A project's page on a PEP 503 simple index."""
    return f"{index.rstrip('/')}/{canonicalize_name(project)}/"
