"""What makes a project (a directory holding an image definition), and loading its inputs together.

A project is any directory with the files of :data:`PROJECT_FILES`: this repository's checkout is one,
and ``imagebuild init`` writes another (a team keeps its image definition in its own repository). It is
found by its marker, ``stages/image.toml``, in the working directory or above it, or given with ``-C``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from imagebuild.errors import ConfigError
from imagebuild.inputs.apt_lock import AptLock, apt_lock_path_for, read_apt_lock
from imagebuild.inputs.arch import ArchProfile, known_arches, load_arch
from imagebuild.inputs.layout import context_dir
from imagebuild.inputs.profile import apply_profile, check_profile_recipes
from imagebuild.inputs.python_lock import PythonLock, lock_path_for, read_python_lock
from imagebuild.inputs.schema import read_text_file
from imagebuild.inputs.stage_model import ImageDefinition
from imagebuild.inputs.stages import load_stages
from imagebuild.inputs.values import control_problem, shown
from imagebuild.launcher.recipes import recipes_dir as launcher_recipes_dir
from imagebuild.pins import PinSet, load_pins
from imagebuild.pins.arch_pins import pins_for_arch

# What render, lock and build read from a project, as the one-line error outside one names it.
PROJECT_MARKER = "stages/image.toml"
PROJECT_FILES: tuple[str, ...] = (
    PROJECT_MARKER,  # the image: its stages' order, args and tunables
    "stages/NN-*.toml",  # one file per step
    "stages/arch/ARCH.toml",  # the arch profiles (gfx942, gfx950)
    "constraints/*.txt",  # the build-toolchain constraint
    "pins.toml",  # every source, pinned by lock
    "pylock.toml",  # the stages' python packages, locked by lock
)
WHAT_MAKES_A_PROJECT = f"a project holds {', '.join(PROJECT_FILES)}"


@dataclass(frozen=True, kw_only=True)
class Project:
    """A directory holding an image definition: its inputs' paths (the pins file may be elsewhere)."""

    root: Path
    pins_path: Path

    @property
    def stages_dir(self) -> Path:
        return self.root / "stages"

    @property
    def arch_dir(self) -> Path:
        return self.stages_dir / "arch"

    @property
    def constraints_dir(self) -> Path:
        return self.root / "constraints"

    @property
    def docker_dir(self) -> Path:
        return self.root / "docker"

    @property
    def python_lock_path(self) -> Path:
        """pylock.toml beside the pins file: the sample pins have their own."""
        return lock_path_for(self.pins_path)

    @property
    def apt_lock_path(self) -> Path:
        """apt.lock.toml beside the pins file: the sample pins have their own."""
        return apt_lock_path_for(self.pins_path)

    @property
    def uses_checkout_pins(self) -> bool:
        """Whether the pins are the checkout's own pins.toml (what docker/ARCH/ is rendered from)."""
        return self.pins_path == (self.root / "pins.toml").resolve()

    def context_dir(self, arch: str) -> Path:
        """docker/ARCH/: the committed, self-contained build context."""
        return context_dir(self.root, arch)

    def load(self, arch: str) -> Inputs:
        """The inputs of ``arch``'s image: the stages and pins as its profile applies them."""
        stages = load_stages(self.stages_dir)
        profile = load_arch(self.arch_dir, arch)
        definition = apply_profile(stages, profile)
        every_pin = load_pins(self.pins_path)
        pins = pins_for_arch(every_pin, profile, known_arches(self.arch_dir))
        check_profile_recipes(profile, launcher_recipes_dir({}))
        return Inputs(
            definition=definition,
            pins=pins,
            arch=profile,
            constraints=read_constraints(self.constraints_dir),
            python_lock=read_python_lock(self.python_lock_path),
            apt_lock=read_apt_lock(self.apt_lock_path),
            stages=stages,
            every_pin=every_pin,
        )


@dataclass(frozen=True, kw_only=True)
class Inputs:
    definition: ImageDefinition
    pins: PinSet
    arch: ArchProfile
    constraints: str  # the text of /etc/pip-constraints.txt
    python_lock: PythonLock | None = None  # pylock.toml beside the pins file (None: not locked yet)
    apt_lock: AptLock | None = None  # apt.lock.toml beside the pins file (None: not locked yet)
    # stages/ before the arch profile left steps out, and the pins file before it kept the arch's
    # pins: the python lock (one pylock.toml) covers every arch's steps and their PyPI pins.
    stages: ImageDefinition | None = None
    every_pin: PinSet | None = None

    @property
    def all_steps(self) -> ImageDefinition:
        return self.stages or self.definition

    @property
    def all_pins(self) -> PinSet:
        return self.every_pin or self.pins

    @property
    def base_reference(self) -> str:
        """The base image as its pin names it (by digest once locked): the build's FROM."""
        return self.pins.image(self.definition.base_pin).reference


def find_project(start: Path, pins: Path | None = None, *, search_parents: bool = True) -> Project:
    """The project containing ``start``: the nearest directory with stages/image.toml.

    ``search_parents=False`` (``imagebuild -C DIR``): ``start`` itself or nothing. The error names what
    makes a project and the verb that makes one, for a user who installed imagebuild and has none yet.
    """
    for candidate in (start, *start.parents) if search_parents else (start,):
        if _holds_marker(candidate):
            return Project(root=candidate, pins_path=_absolute(pins or candidate / "pins.toml"))
    make_one = f"{WHAT_MAKES_A_PROJECT}; `imagebuild init DIR` writes one"
    if not search_parents:
        msg = f"-C {start}: not an imagebuild project (no {PROJECT_MARKER} in it); {make_one}"
        raise ConfigError(msg)
    msg = f"{start}: not inside an imagebuild project (no {PROJECT_MARKER} here or above); {make_one}, or cd into one or give it with -C DIR"
    raise ConfigError(msg)


def _holds_marker(candidate: Path) -> bool:
    """Whether ``candidate`` has the project marker; a directory on its way that cannot be searched
    (stages/ without x permission) is reported, not taken for "no project": its project is unusable."""
    marker = candidate / PROJECT_MARKER
    try:
        return marker.is_file()
    except OSError as e:
        msg = f"{marker.parent}: cannot be read ({e.strerror or e}); make {candidate} and its stages/ readable, or give another project with -C DIR"
        raise ConfigError(msg) from e


def _absolute(pins: Path) -> Path:
    try:
        return pins.resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop, on Python < 3.13
        msg = f"{pins}: cannot resolve the pins file's path ({e}); point --pins at a regular file"
        raise ConfigError(msg) from e


def read_constraints(constraints_dir: Path) -> str:
    """All constraints/*.txt, in name order, validated line by line."""
    files = sorted(constraints_dir.glob("*.txt")) if constraints_dir.is_dir() else []
    if not files:
        msg = f"{constraints_dir}: no *.txt constraint files; the build toolchain must be constrained (setuptools<80)"
        raise ConfigError(msg)
    parts: list[str] = []
    for path in files:
        text = read_text_file(path, "constraints file")
        for number, line in enumerate(text.split("\n"), 1):
            control = control_problem(re.sub(r"[\r\t]", " ", line))
            if control:
                msg = f"{path}:{number}: {shown(line)} {control}"
                raise ConfigError(msg)
            spec = line.split("#", 1)[0].strip()
            if not spec:
                continue
            try:
                Requirement(spec)
            except InvalidRequirement as e:
                msg = f"{path}:{number}: {shown(spec)} is not a valid requirement specifier ({str(e).splitlines()[0]})"
                raise ConfigError(msg) from e
        parts.append(f"# from constraints/{path.name}\n{text.rstrip()}\n")
    return "".join(parts)
