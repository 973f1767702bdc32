"""Shell text for each kind of stage command, with the checks every source and pip call needs.

A git source is cloned, checked out at its full SHA and HEAD compared with it;
a downloaded file is checked with ``sha256sum -c``; every pip call installs
hash-locked or from a source tree, with the build-toolchain constraint
mechanism that fits it (imagebuild.render.pip, and the README).
"""

from __future__ import annotations

from typing import TypeVar, assert_never

from imagebuild.errors import ConfigError
from imagebuild.inputs.python_lock import PythonLock
from imagebuild.inputs.stage_model import (
    AptInstall,
    Command,
    FetchFile,
    GitCheckout,
    Pip,
    PypiDownload,
    Shell,
    Step,
)
from imagebuild.inputs.values import shell_quoted_text, shell_word
from imagebuild.pins import GitPin, Pin, PinSet, PypiPin, TarballPin, WheelPin
from imagebuild.pins.apt import apt_pin
from imagebuild.render.apt import AptSelection, apt_lines
from imagebuild.render.model import ConstraintMode
from imagebuild.render.pip import hash_locked_download, pip_lines

SourcePin = TypeVar("SourcePin", bound=Pin)


def command_lines(
    cmd: Command,
    step: Step,
    pins: PinSet,
    lock: PythonLock | None,
    mode: ConstraintMode,
    *,
    apt: AptSelection | None = None,
) -> tuple[list[str], set[str], set[str]]:
    """Shell lines for one command, the pins it consumes and the locked packages it installs."""
    match cmd:
        case Shell():
            return [cmd.text], set(), set()
        case Pip():
            lines, packages = pip_lines(cmd, step, pins, lock, mode)
            return lines, {cmd.fetched} if cmd.fetched else set(), packages
        case GitCheckout():
            return _git(cmd, _source_pin(pins, cmd.pin, GitPin, step)), {cmd.pin}, set()
        case FetchFile():
            fetched = pins.get(cmd.pin)
            file_pin = (
                fetched if isinstance(fetched, TarballPin) else _source_pin(pins, cmd.pin, WheelPin, step)
            )
            return _fetch(cmd, file_pin), {cmd.pin}, set()
        case PypiDownload():
            return _pypi(cmd, _source_pin(pins, cmd.pin, PypiPin, step), mode), {cmd.pin}, set()
        case AptInstall():
            return apt_lines(step, apt_pin(pins, cmd, step), apt), {cmd.pin}, set()
        case _:
            assert_never(cmd)


def _source_pin(pins: PinSet, name: str, kind: type[SourcePin], step: Step) -> SourcePin:
    pin = pins.get(name)
    if not isinstance(pin, kind):
        msg = f"{step.source}: '{name}' is a {pin.kind} pin; this command needs a {kind.kind} pin"
        raise ConfigError(msg)
    return pin


def _git(cmd: GitCheckout, pin: GitPin) -> list[str]:
    repo, commit, d = f"${{{pin.arg_prefix}_REPO}}", f"${{{pin.arg_prefix}_COMMIT}}", shell_word(cmd.into)
    blobless = " --filter=blob:none" if cmd.blobless else ""
    lines = [
        f'git clone --quiet{blobless} "{repo}" {d}',
        # A commit no branch reaches any more (force-push) is still fetchable by SHA.
        f'{{ git -C {d} cat-file -e "{commit}^{{commit}}" 2>/dev/null || git -C {d} fetch --quiet origin "{commit}"; }}',
        f'git -C {d} -c advice.detachedHead=false checkout --quiet "{commit}"',
        f'{{ [ "$(git -C {d} rev-parse HEAD)" = "{commit}" ] || {{ echo "imagebuild: {pin.name} checkout is not at {commit}" >&2; exit 1; }}; }}',
    ]
    if cmd.submodules:
        lines.append(f"git -C {d} submodule update --init --recursive")
    return lines


def _fetch(cmd: FetchFile, pin: WheelPin | TarballPin) -> list[str]:
    # The ARGs are PREFIX_WHEEL_* or PREFIX_TARBALL_* (the pin kinds' build_args).
    p = f"{pin.arg_prefix}_{'TARBALL' if isinstance(pin, TarballPin) else 'WHEEL'}"
    d = shell_quoted_text(cmd.into)
    path = f'"{d}/${{{p}_FILE}}"'
    return [
        f"mkdir -p {shell_word(cmd.into)}",
        f'curl -fsSL --retry 3 -o {path} "${{{p}_URL}}"',
        f'echo "${{{p}_SHA256}}  {d}/${{{p}_FILE}}" | sha256sum -c -',
    ]


def _pypi(cmd: PypiDownload, pin: PypiPin, mode: ConstraintMode) -> list[str]:
    p, d = pin.arg_prefix, shell_quoted_text(cmd.into)
    project = shell_quoted_text(pin.project)
    requirement = f'"{project}==${{{p}_VERSION}} --hash=sha256:${{{p}_SHA256}}"'
    # pip checked the hash; sha256sum also proves the file is the one the pin names.
    return [
        hash_locked_download(requirement, shell_word(cmd.into), mode),
        f'echo "${{{p}_SHA256}}  {d}/${{{p}_FILE}}" | sha256sum -c -',
    ]
