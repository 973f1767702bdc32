"""The image's steps as typed data: what ``imagebuild.inputs.stages`` loads from stages/.

Renderer, plan, lock and verify read these; only ``imagebuild.inputs.stages`` makes them,
after checking every key and command.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

# Dependency groups of the python lock that belong to no single step.
BUILD_GROUP = "build"  # build dependencies of isolated builds: exact versions in the build constraint
GUARD_GROUP = "guard"  # the setuptools the guard installs before a no-isolation build


class Instruction(StrEnum):
    FROM = "FROM"
    WORKDIR = "WORKDIR"
    COPY = "COPY"
    RUN = "RUN"


@dataclass(frozen=True, kw_only=True)
class Shell:
    """A plain shell command, chained with && to the others."""

    text: str


@dataclass(frozen=True, kw_only=True)
class Pip:
    """A pip invocation; the renderer applies the constraint mechanism that fits it.

    An install takes one of three sources: the step's ``python_packages`` from the python
    lock (``locked``), the wheel a ``fetch`` of this step downloaded (``fetched``: its pin),
    or local source trees named in ``args`` (built with the build constraint). Packages from
    an index by name are not allowed: they come from the lock, hash-checked.
    """

    args: str  # e.g. "install --no-deps ."
    build_isolation: bool | None  # None for subcommands that never build, and for wheel installs
    env: tuple[tuple[str, str], ...] = ()
    locked: bool = False  # install this step's python_packages as pylock.toml locks them
    fetched: str | None = None  # install the wheel this step fetched for this pin
    # Its compiles go through ccache to the compile cache's address (layout.COMPILE_CACHE_ENV, added
    # to ``env`` by the renderer); the same RUN removes CCACHE_DIR.
    compile_cache: bool = False

    @property
    def subcommand(self) -> str:
        return self.args.split()[0]


@dataclass(frozen=True, kw_only=True)
class GitCheckout:
    """Clone a git pin, check out its full SHA and verify HEAD equals it."""

    pin: str
    into: str
    submodules: bool = False
    blobless: bool = False


@dataclass(frozen=True, kw_only=True)
class FetchFile:
    """Download a wheel pin's URL and verify its sha256."""

    pin: str
    into: str


@dataclass(frozen=True, kw_only=True)
class PypiDownload:
    """Download a PyPI pin's file (no deps, binary only) and verify its sha256."""

    pin: str
    into: str


@dataclass(frozen=True, kw_only=True)
class AptInstall:
    """Install the step's ``apt_packages`` as apt.lock.toml locks them, from the apt pin's snapshot only.

    The renderer writes the snapshot's sources list (the base's own lists moved aside for the
    step and put back), installs exactly the locked ``name=version`` set and fails when apt would
    install anything else; the names are data (the step's ``apt_packages``), never a shell string.
    """

    pin: str


Command = Shell | Pip | GitCheckout | FetchFile | PypiDownload | AptInstall


@dataclass(frozen=True, kw_only=True)
class OptionalLayer:
    """A RUN step built only when a tunable is not "0": ``enabled`` then, else ``disabled``."""

    arg: str  # a tunable of stages/image.toml [args], e.g. WITH_NIXL
    enabled: tuple[Command, ...]
    disabled: tuple[Command, ...]


@dataclass(frozen=True, kw_only=True)
class Step:
    number: int
    slug: str
    source: Path
    title: str
    why: str
    instruction: Instruction
    env: tuple[tuple[str, str], ...] = ()  # ENV set just before the instruction
    env_after: tuple[tuple[str, str], ...] = ()  # ENV set just after it
    image: str | None = None  # FROM: the pin
    path: str | None = None  # WORKDIR
    src: str | None = None  # COPY
    dest: str | None = None  # COPY
    from_pin: str | None = None  # COPY --from the stage of this pin
    commands: tuple[Command, ...] = ()  # RUN
    python_packages: tuple[str, ...] = ()  # requirements this step installs from the python lock
    apt_packages: tuple[str, ...] = ()  # OS packages this step installs from the apt lock
    # An optional layer (step 10's NIXL): the tunable that turns it on, and both command lists;
    # ``commands`` is the one the tunable's value selects (imagebuild.inputs.layers).
    layer: OptionalLayer | None = None

    @property
    def label(self) -> str:
        return f"step {self.number} ({self.source.name})"

    @property
    def lock_group(self) -> str:
        """This step's dependency group in the python lock, e.g. '04-mori': its file's, whatever
        number an arch profile that leaves steps out gives it."""
        return self.source.stem


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    """stages/image.toml."""

    source: Path
    donor_stage: str
    donor_pin: str | None  # None: no donor stage (an arch profile's donor = "")
    entrypoint: tuple[str, ...]
    shell: tuple[str, ...]
    base_env: tuple[str, ...]
    args: tuple[tuple[str, str], ...]  # build tunables and their defaults
    build_requires: tuple[str, ...] = ()  # build dependencies of pip's isolated builds
    guard_requires: tuple[str, ...] = ()  # what the setuptools guard may install


@dataclass(frozen=True, kw_only=True)
class ImageDefinition:
    spec: ImageSpec
    steps: tuple[Step, ...]

    @property
    def base_pin(self) -> str:
        """The image pin of the final stage's FROM (step 1)."""
        image = self.steps[0].image
        assert image is not None, "load_stages makes step 1 a FROM of a pin"
        return image

    def apt_step(self) -> tuple[Step, AptInstall] | None:
        """The one step that installs OS packages from the apt lock, and its command (None: none does)."""
        for step in self.steps:
            for command in step.commands:
                if isinstance(command, AptInstall):
                    return step, command
        return None

    def lock_groups(self) -> dict[str, tuple[str, ...]]:
        """Dependency group of the python lock -> the requirements declared for it, in file order."""
        groups = {s.lock_group: s.python_packages for s in self.steps if s.python_packages}
        groups[BUILD_GROUP] = self.spec.build_requires
        groups[GUARD_GROUP] = self.spec.guard_requires
        return {name: reqs for name, reqs in groups.items() if reqs}
