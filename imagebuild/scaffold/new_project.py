"""``imagebuild init``: write a project from a definition imagebuild ships, ready to lock.

The definition is package data (``definitions/NAME/``), read through the installed package, so an
``imagebuild`` installed by pip, pipx or uv writes the same files a checkout would, wherever it runs.
Plan, then write: every refusal (a non-empty directory without ``--force``, a file where a directory
must go) is found before the first byte is written, and the files are written all or none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.project import PROJECT_MARKER
from imagebuild.scaffold.ci import ci_file
from imagebuild.util.files import write_all_or_none

DEFINITIONS = Path(__file__).resolve().parent / "definitions"
DEFAULT_DEFINITION = "kimi-k3-gfx942"
# A directory holding only these is empty for init: a team's fresh `git init` or clone of an empty repo.
IGNORED_ENTRIES = frozenset({".git"})
FILE_MODE = 0o644


@dataclass(frozen=True, kw_only=True)
class DefinitionFile:
    """One file of a shipped definition: its path inside the project, and its bytes."""

    path: str  # relative, with '/' (stages/04-mori.toml)
    data: bytes


@dataclass(frozen=True, kw_only=True)
class InitOptions:
    directory: Path
    definition: str = DEFAULT_DEFINITION
    force: bool = False  # overwrite the files of the definition that the directory already has
    ci: str | None = None  # also write this CI system's file (github, gitlab); only it into a project


@dataclass(frozen=True, kw_only=True)
class InitPlan:
    """What init will write, decided before anything is."""

    directory: Path
    definition: str
    files: tuple[DefinitionFile, ...]
    overwritten: tuple[str, ...]  # paths of ``files`` the directory already holds
    ci_only: bool = False  # the directory is a project already: only its CI file is written


class NotEmptyError(ConfigError):
    """The directory holds files and --force was not given; ``overwritten`` lists the ones init would replace."""

    def __init__(self, message: str, *, overwritten: tuple[str, ...]) -> None:
        super().__init__(message)
        self.overwritten = overwritten


def shipped_definitions() -> tuple[str, ...]:
    """The names ``--from`` takes: each a directory of the package data holding a project's marker."""
    if not DEFINITIONS.is_dir():
        return ()
    return tuple(sorted(p.name for p in DEFINITIONS.iterdir() if (p / PROJECT_MARKER).is_file()))


def definition_files(name: str) -> tuple[DefinitionFile, ...]:
    """Every file of the shipped definition ``name``, sorted by path (links followed: see the package)."""
    known = shipped_definitions()
    if name not in known:
        msg = f"--from {name}: not a definition imagebuild ships (known: {', '.join(known) or 'none'})"
        raise ConfigError(msg)
    root = DEFINITIONS / name
    files: list[DefinitionFile] = []
    for directory, subdirs, names in os.walk(root, followlinks=True):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__" and not d.startswith("."))
        for file_name in sorted(names):
            path = Path(directory) / file_name
            if file_name.startswith(".") or not path.is_file():
                continue
            files.append(DefinitionFile(path=path.relative_to(root).as_posix(), data=path.read_bytes()))
    return tuple(sorted(files, key=lambda f: f.path))


def plan_init(options: InitOptions) -> InitPlan:
    """What init would write into ``options.directory``, or the one-line reason it will not."""
    directory = options.directory
    if directory.exists() and not directory.is_dir():
        msg = f"{directory}: not a directory; name a new or empty directory for the project"
        raise ConfigError(msg)
    ci = ci_definition(options.ci)
    if ci is not None and (directory / PROJECT_MARKER).is_file():
        return plan_ci_only(options, ci)
    files = definition_files(options.definition) + ((ci,) if ci is not None else ())
    for f in files:
        _check_target(directory, f.path)
    overwritten = tuple(f.path for f in files if (directory / f.path).exists())
    entries = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    if not options.force and [e for e in entries if e not in IGNORED_ENTRIES]:
        what = (
            f"init would overwrite the {len(overwritten)} files listed above"
            if overwritten
            else "none of its files would be overwritten"
        )
        msg = f"{directory}: not empty ({len(entries)} entries); {what}; pass --force to write the project there anyway, or name an empty directory"
        raise NotEmptyError(msg, overwritten=overwritten)
    return InitPlan(directory=directory, definition=options.definition, files=files, overwritten=overwritten)


def ci_definition(system: str | None) -> DefinitionFile | None:
    if system is None:
        return None
    path, data = ci_file(system)
    return DefinitionFile(path=path, data=data)


def plan_ci_only(options: InitOptions, ci: DefinitionFile) -> InitPlan:
    """``init --ci`` in an existing project: its CI file alone, refused where one is unless --force."""
    directory = options.directory
    _check_target(directory, ci.path)
    exists = (directory / ci.path).exists()
    if exists and not options.force:
        msg = f"{directory / ci.path}: already there; pass --force to replace it with imagebuild's {options.ci} template"
        raise NotEmptyError(msg, overwritten=(ci.path,))
    return InitPlan(
        directory=directory,
        definition=options.definition,
        files=(ci,),
        overwritten=(ci.path,) if exists else (),
        ci_only=True,
    )


def _check_target(directory: Path, relative: str) -> None:
    """A file where init must make a directory, or a directory where it must write a file: refused up front."""
    target = directory / relative
    for parent in reversed(target.relative_to(directory).parents[:-1]):
        if (directory / parent).exists() and not (directory / parent).is_dir():
            msg = f"{directory / parent}: a file where init writes the directory {parent.as_posix()}/; move it away, or name another directory"
            raise ConfigError(msg)
    if target.is_dir():
        msg = f"{target}: a directory where init writes the file {relative}; move it away, or name another directory"
        raise ConfigError(msg)


def write_project(plan: InitPlan) -> None:
    """Write every file of the plan, or none: a failure half-way leaves the directory as it was."""
    try:
        write_all_or_none(plan.directory, ((f.path, f.data) for f in plan.files), FILE_MODE)
    except OSError as e:
        msg = f"{plan.directory}: cannot write the project ({e.strerror or e}); nothing was written, choose a directory you can write"
        raise ConfigError(msg) from e
