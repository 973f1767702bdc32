"""One entry of a step's ``commands`` list, read and checked: a shell string or a command table.

A shell string may not run pip, hold a comment, a line break or a heredoc; a table is one of
``pip``, ``git``, ``fetch``, ``pypi`` or ``apt``, with its keys checked by kind. A pip table says
where an install comes from (``locked``, ``fetched`` or a source tree), how a build from source
is isolated, and whether its compiles go through the compile cache (``compile_cache``). The
checks that span a step's commands (what is installed was declared or fetched before; ccache's
directory is removed) are ``check_installs``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import CCACHE_DIR, COMPILE_CACHE_ENV
from imagebuild.inputs.schema import Table, suggest
from imagebuild.inputs.stage_model import (
    AptInstall,
    Command,
    FetchFile,
    GitCheckout,
    Pip,
    PypiDownload,
    Shell,
)
from imagebuild.inputs.values import (
    ABSOLUTE_PATH,
    ENV_NAME,
    ENV_VALUE,
    HASH_LOCKED_INSTALL,
    PIN_NAME,
    control_problem,
    shown,
)

# pip reached through a shell string would bypass the constraint mechanism.
RAW_PIP_RE = re.compile(r"(^|[\s;&|(])(pip3?|python3?\s+-m\s+pip)\s")
PIP_BUILDING_SUBCOMMANDS = ("install", "download", "wheel")
PIP_SUBCOMMANDS = (*PIP_BUILDING_SUBCOMMANDS, "uninstall", "show", "list", "check", "freeze")
# Flags the renderer owns: writing them by hand would defeat its checks.
PIP_RESERVED_FLAGS = ("--no-build-isolation", "--build-constraint", "--constraint", "-c ")
# Variables `compile_cache = true` sets: a stage may not set them itself.
COMPILE_CACHE_NAMES = frozenset(name for name, _ in COMPILE_CACHE_ENV)

_COMMAND_KEYS = {
    "pip": ("pip", "build_isolation", "env", "locked", "fetched", "compile_cache"),
    "git": ("git", "into", "submodules", "blobless"),
    "fetch": ("fetch", "into"),
    "pypi": ("pypi", "into"),
    "apt": ("apt",),
}


def env_pairs(t: Table, key: str) -> tuple[tuple[str, str], ...]:
    """An environment table (a step's ``env``, a pip command's): names and values checked by kind."""
    return tuple(t.string_map(key, names=ENV_NAME, values=ENV_VALUE).items())


def _check_shell(text: str, where: str) -> None:
    control = control_problem(text.replace("\n", " "))
    if control:
        msg = f"{where}: command {shown(text)} {control}"
        raise ConfigError(msg)
    problems = {
        "a comment (comment lines inside a RUN continuation are removed by docker and break the chain)": text.lstrip().startswith(
            "#"
        ),
        "a line break (one command per list entry)": "\n" in text,
        "a heredoc (the classic builder cannot parse it)": "<<" in text,
        "an empty command": not text.strip(),
    }
    for problem, found in problems.items():
        if found:
            msg = f"{where}: command {shown(text)} is {problem}"
            raise ConfigError(msg)
    if RAW_PIP_RE.search(text):
        msg = (
            f"{where}: command {shown(text)} runs pip from a shell string; write it as "
            f'{{ pip = "install ...", build_isolation = true|false }} so the build-toolchain '
            f"constraint is applied"
        )
        raise ConfigError(msg)


def parse_command(raw: Any, where: str) -> Command:
    if isinstance(raw, str):
        _check_shell(raw, where)
        return Shell(text=raw)
    if not isinstance(raw, dict):
        msg = f"{where}: a command must be a string or a table, got {shown(raw)}"
        raise ConfigError(msg)
    kinds = [k for k in _COMMAND_KEYS if k in raw]
    if len(kinds) != 1:
        msg = f"{where}: a command table needs exactly one of {', '.join(_COMMAND_KEYS)}; got keys {shown(sorted(raw))}"
        raise ConfigError(msg)
    kind = kinds[0]
    t = Table(raw, f"{where} {{{kind} = ...}}")
    t.check_keys(_COMMAND_KEYS[kind])
    if kind == "pip":
        return _parse_pip(t)
    if kind == "git":
        return GitCheckout(
            pin=t.string("git"),
            into=t.string("into", kind=ABSOLUTE_PATH),
            submodules=t.boolean("submodules", default=False),
            blobless=t.boolean("blobless", default=False),
        )
    if kind == "apt":
        return AptInstall(pin=t.string("apt", kind=PIN_NAME))
    if kind == "fetch":
        return FetchFile(pin=t.string("fetch"), into=t.string("into", kind=ABSOLUTE_PATH))
    return PypiDownload(pin=t.string("pypi"), into=t.string("into", kind=ABSOLUTE_PATH))


def _parse_pip(t: Table) -> Pip:
    args = t.string("pip").strip()
    sub = args.split()[0] if args else ""
    if sub not in PIP_SUBCOMMANDS:
        msg = f"{t.where}: unknown pip subcommand {shown(sub)}.{suggest(sub, PIP_SUBCOMMANDS)}"
        raise ConfigError(msg)
    for flag in PIP_RESERVED_FLAGS:
        if flag in f"{args} ":
            msg = f"{t.where}: '{flag.strip()}' is set by the renderer from build_isolation; remove it"
            raise ConfigError(msg)
    locked = t.boolean("locked", default=False)
    fetched = t.optional_string("fetched", kind=PIN_NAME)
    wheels = locked or fetched is not None
    if wheels and sub != "install":
        msg = f"{t.where}: locked / fetched say what 'pip install' installs; 'pip {sub}' takes neither"
        raise ConfigError(msg)
    if wheels:
        # Rendered before `--no-deps ... --require-hashes -r /dev/stdin`: options only, no source.
        HASH_LOCKED_INSTALL.check(args, t.where, "pip")
    if locked and fetched is not None:
        msg = f"{t.where}: one source per install: locked = true (python_packages) or fetched = PIN, not both"
        raise ConfigError(msg)
    isolation: bool | None = t.data.get("build_isolation")
    if wheels and "build_isolation" in t.data:
        msg = f"{t.where}: a {'locked' if locked else 'fetched'} install is of wheels, hash-checked, and builds nothing; remove build_isolation"
        raise ConfigError(msg)
    if sub in PIP_BUILDING_SUBCOMMANDS and not wheels and not isinstance(isolation, bool):
        msg = (
            f"{t.where}: 'pip {sub}' may build from source, so say how: "
            f"build_isolation = true (pip's isolated build env) or false (the image's own toolchain)"
        )
        raise ConfigError(msg)
    if sub not in PIP_BUILDING_SUBCOMMANDS and "build_isolation" in t.data:
        msg = f"{t.where}: 'pip {sub}' builds nothing; remove build_isolation"
        raise ConfigError(msg)
    env = env_pairs(t, "env")
    compile_cache = t.boolean("compile_cache", default=False)
    if compile_cache and isolation is None:
        msg = f"{t.where}: compile_cache = true is for a build from source; 'pip {sub}' here builds nothing"
        raise ConfigError(msg)
    for name, _ in env:
        if name in COMPILE_CACHE_NAMES:
            msg = f"{t.where}: env.{name} is ccache's setting for the compile cache; remove it and write compile_cache = true"
            raise ConfigError(msg)
    return Pip(
        args=args, build_isolation=isolation, env=env, locked=locked, fetched=fetched, compile_cache=compile_cache
    )


def check_installs(path: Path, commands: tuple[Command, ...], python_packages: tuple[str, ...]) -> None:
    """python_packages are installed by a locked pip command, a fetched wheel was fetched before, and
    ccache's directory is removed after the last compile_cache build."""
    locked = any(isinstance(c, Pip) and c.locked for c in commands)
    if python_packages and not locked:
        msg = f'{path}: python_packages are declared but no command installs them; add {{ pip = "install", locked = true }}'
        raise ConfigError(msg)
    if locked and not python_packages:
        msg = f"{path}: a locked pip install needs the packages it installs in python_packages"
        raise ConfigError(msg)
    fetched: set[str] = set()
    for command in commands:
        if isinstance(command, FetchFile):
            fetched.add(command.pin)
        elif isinstance(command, Pip) and command.fetched is not None and command.fetched not in fetched:
            msg = f"{path}: pip installs the fetched '{command.fetched}' wheel, but no earlier {{ fetch = \"{command.fetched}\" }} in this step downloads it"
            raise ConfigError(msg)
    cached = [i for i, c in enumerate(commands) if isinstance(c, Pip) and c.compile_cache]
    after = commands[cached[-1] + 1 :] if cached else ()
    removed = any(isinstance(c, Shell) and c.text.startswith("rm ") and CCACHE_DIR in c.text.split() for c in after)
    if cached and not removed:
        # ccache 4.4-4.6 (no remote_only) keep their entries there: they would land in the layer.
        msg = f'{path}: a compile_cache build leaves ccache\'s directory; add "rm -rf ${{CCACHE_DIR}}" after it'
        raise ConfigError(msg)
