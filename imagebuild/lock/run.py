"""``imagebuild lock`` of a checkout: the pins lock, then the python lock, as one result.

The command line says what to lock (:class:`LockRequest`); this module loads
the checkout's inputs once, splits ``-P NAME`` between pins and python
packages, checks the python lock's arguments before the pins lock asks any
source, runs the pins lock (core.py) and hands its pins, as written, to the
python lock (python.py). The CLI prints the :class:`ProjectLockResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from imagebuild.errors import ConfigError
from imagebuild.inputs.apt_lock import apt_lock_path_for
from imagebuild.lock.apt_lock_file import (
    AptLockResult,
    AptResolver,
    EngineAptResolver,
    check_apt_snapshot,
    lock_apt,
)
from imagebuild.lock.core import LoadedPins, LockOptions, Progress, lock
from imagebuild.lock.outdated import OutdatedRow, format_outdated, outdated_rows
from imagebuild.lock.python import PythonLockOptions, check_python_options, lock_python
from imagebuild.lock.report import FileLockResult, LockResult, Mode, PythonLockResult
from imagebuild.lock.repository import OpenSources
from imagebuild.lock.sources import RemoteSources
from imagebuild.lock.uv import Resolver, UvResolver
from imagebuild.pins import PinSet
from imagebuild.project import Project
from imagebuild.util.files import write_atomically

Only = Literal["pins", "python"]


@dataclass(frozen=True, kw_only=True)
class LockRequest:
    """What to lock and how, as the command line asked for it."""

    arch: str
    jobs: int  # sources asked at once
    timeout: float  # seconds to connect, and between the bytes of an answer
    deadline: float  # seconds for the whole pins lock
    upgrade: bool = False  # re-resolve everything
    upgrade_names: tuple[str, ...] = ()  # pins or locked python packages to re-resolve (-P NAME)
    only: Only | None = None  # lock only pins.toml or only pylock.toml
    mode: Mode = "write"
    offline: bool = False  # ask no source, resolve nothing: only what pins.toml and pylock.toml hold


@dataclass(frozen=True, kw_only=True)
class ProjectLockResult:
    """Both locks' results; a part is None when ``--only`` left its file out."""

    pins: LockResult | None
    python: PythonLockResult | None
    apt: AptLockResult | None = None

    @property
    def parts(self) -> tuple[FileLockResult[Any], ...]:
        return tuple(part for part in (self.pins, self.python) if part is not None)

    @property
    def diff(self) -> str:
        """The unified diff of pins.toml (the python lock's changes are listed in its table)."""
        return self.pins.diff if self.pins is not None else ""

    @property
    def stale_paths(self) -> tuple[Path, ...]:
        """The files left stale or incomplete (what ``--check`` fails on)."""
        apt = (self.apt.path,) if self.apt is not None and self.apt.stale else ()
        return tuple(part.path for part in self.parts if part.stale) + apt

    def would_change(self) -> tuple[str, ...]:
        """One line per pin or package a plain `imagebuild lock` would write (what --locked fails on)."""
        return tuple(f"{part.path.name}: {line}" for part in self.parts for line in part.would_change())

    @property
    def outdated(self) -> list[OutdatedRow]:
        return outdated_rows(self.pins, self.python)

    def format_tables(self) -> str:
        if self.mode == "outdated":
            return format_outdated(self.outdated)
        apt = [self.apt.format_table()] if self.apt is not None else []
        return "\n\n".join([*(part.format_table() for part in self.parts), *apt]) + "\n"

    def to_json(self) -> dict[str, Any]:
        """The pins lock's keys at the top, the python lock's under "python"; --outdated adds its rows."""
        data: dict[str, Any] = self.pins.to_json() if self.pins is not None else {}
        if self.python is not None:
            data["python"] = self.python.to_json()
        if self.apt is not None:
            data["apt"] = self.apt.to_json()
        if self.mode == "outdated":
            data["outdated"] = [row.to_json() for row in self.outdated]
        return data

    @property
    def mode(self) -> Mode:
        return self.parts[0].mode if self.parts else "write"


def lock_project(
    project: Project,
    request: LockRequest,
    *,
    resolver: Resolver | None = None,
    progress: Progress | None = None,
    verbose: Progress | None = None,
    open_sources: OpenSources = RemoteSources,
    apt_resolver: AptResolver | None = None,
) -> ProjectLockResult:
    """Lock the checkout's pins file and the python lock beside it, as ``request`` says.

    ``resolver`` resolves the python packages (uv unless a test gives a fake);
    ``open_sources`` opens the pins' sources (the real ones unless a test gives a fake);
    ``apt_resolver`` resolves step 4's packages (in a container of the base unless a test gives a fake).
    The apt lock is resolved after the pins (it needs their snapshot and base digest) and before
    the python lock; when either fails, the files written before it are put back as they were.
    """
    check_request(request)
    source = _read_before_parse(project.pins_path)
    inputs = project.load(request.arch)
    pin_names = set(inputs.pins.names())
    only_pins = request.only == "pins"
    options = LockOptions(
        pins_path=project.pins_path,
        arch=inputs.arch,
        base_pin=inputs.definition.base_pin,
        upgrade=request.upgrade,
        # With --only pins every name must be a pin (the pins lock says which are not).
        upgrade_pins=tuple(n for n in request.upgrade_names if n in pin_names or only_pins),
        dry_run=request.mode == "dry-run",
        check=request.mode == "check",
        locked=request.mode == "locked",
        outdated=request.mode == "outdated",
        offline=request.offline,
        jobs=request.jobs,
        timeout=request.timeout,
        deadline=request.deadline,
    )
    python_options = PythonLockOptions(
        lock_path=project.python_lock_path,
        definition=inputs.all_steps,
        pins=inputs.all_pins,
        arch=inputs.arch,
        constraints=inputs.constraints,
        # --outdated asks uv what an upgrade would pick, and writes nothing.
        upgrade=request.upgrade or request.mode == "outdated",
        upgrade_packages=tuple(n for n in request.upgrade_names if n not in pin_names),
        mode=request.mode,
        offline=request.offline,
    )
    if not only_pins:
        check_python_options(python_options)  # before the pins lock asks any source
    check_apt_snapshot(inputs.pins)
    pins_result: LockResult | None = None
    apt_result: AptLockResult | None = None
    apt_path = apt_lock_path_for(project.pins_path)
    apt_before = apt_path.read_bytes() if apt_path.exists() else None
    try:
        if request.only != "python":
            loaded = LoadedPins(pins=inputs.pins, source=source) if source is not None else None
            pins_result = lock(options, progress, verbose, loaded=loaded, open_sources=open_sources)
            apt_names = {pin.name for pin in pins_result.pins if pin.kind == "apt"}
            apt_result = lock_apt(
                pins=pins_result.pins,
                definition=inputs.definition,
                arch=inputs.arch,
                upgrade=request.upgrade or any(name in apt_names for name in request.upgrade_names),
                mode=request.mode,
                offline=request.offline,
                resolver=apt_resolver or EngineAptResolver(),
            )
            # The python lock reads the base pin's python and the PyPI pins as pins.toml now holds them:
            # this arch's as the pins lock wrote them, the other arches' (untouched by it) as parsed.
            python_options = replace(python_options, pins=with_locked(inputs.all_pins, pins_result.pins))
        python_result = None if only_pins else lock_python(python_options, resolver or UvResolver())
    except BaseException:
        # One lock, three files: when the apt or the python lock fails (or the disk fills), the files
        # written before it are put back, so a failed lock leaves every file as it was.
        if pins_result is not None and pins_result.wrote and source is not None:
            _put_back(project.pins_path, source)
        if apt_result is not None and apt_result.wrote:
            _put_back(apt_path, apt_before)
        raise
    return ProjectLockResult(pins=pins_result, python=python_result, apt=apt_result)


def _put_back(path: Path, before: bytes | None) -> None:
    if before is None:
        path.unlink(missing_ok=True)
    else:
        write_atomically(path, before.decode("utf-8"))


def with_locked(every: PinSet, locked: PinSet) -> PinSet:
    """Every pin of the file, those of ``locked`` (one arch's, after its lock) as it holds them.

    The python lock is one file for every arch: a pin only another arch consumes (gfx942's
    [flydsl]) still says which version and index its group locks when one arch is locked.
    """
    by_name = {pin.name: pin for pin in locked}
    return PinSet(locked.path, tuple(by_name.get(pin.name, pin) for pin in every))


def check_request(request: LockRequest) -> None:
    """Flags that contradict each other, refused before anything is read (one line, exit 2).

    --offline asks nothing, so nothing that must ask (--outdated, an upgrade); --locked and
    --outdated judge what a plain lock does, so no upgrade. Two modes in one line argparse refuses.
    """
    upgrade = "-U/--upgrade" if request.upgrade else "-P/--upgrade-package" if request.upgrade_names else None
    pairs = [
        ("--offline", "--outdated", request.offline and request.mode == "outdated"),
        ("--offline", upgrade, request.offline and upgrade is not None),
        ("--locked", upgrade, request.mode == "locked" and upgrade is not None),
        ("--outdated", upgrade, request.mode == "outdated" and upgrade is not None),
    ]
    for first, second, clash in pairs:
        if clash:
            msg = f"lock: {first} and {second} contradict each other; drop one"
            raise ConfigError(msg)


def _read_before_parse(path: Path) -> bytes | None:
    """pins.toml's bytes, read just before project.load parses it (see LoadedPins).

    None for anything but a readable regular file (reading a FIFO would block):
    project.load reports it, and the pins lock then parses the file itself.
    """
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


__all__ = ["LockRequest", "ProjectLockResult", "check_request", "lock_project", "with_locked"]
