"""``imagebuild lock`` for apt.lock.toml: step 4's packages, kept conservatively like the pins.

The lock is resolved again (apt_resolve.py, in a throw-away container of the base) only when
what it was resolved from changed: the apt pin's snapshot or the base's platform digest (a pins
lock moved them: ``-P apt``, ``-P base``), the step's ``apt_packages``, or the target's dpkg
architecture is missing; ``-U`` and ``-P apt`` resolve it again too. Otherwise the file is kept
byte for byte. Nothing is resolved while the apt pin's snapshot or the base's digest is empty
(the real base cannot be reached from this machine): the step then renders only under
``--allow-unpinned``, as any unlocked pin does. Modes other than a plain lock write nothing and
report the file stale when a plain lock would resolve it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from imagebuild.errors import ConfigError, LockError, UnknownImageError
from imagebuild.inputs.apt_lock import (
    AptArchitecture,
    AptLock,
    apt_lock_path_for,
    read_apt_lock,
    render_apt_lock,
)
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.debian import snapshot_time
from imagebuild.inputs.stage_model import ImageDefinition
from imagebuild.lock.apt_resolve import AptResolveError, AptResolveRequest, parse_resolution, resolve_script
from imagebuild.lock.report import Mode
from imagebuild.pins import AptPin, PinSet
from imagebuild.pins.apt import apt_pin, check_lock_agrees
from imagebuild.util.files import write_atomically

if TYPE_CHECKING:  # the engine is opened lazily, only when a resolution is needed
    from imagebuild.engine.interface import Engine


class AptResolver(Protocol):
    def resolve(self, request: AptResolveRequest) -> AptArchitecture: ...


class EngineAptResolver:
    """apt_resolve's script in a container of the base by digest, on the host network."""

    def __init__(self, open_engine: Callable[[], Any] | None = None) -> None:
        self._open_engine = open_engine

    def resolve(self, request: AptResolveRequest) -> AptArchitecture:
        if self._open_engine is None:
            from imagebuild.engine.docker import DockerEngine

            opened = DockerEngine.opened()
        else:
            opened = self._open_engine()
        with opened as engine:
            return self._in(engine, request)

    @staticmethod
    def _in(engine: Engine, request: AptResolveRequest) -> AptArchitecture:
        try:
            engine.inspect_image(request.image)
        except UnknownImageError:
            engine.pull(request.image)
        _code, output = engine.run(request.image, ["sh", "-c", resolve_script(request)], network_mode="host")
        return parse_resolution(output, request)


@dataclass(frozen=True, kw_only=True)
class AptLockResult:
    path: Path
    status: str  # kept, resolved, unchanged, stale, unlocked
    detail: str
    wrote: bool
    stale: bool

    def format_table(self) -> str:
        return f"{self.path.name}: {self.status} ({self.detail})"

    def to_json(self) -> dict[str, Any]:
        return {
            "apt_lock": str(self.path),
            "status": self.status,
            "detail": self.detail,
            "wrote": self.wrote,
            "stale": self.stale,
        }


def check_apt_snapshot(pins: PinSet, *, now: datetime | None = None) -> None:
    """A snapshot in the future names no archive state yet: refused before anything is asked."""
    for pin in pins:
        if (
            isinstance(pin, AptPin)
            and pin.snapshot
            and snapshot_time(pin.snapshot) > (now or datetime.now(UTC))
        ):
            msg = (
                f"{pins.path} [{pin.name}]: snapshot {pin.snapshot} is in the future; empty it and run "
                f"`imagebuild lock -P {pin.name}` for the newest snapshot"
            )
            raise ConfigError(msg)


def lock_apt(
    *,
    pins: PinSet,
    definition: ImageDefinition,
    arch: ArchProfile,
    upgrade: bool,
    mode: Mode,
    offline: bool,
    resolver: AptResolver,
) -> AptLockResult | None:
    """Resolve apt.lock.toml when what it was resolved from changed (module docstring); None: no apt step."""
    found = definition.apt_step()
    if found is None:
        return None
    step, command = found
    if command.pin not in pins.names():
        return None  # a pins file of a subset of the pins (render names the missing pin)
    pin = apt_pin(pins, command, step)
    path = apt_lock_path_for(pins.path)
    base = pins.image(definition.base_pin)
    if pin.snapshot is None or base.platform_digest is None:
        why = f"[{pin.name}] snapshot or [{base.name}] platform_digest is empty; lock them where the base is reachable"
        return AptLockResult(path=path, status="unlocked", detail=why, wrote=False, stale=False)
    current = read_apt_lock(path)
    try:
        check_lock_agrees(
            current,
            pin,
            pins_path=pins.path,
            architecture=arch.deb_architecture,
            base=base.platform_digest,
            requested=step.apt_packages,
        )
        agrees, why = True, ""
    except ConfigError as e:
        agrees, why = False, str(e)
    if agrees and not upgrade:
        return AptLockResult(
            path=path, status="kept", detail=f"snapshot {pin.snapshot}", wrote=False, stale=False
        )
    if mode != "write" or offline:
        detail = why or f"-U/-P {pin.name} would resolve it again"
        return AptLockResult(path=path, status="stale", detail=detail, wrote=False, stale=not agrees)
    request = AptResolveRequest(
        pin=pin,
        snapshot=pin.snapshot,
        image=f"{base.image}@{base.platform_digest}",
        base=base.platform_digest,
        requested=step.apt_packages,
    )
    try:
        entry = resolver.resolve(request)
    except (AptResolveError, ConfigError) as e:  # ConfigError: apt printed what Debian's grammar refuses
        msg = f"[{pin.name}] {e}; {pins.path.name} and {path.name} were left untouched"
        raise LockError(msg) from e
    if entry.architecture != arch.deb_architecture:
        msg = (
            f"[{pin.name}] the base {request.image} is {entry.architecture}, but --arch {arch.name} builds "
            f"{arch.deb_architecture}; lock the base's platform digest for {arch.deb_architecture}"
        )
        raise LockError(msg)
    same_snapshot = current is not None and (
        current.archive,
        current.suite,
        current.components,
        current.snapshot,
    ) == (
        pin.archive,
        pin.suite,
        pin.components,
        pin.snapshot,
    )
    new = (
        current.with_architecture(entry)
        if current is not None and same_snapshot
        else AptLock(
            archive=pin.archive,
            suite=pin.suite,
            components=pin.components,
            snapshot=pin.snapshot,
            architectures=(entry,),
        )
    )
    text = render_apt_lock(new)
    old = path.read_text() if current is not None else None
    if text == old:
        return AptLockResult(
            path=path, status="unchanged", detail=f"snapshot {pin.snapshot}", wrote=False, stale=False
        )
    write_atomically(path, text)
    detail = f"{len(entry.packages)} {arch.deb_architecture} package(s) from snapshot {pin.snapshot}"
    return AptLockResult(path=path, status="resolved", detail=detail, wrote=True, stale=False)
