"""Every pip call of the Dockerfile: what it installs from, and the constraint mechanism that fits it.

An install takes exactly one of three sources, and none resolves anything (``--no-deps``):

* the step's ``python_packages`` (``locked = true``): the step's group of pylock.toml, fed to
  ``pip install --require-hashes -r /dev/stdin`` one ``name==version --hash=sha256:...`` line
  each. The lines are in the RUN itself, not in a file the context ships: a file would have to
  be COPYed before the step, so a change of any step's packages would rebuild from that COPY
  (step 3) on, the vLLM compile included, while in the RUN it rebuilds from its own step;
* the wheel a ``fetch`` of the same step downloaded (``fetched = PIN``), with the pin's sha256;
* local source trees (``.``, a checkout at a verified SHA or a directory the context ships),
  built by pip. A directory has no hash pip could check; its build dependencies get exact
  versions through the build constraint (constraints cannot carry hashes).

Packages from an index by name are refused: they belong in ``python_packages``, so the lock
has them. Isolated builds get the build constraint file; a no-isolation build is preceded by
the setuptools guard, which installs the locked setuptools, hash-checked, when the image's own
violates the constraint (see the README's "Build constraints").
"""

from __future__ import annotations

import shlex

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import BUILD_CONSTRAINT_FILE, CHECK_TOOL, COMPILE_CACHE_ENV, VERSIONS_FILE
from imagebuild.inputs.python_lock import LOCK_FILE_NAME, LockedPackage, PythonLock
from imagebuild.inputs.stage_model import BUILD_GROUP, GUARD_GROUP, FetchFile, Pip, Step
from imagebuild.inputs.values import quoted_template, shell_quoted_text, shell_word
from imagebuild.pins import PinSet, PypiPin, WheelPin
from imagebuild.render.model import ConstraintMode

SETUPTOOLS_GUARD = f"{CHECK_TOOL} setuptools-guard"
# Wheels only, each checked against its sha256, nothing resolved.
HASH_LOCKED_FLAGS = "--no-deps --only-binary=:all: --require-hashes -r /dev/stdin"
# Options that would add a package source the lock does not cover.
SOURCE_OPTIONS = (
    "-r",
    "--requirement",
    "-e",
    "--editable",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
)
ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2")


def pip_lines(
    cmd: Pip, step: Step, pins: PinSet, lock: PythonLock | None, mode: ConstraintMode
) -> tuple[list[str], set[str]]:
    """Shell lines for one pip command, and the locked packages they install."""
    pairs = (*cmd.env, *COMPILE_CACHE_ENV) if cmd.compile_cache else cmd.env
    env = " ".join(f"{k}={quoted_template(v)}" for k, v in pairs)
    prefix = f"{env} " if env else ""
    args = _with_defaults(cmd.args)
    if cmd.locked:
        locked = step_packages(step, pins, lock)
        lines = [shell_word(p.requirement) for p in locked]
        return [_hash_locked(lines, f"{prefix}python3 -m pip {args}")], {p.name for p in locked}
    if cmd.fetched is not None:
        path, sha = _fetched_wheel(cmd.fetched, step, pins)
        return [_hash_locked([f'"{path} --hash=sha256:{sha}"'], f"{prefix}python3 -m pip {args}")], set()
    if cmd.subcommand == "install":
        _check_source_trees(cmd, step)
        args = _with_no_deps(args)
    if cmd.build_isolation is False:
        # The image's own setuptools builds this: it must satisfy the constraint itself.
        # PIP_BUILD_CONSTRAINT is unset because pip >= 25.3 refuses it with --no-build-isolation.
        guard, packages = _guard(step, lock) if mode is ConstraintMode.ON else ([], set())
        return [
            *guard,
            f"{prefix}env -u PIP_BUILD_CONSTRAINT python3 -m pip {args} --no-build-isolation",
        ], packages
    if cmd.build_isolation is True and mode is ConstraintMode.ON:
        # pip >= 26.2 applies only PIP_BUILD_CONSTRAINT inside build isolation (added in 25.3); older
        # pip only PIP_CONSTRAINT. Both name the build constraint here, so every pip gets exact versions.
        build = f"PIP_CONSTRAINT={BUILD_CONSTRAINT_FILE} PIP_BUILD_CONSTRAINT={BUILD_CONSTRAINT_FILE}"
        return [f"{build} {prefix}python3 -m pip {args}"], set()
    return [f"{prefix}python3 -m pip {args}"], set()


def hash_locked_download(requirement: str, dest: str, mode: ConstraintMode) -> str:
    """``pip download`` of one hash-locked requirement (a PyPI pin's file) into ``dest`` (both shell words)."""
    del mode  # a wheel download builds nothing: no constraint mechanism applies
    return _hash_locked([requirement], f"python3 -m pip download --no-cache-dir --dest {dest}")


def step_packages(step: Step, pins: PinSet, lock: PythonLock | None) -> tuple[LockedPackage, ...]:
    """What the step's locked install installs: its group of the python lock, checked against the step."""
    where = f"{step.source.name} (step {step.number})"
    if lock is None:
        msg = f"{where}: installs its python_packages from {LOCK_FILE_NAME}, but there is none beside {pins.path}; run `imagebuild lock`"
        raise ConfigError(msg)
    for declared in step.python_packages:
        req = Requirement(declared)
        locked = lock.get(req.name)
        if locked is None or step.lock_group not in locked.groups:
            msg = f"{where}: installs '{req.name}', which {LOCK_FILE_NAME} beside {pins.path} does not lock for this step; run `imagebuild lock`"
            raise ConfigError(msg)
        if req.specifier and not req.specifier.contains(locked.version, prereleases=True):
            msg = f"{where}: installs '{declared}', but {LOCK_FILE_NAME} locks {locked.name} {locked.version}; run `imagebuild lock`"
            raise ConfigError(msg)
    packages = lock.group(step.lock_group)
    for package in packages:
        _check_locked(package, pins, where)
    return packages


def guard_packages(lock: PythonLock | None, where: str) -> tuple[LockedPackage, ...]:
    """The setuptools the guard installs when the image's own violates the constraint."""
    packages = lock.group(GUARD_GROUP) if lock is not None else ()
    if not any(p.name == "setuptools" for p in packages):
        msg = f"{where}: a --no-build-isolation build needs the setuptools guard, but no setuptools is locked in {LOCK_FILE_NAME}'s '{GUARD_GROUP}' group; declare guard_requires in stages/image.toml and run `imagebuild lock`"
        raise ConfigError(msg)
    return packages


def build_constraint_text(constraints: str, lock: PythonLock | None) -> str:
    """The build constraint file: constraints/*.txt plus the exact locked versions of the build group."""
    packages = lock.group(BUILD_GROUP) if lock is not None else ()
    exact = "".join(f"{p.name}=={p.version}\n" for p in packages)
    return (
        "# What pip's isolated builds get (PIP_BUILD_CONSTRAINT, and PIP_CONSTRAINT for older pip):\n"
        "# the build-toolchain constraints, then the exact versions pylock.toml locks for the build\n"
        f"# dependencies (group '{BUILD_GROUP}'). Versions, not hashes: a constraint cannot carry a hash.\n"
        f"{constraints}# from {LOCK_FILE_NAME} [{BUILD_GROUP}]\n{exact}"
    )


def _guard(step: Step, lock: PythonLock | None) -> tuple[list[str], set[str]]:
    packages = guard_packages(lock, f"{step.source.name} (step {step.number})")
    requirements = " ".join(shell_word(p.requirement) for p in packages)
    return [f"{SETUPTOOLS_GUARD} {requirements} >> {VERSIONS_FILE}"], {p.name for p in packages}


def _hash_locked(quoted_lines: list[str], pip: str) -> str:
    """printf the requirement lines into ``pip ... --require-hashes -r /dev/stdin``, one per line."""
    body = " \\\n      ".join(quoted_lines)
    return f"printf '%s\\n' \\\n      {body} \\\n    | {pip} {HASH_LOCKED_FLAGS}"


def _with_defaults(args: str) -> str:
    # No wheel cache in the image: it only makes the layer bigger.
    sub, _, rest = args.partition(" ")
    if sub not in ("install", "download", "wheel"):
        return args
    return f"{sub} --no-cache-dir {rest}".rstrip()


def _with_no_deps(args: str) -> str:
    # Nothing is resolved in the image: a source tree's dependencies come from the lock or the base.
    return args if "--no-deps" in args.split() else args.replace("install ", "install --no-deps ", 1)


def _check_source_trees(cmd: Pip, step: Step) -> None:
    """A plain install names only local directories: an index package or an archive has no hash here."""
    where = f"{step.source.name} (step {step.number})"
    words = shlex.split(cmd.args)[1:]
    for word in words:
        if word.split("=", 1)[0] in SOURCE_OPTIONS:
            msg = f'{where}: pip install {word.split("=", 1)[0]} adds a package source {LOCK_FILE_NAME} does not cover; declare the packages in python_packages and write {{ pip = "install", locked = true }}'
            raise ConfigError(msg)
    targets = [w for w in words if not w.startswith("-")]
    if not targets:
        msg = f"{where}: pip install '{cmd.args}' names nothing to install"
        raise ConfigError(msg)
    for target in targets:
        if not target.startswith(("/", ".")):
            msg = f"{where}: pip installs '{target}' by name from the index, unlocked; add it to python_packages, run `imagebuild lock`, and write {{ pip = \"install\", locked = true }}"
            raise ConfigError(msg)
        if target.endswith(ARCHIVE_SUFFIXES):
            msg = f"{where}: pip installs the file '{target}' without a hash; install a pinned wheel with {{ pip = \"install\", fetched = PIN }}"
            raise ConfigError(msg)


def _fetched_wheel(pin_name: str, step: Step, pins: PinSet) -> tuple[str, str]:
    """The path a fetch of this step downloaded the wheel pin to (escaped for a double-quoted shell
    word) and the ARG holding its sha256."""
    pin = pins.get(pin_name)
    if not isinstance(pin, WheelPin):
        msg = f"{step.source.name} (step {step.number}): fetched = '{pin_name}' is a {pin.kind} pin; it needs a {WheelPin.kind} pin"
        raise ConfigError(msg)
    fetch = next(c for c in step.commands if isinstance(c, FetchFile) and c.pin == pin_name)
    p = pin.arg_prefix
    return f"{shell_quoted_text(fetch.into)}/${{{p}_WHEEL_FILE}}", f"${{{p}_WHEEL_SHA256}}"


def _check_locked(package: LockedPackage, pins: PinSet, where: str) -> None:
    """A locked package is a release version, and a PyPI pin's project is the very file the pin names.

    Its name, version and sha256 were checked by kind when pylock.toml was read
    (imagebuild.inputs.python_lock); the lines are rendered as quoted shell words.
    """
    try:
        Version(package.version)
    except InvalidVersion as e:
        msg = f"{where}: {LOCK_FILE_NAME} locks {package.name} at {package.version!r}, not a version; regenerate it with `imagebuild lock`"
        raise ConfigError(msg) from e
    pin = next(
        (p for p in pins if isinstance(p, PypiPin) and canonicalize_name(p.project) == package.name), None
    )
    if pin is not None and (pin.version, pin.sha256 or package.sha256) != (package.version, package.sha256):
        msg = f"{where}: {pins.path} [{pin.name}] is {pin.version} ({(pin.sha256 or '')[:12]}) but {LOCK_FILE_NAME} locks {package.version} ({package.sha256[:12]}); run `imagebuild lock`"
        raise ConfigError(msg)
