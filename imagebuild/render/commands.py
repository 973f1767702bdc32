"""Shell text for each kind of stage command, with the checks every source and pip call needs.

A git source is cloned, checked out at its full SHA and HEAD compared with it;
a downloaded file is checked with ``sha256sum -c``; every pip call gets the
build-toolchain constraint mechanism that fits it (see the README).
"""

from __future__ import annotations

from typing import TypeVar, assert_never

from imagebuild.errors import ConfigError
from imagebuild.layout import CHECK_TOOL, CONSTRAINT_FILE
from imagebuild.pins import GitPin, Pin, PinSet, PypiPin, WheelPin
from imagebuild.render.model import ConstraintMode
from imagebuild.stages import Command, FetchFile, GitCheckout, Pip, PypiDownload, Shell, Step
from imagebuild.values import quoted_template, shell_quoted_text, shell_word

SETUPTOOLS_GUARD = f"{CHECK_TOOL} setuptools-guard"

SourcePin = TypeVar("SourcePin", bound=Pin)


def command_lines(cmd: Command, step: Step, pins: PinSet, mode: ConstraintMode) -> tuple[list[str], set[str]]:
    """Shell lines for one command and the pins it consumes."""
    match cmd:
        case Shell():
            return [cmd.text], set()
        case Pip():
            return pip_lines(cmd, mode), set()
        case GitCheckout():
            return _git(cmd, _source_pin(pins, cmd.pin, GitPin, step)), {cmd.pin}
        case FetchFile():
            return _fetch(cmd, _source_pin(pins, cmd.pin, WheelPin, step)), {cmd.pin}
        case PypiDownload():
            return _pypi(cmd, _source_pin(pins, cmd.pin, PypiPin, step), mode), {cmd.pin}
        case _:
            assert_never(cmd)


def _source_pin(pins: PinSet, name: str, kind: type[SourcePin], step: Step) -> SourcePin:
    pin = pins.get(name)
    if not isinstance(pin, kind):
        msg = f"{step.source}: '{name}' is a {pin.kind} pin; this command needs a {kind.kind} pin"
        raise ConfigError(msg)
    return pin


def _pip_args(cmd: Pip) -> str:
    # No wheel cache in the image: it only makes the layer bigger.
    sub, _, rest = cmd.args.partition(" ")
    return f"{sub} --no-cache-dir {rest}" if sub in ("install", "download", "wheel") else cmd.args


def pip_lines(cmd: Pip, mode: ConstraintMode) -> list[str]:
    env = " ".join(f"{k}={quoted_template(v)}" for k, v in cmd.env)
    prefix = f"{env} " if env else ""
    args = _pip_args(cmd)
    if cmd.build_isolation is False:
        # The image's own setuptools builds this: it must satisfy the constraint itself.
        # PIP_BUILD_CONSTRAINT is unset because pip >= 25.3 refuses it with --no-build-isolation.
        guard = [SETUPTOOLS_GUARD] if mode is ConstraintMode.ON else []
        return [*guard, f"{prefix}env -u PIP_BUILD_CONSTRAINT python3 -m pip {args} --no-build-isolation"]
    if cmd.build_isolation is True and mode is ConstraintMode.ON:
        # pip >= 26.2 no longer applies PIP_CONSTRAINT inside build isolation; this does (pip >= 25.3).
        return [f"PIP_BUILD_CONSTRAINT={CONSTRAINT_FILE} {prefix}python3 -m pip {args}"]
    return [f"{prefix}python3 -m pip {args}"]


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


def _fetch(cmd: FetchFile, pin: WheelPin) -> list[str]:
    p, d = pin.arg_prefix, shell_quoted_text(cmd.into)
    path = f'"{d}/${{{p}_WHEEL_FILE}}"'
    return [
        f"mkdir -p {shell_word(cmd.into)}",
        f'curl -fsSL --retry 3 -o {path} "${{{p}_WHEEL_URL}}"',
        f'echo "${{{p}_WHEEL_SHA256}}  {d}/${{{p}_WHEEL_FILE}}" | sha256sum -c -',
    ]


def _pypi(cmd: PypiDownload, pin: PypiPin, mode: ConstraintMode) -> list[str]:
    p, d = pin.arg_prefix, shell_quoted_text(cmd.into)
    project = shell_quoted_text(pin.project)
    download = Pip(
        args=f'download --no-deps --only-binary=:all: --dest "{d}" "{project}==${{{p}_VERSION}}"',
        build_isolation=True,
    )
    return [*pip_lines(download, mode), f'echo "${{{p}_SHA256}}  {d}/${{{p}_FILE}}" | sha256sum -c -']
