"""The ``apt`` pin: a distribution archive seen through its snapshot service, at one dated snapshot.

Step 4 installs OS packages; without a pin they are whatever the archive serves on the day of
the build, so a rebuild a year later gets other versions. Both distributions keep dated states
of their archive under one URL scheme, ``ARCHIVE/SNAPSHOT_ID/`` (``ARCHIVE/ID/dists/SUITE/...``):

* snapshot.debian.org: ``https://snapshot.debian.org/archive/debian/20091004T111800Z/``; an ID
  that is not an import time redirects to the import before it (the sample world's stand-in
  serves the same scheme on loopback);
* snapshot.ubuntu.com: ``https://snapshot.ubuntu.com/ubuntu/20240301T030400Z/``; any time after
  2023-03-01 is served as the archive was then (kept at least two years).

The pin records the snapshot ID; ``imagebuild lock`` fills it with the newest snapshot and keeps it
(``-P apt`` moves it; ``--outdated`` tells when a newer one exists). The exact package versions
the step installs from that snapshot are in apt.lock.toml (imagebuild.inputs.apt_lock), beside
pins.toml. ``signed_by`` is the archive key's path in the base image: apt verifies the snapshot's
Release signature with it, at lock time (the key read from the base by its digest) and in the build.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from imagebuild.errors import ConfigError
from imagebuild.inputs.apt_lock import AptArchitecture, AptLock, apt_lock_path_for, check_apt_lock
from imagebuild.inputs.debian import APT_COMPONENT, APT_SUITE, SNAPSHOT_ID
from imagebuild.inputs.schema import Table
from imagebuild.inputs.stage_model import AptInstall, Step
from imagebuild.inputs.values import ABSOLUTE_PATH, FINGERPRINT, HTTPS_URL
from imagebuild.pins.base import Drift, Pin, PinKind, Refresh
from imagebuild.pins.description import PackageUrl, PinDescription

if TYPE_CHECKING:  # pinset imports the pin kinds
    from imagebuild.pins.pinset import PinSet


@dataclass(frozen=True, kw_only=True)
class AptPin(Pin):
    kind: ClassVar[PinKind] = PinKind.APT
    keys: ClassVar[tuple[str, ...]] = (
        "archive",
        "suite",
        "components",
        "signed_by",
        "snapshot",
        "fingerprint",
    )
    identity_keys: ClassVar[tuple[str, ...]] = ("snapshot",)
    declared_keys: ClassVar[tuple[str, ...]] = ("archive", "suite", "components_text", "signed_by")

    archive: str  # the snapshot service's archive root, without the ID: https://snapshot.ubuntu.com/ubuntu
    suite: str
    components: tuple[str, ...]
    signed_by: str  # the archive key's path inside the base image
    snapshot: str | None

    @classmethod
    def from_table(cls, t: Table, *, name: str, source: Path) -> Self:
        components = tuple(t.strings("components", kind=APT_COMPONENT))
        if not components:
            msg = f"{t.where}: 'components' is empty; name the archive's components, e.g. [\"main\"]"
            raise ConfigError(msg)
        return cls(
            name=name,
            source=source,
            archive=t.string("archive", kind=HTTPS_URL).rstrip("/"),
            suite=t.string("suite", kind=APT_SUITE),
            components=components,
            signed_by=t.string("signed_by", kind=ABSOLUTE_PATH),
            snapshot=t.optional_string("snapshot", kind=SNAPSHOT_ID),
            fingerprint=t.optional_string("fingerprint", kind=FINGERPRINT),
        )

    @property
    def components_text(self) -> str:
        return " ".join(self.components)

    @property
    def identity(self) -> str | None:
        return self.snapshot

    @property
    def tracked(self) -> str:
        return f"snapshots of {self.suite}"

    @property
    def refresh(self) -> Refresh:
        # One snapshot is as good as the next: lock fills an empty one and moves it on -P/-U only.
        return Refresh.WHEN_EMPTY

    def drift(
        self, differs: Collection[str], old: Mapping[str, str | int], new: Mapping[str, str | int]
    ) -> Drift:
        return "updated"  # a newer snapshot is the archive moving on, as it is meant to

    def snapshot_url(self, snapshot: str | None = None) -> str:
        """ARCHIVE/ID/: the root apt's sources line names (the recorded snapshot by default)."""
        return f"{self.archive}/{snapshot or self.snapshot or ''}/"

    def build_args(self) -> dict[str, str]:
        return {f"{self.arg_prefix}_SNAPSHOT_URL": self.snapshot_url() if self.snapshot else ""}

    @property
    def source_url(self) -> str:
        return f"{self.archive}/"

    def describe(self) -> PinDescription:
        snapshot = self.require_identity()
        return PinDescription(
            role="application",
            name=f"{self.archive}/ {self.suite}",
            version=snapshot,
            purl=PackageUrl(
                type="generic",
                name=f"{self.name}-snapshot",
                version=snapshot,
                qualifiers=(("download_url", self.snapshot_url()), ("suite", self.suite)),
            ),
            links=(("distribution", self.snapshot_url()),),
            properties=(("suite", self.suite), ("components", self.components_text)),
            uri=self.snapshot_url(),
        )


def apt_pin(pins: PinSet, command: AptInstall, step: Step) -> AptPin:
    """The apt pin a step's { apt = PIN } command names (render and lock read the same one)."""
    pin = pins.get(command.pin)
    if not isinstance(pin, AptPin):
        msg = f"{step.source}: '{command.pin}' is a {pin.kind} pin; {{ apt = ... }} needs an apt pin"
        raise ConfigError(msg)
    return pin


def check_lock_agrees(
    lock: AptLock | None,
    pin: AptPin,
    *,
    pins_path: Path,
    architecture: str,
    base: str | None,
    requested: tuple[str, ...],
) -> AptArchitecture:
    """apt.lock.toml's entry for ``architecture`` if it was resolved from this pin as it is now
    (render and lock ask the same question; check_apt_lock says what disagrees, one line)."""
    snapshot = pin.require_identity()
    return check_apt_lock(
        lock,
        path=apt_lock_path_for(pins_path),
        pins_path=pins_path,
        pin_name=pin.name,
        archive=pin.archive,
        suite=pin.suite,
        components=pin.components,
        snapshot=snapshot,
        architecture=architecture,
        base=base,
        requested=requested,
    )
