"""``imagebuild lock`` for the Python packages that are not sources: pylock.toml.

Inputs are declared, not coded: each step's ``python_packages``, and
``[python] build_requires / guard_requires`` in stages/image.toml. A
requirement naming a PyPI pin's project (``flydsl``) takes the pin's version,
so the lock locks the pin's dependencies and cannot disagree with it. The
target is the base pin's python on manylinux for the arch profile's machine;
the index is the one the pins file's PyPI pins use (one per pins file).

Policy, as for the pins (plan.py): conservative. The previous lock is uv's
preference, so every version that still satisfies the stages stays; versions
move only when the stages ask for it or ``--upgrade`` / ``--upgrade-pin NAME``
does. A locked wheel whose bytes changed on the index under the same name is
MOVED: kept as recorded (the file stays stale, ``--check`` fails) until an
upgrade of that package accepts it.

Its result (PythonLockResult, PackageChange) has the pins lock's shape: report.py.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagebuild.errors import ConfigError, LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.python_lock import LockedPackage, PythonLock, read_python_lock, render_python_lock
from imagebuild.inputs.stage_model import ImageDefinition
from imagebuild.lock.checks import require_target_python
from imagebuild.lock.report import Mode, PackageChange, PackageStatus, PythonLockResult
from imagebuild.lock.uv import Resolver, ResolveRequest
from imagebuild.pins import PinSet, PypiPin
from imagebuild.util.files import write_atomically

PYPI = "https://pypi.org/simple/"


@dataclass(frozen=True, kw_only=True)
class PythonLockOptions:
    lock_path: Path
    definition: ImageDefinition
    pins: PinSet
    arch: ArchProfile
    constraints: str
    upgrade: bool = False
    upgrade_packages: tuple[str, ...] = ()
    mode: Mode = "write"
    offline: bool = False  # resolve nothing: check pylock.toml against the stages alone
    timeout: float = 120.0


def declared_groups(definition: ImageDefinition, pins: PinSet) -> dict[str, tuple[str, ...]]:
    """Group -> requirements, with a PyPI pin's project taking the pin's exact version."""
    pinned = {canonicalize_name(p.project): p for p in pins if isinstance(p, PypiPin)}
    groups: dict[str, tuple[str, ...]] = {}
    for group, requirements in definition.lock_groups().items():
        resolved = []
        for declared in requirements:
            req = Requirement(declared)
            pin = pinned.get(canonicalize_name(req.name))
            if pin is not None:
                if req.specifier:
                    msg = (
                        f"{_where(definition, group)}: '{declared}' gives a version, but {req.name}'s version "
                        f"comes from its pin [{pin.name}] in {pins.path}; write '{req.name}'"
                    )
                    raise ConfigError(msg)
                extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
                resolved.append(f"{req.name}{extras}=={pin.version}")
            else:
                resolved.append(declared)
        groups[group] = tuple(resolved)
    return groups


def _where(definition: ImageDefinition, group: str) -> str:
    step = next((s for s in definition.steps if s.lock_group == group), None)
    return str(step.source) if step else f"{definition.spec.source} [python]"


def lock_index(pins: PinSet) -> str:
    """The index of the pins file's PyPI pins (PyPI when it has none); one index per pins file."""
    indexes = sorted({p.index for p in pins if isinstance(p, PypiPin)})
    if len(indexes) > 1:
        msg = f"{pins.path}: PyPI pins use several indexes ({', '.join(indexes)}); the python lock resolves from one, so use one"
        raise ConfigError(msg)
    return indexes[0] if indexes else PYPI


def check_upgrade_names(
    names: tuple[str, ...], previous: PythonLock | None, declared: Collection[str]
) -> None:
    known = set(previous.names() if previous else ()) | set(declared)
    for name in names:
        if canonicalize_name(name) not in known:
            from imagebuild.inputs.schema import suggest

            msg = f"--upgrade-pin {name}: neither a pin nor a locked python package.{suggest(name, known)}"
            raise ConfigError(msg)


def check_python_options(options: PythonLockOptions) -> None:
    """Everything about the arguments that can be checked without the index."""
    groups = declared_groups(options.definition, options.pins)
    declared = {canonicalize_name(Requirement(r).name) for reqs in groups.values() for r in reqs}
    check_upgrade_names(options.upgrade_packages, read_python_lock(options.lock_path), declared)
    lock_index(options.pins)
    require_target_python(options.pins, options.definition.base_pin)


def lock_python(options: PythonLockOptions, resolver: Resolver) -> PythonLockResult:
    check_python_options(options)
    path = options.lock_path
    previous = read_python_lock(path)
    original = path.read_bytes() if previous is not None else None
    groups = declared_groups(options.definition, options.pins)
    upgrading = {canonicalize_name(n) for n in options.upgrade_packages}
    request = ResolveRequest(
        groups=groups,
        constraints=options.constraints,
        index=lock_index(options.pins),
        python=require_target_python(options.pins, options.definition.base_pin),
        machine=options.arch.machine,
        previous=previous,
        upgrade=options.upgrade,
        upgrade_packages=tuple(sorted(upgrading)),
        timeout=options.timeout,
    )
    if options.offline:
        return _check_offline(path, previous, request, options.mode)
    resolution = resolver.resolve(request)
    _check_pins_agree(resolution.packages, options.pins)
    changes, packages = _judge(previous, resolution.packages, options.upgrade, upgrading)
    lock = PythonLock(
        index=request.index,
        python=request.python,
        platform=request.platform,
        # Keep the recorded resolver when nothing else changed: a uv upgrade alone is no lock change.
        resolver=previous.resolver
        if previous is not None and previous.packages == packages
        else resolution.resolver,
        groups=tuple(sorted(groups)),
        packages=packages,
    )
    text = render_python_lock(lock)
    differs = original is None or text.encode("utf-8") != original
    wrote = False
    if options.mode == "write" and differs:
        current = path.read_bytes() if path.exists() else None
        if current != original:
            msg = f"{path} changed on disk while locking; nothing written. Run `imagebuild lock` again"
            raise LockError(msg)
        write_atomically(path, text)
        wrote = True
    kept = any(c.pending and not c.applied for c in changes)
    stale = kept or (differs and not wrote)
    return PythonLockResult(
        path=path, changes=changes, wrote=wrote, stale=stale, mode=options.mode, would_write=differs
    )


def _check_offline(
    path: Path, previous: PythonLock | None, request: ResolveRequest, mode: Mode
) -> PythonLockResult:
    """pylock.toml checked against the stages without the index (--offline): what it must hold.

    Its target (index, python, platform) and groups must be the request's, and every declared
    requirement must be locked in its group at a version it allows. Whether uv would pick other
    dependencies cannot be known offline; a plain `imagebuild lock` answers that.
    """
    if previous is None:
        problems = [f"{path} is missing: run `imagebuild lock` (offline, nothing can be resolved)"]
        return PythonLockResult(
            path=path,
            changes=(),
            wrote=False,
            stale=True,
            mode=mode,
            offline=True,
            problems=tuple(problems),
            would_write=True,
        )
    problems = [
        f"{path} [tool.imagebuild] {key} is {recorded!r}, the stages and pins ask for {wanted!r}"
        for key, recorded, wanted in (
            ("index", previous.index, request.index),
            ("python", previous.python, request.python),
            ("platform", previous.platform, request.platform),
        )
        if recorded != wanted
    ]
    if tuple(sorted(request.groups)) != previous.groups:
        problems.append(
            f"{path} locks the groups {', '.join(previous.groups)}; the stages declare "
            f"{', '.join(sorted(request.groups))}"
        )
    for group, requirements in sorted(request.groups.items()):
        for declared in requirements:
            req = Requirement(declared)
            locked = previous.get(req.name)
            if locked is None or group not in locked.groups:
                problems.append(f"{path}: {group} needs {declared}, which it does not lock for that group")
            elif not req.specifier.contains(locked.version, prereleases=True):
                problems.append(
                    f"{path}: {group} needs {declared}, but {locked.name} is locked at {locked.version}"
                )
    changes = tuple(
        PackageChange(
            name=p.name, old=_label(p), new=_label(p), status="unchanged", applied=False, groups=p.groups
        )
        for p in previous.packages
    )
    return PythonLockResult(
        path=path,
        changes=changes,
        wrote=False,
        stale=bool(problems),
        mode=mode,
        offline=True,
        problems=tuple(problems),
        would_write=bool(problems),
    )


def _check_pins_agree(packages: tuple[LockedPackage, ...], pins: PinSet) -> None:
    """A pinned project the lock also resolved must be the very file the pin names."""
    for pin in pins:
        if not isinstance(pin, PypiPin) or pin.sha256 is None:
            continue
        locked = next((p for p in packages if p.name == canonicalize_name(pin.project)), None)
        if locked is not None and (locked.filename, locked.sha256) != (pin.filename, pin.sha256):
            msg = (
                f"{pins.path} [{pin.name}] names {pin.filename} ({pin.sha256[:12]}) but the python lock "
                f"resolved {locked.filename} ({locked.sha256[:12]}) for the target; relock the pin with "
                f"`imagebuild lock --upgrade-pin {pin.name}`"
            )
            raise LockError(msg)


_NONE = LockedPackage(name="", version="", groups=(), filename="", url="", size=None, sha256="")


def _label(p: LockedPackage | None) -> str | None:
    return f"{p.version} ({p.sha256[:12]})" if p else None


def _judge(
    previous: PythonLock | None,
    resolved: tuple[LockedPackage, ...],
    upgrade_all: bool,
    upgrading: Collection[str],
) -> tuple[tuple[PackageChange, ...], tuple[LockedPackage, ...]]:
    """Each package's change, and the packages to record (a MOVED wheel stays until accepted)."""
    old = {p.name: p for p in previous.packages} if previous else {}
    new = {p.name: p for p in resolved}
    changes: list[PackageChange] = []
    keep: list[LockedPackage] = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name), new.get(name)
        status: PackageStatus
        if before is None:
            status = "added"
        elif after is None:
            status = "removed"
        elif (before.version, before.filename) != (after.version, after.filename):
            status = "updated"
        elif before.sha256 != after.sha256:
            status = "moved"
        elif before.groups != after.groups:
            status = "regrouped"
        else:
            status = "unchanged"
        applied = status != "moved" or upgrade_all or name in upgrading
        record = after if applied else before
        if record is not None:
            if not applied and after is not None and before is not None:
                record = replace(before, groups=after.groups)
            keep.append(record)
        changes.append(
            PackageChange(
                name=name,
                old=_label(before),
                new=_label(after),
                status=status,
                applied=applied and status != "unchanged",
                groups=(after or before or _NONE).groups,
            )
        )
    return tuple(changes), tuple(keep)
