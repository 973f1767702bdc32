"""The files a squashfs carries so enroot (pyxis) and Charliecloud start it as the engine would.

No runtime that runs a squashfs reads the image's config, so what it says (environment, working
directory, entrypoint and command, volumes) is written into the root filesystem, where each runtime
looks for it, as enroot's own `enroot import` writes it (enroot's doc/image-format.md):

* ``/etc/environment``: the config's ``Env``, one ``NAME=VALUE`` a line (enroot sets them; a
  ``${VAR}`` in a value is the host's, as enroot documents);
* ``/etc/rc``: the start script: make and enter the working directory, source ``/etc/rc.local``, then
  ``exec`` the entrypoint with the command given to the container, else with the image's command
  (``/bin/sh`` when the image has neither, as enroot does);
* ``/etc/rc.local``: empty but for a comment, for a site to edit;
* ``/etc/fstab``: the config's ``Volumes`` as rootfs bind mounts enroot creates (``x-create=dir``);
* ``/ch/environment``: the same ``Env`` lines for Charliecloud's bare ``ch-run --set-env``.

A value that cannot be one line (a newline in a variable) is refused: neither file can hold it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

ENVIRONMENT = "etc/environment"
RC = "etc/rc"
RC_LOCAL = "etc/rc.local"
FSTAB = "etc/fstab"
CH_ENVIRONMENT = "ch/environment"


class RuntimeFilesError(Exception):
    """The image's config says something these files cannot carry (the message says what)."""


def _words(config: Mapping[str, Any], key: str) -> list[str]:
    value = config.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        msg = f"the image config's {key} is not a list of strings"
        raise RuntimeFilesError(msg)
    return list(value)


def _one_line(text: str, what: str) -> str:
    if "\n" in text or "\r" in text or "\0" in text:
        msg = f"the image config's {what} holds a line break or NUL, which enroot's and Charliecloud's files cannot carry; rebuild without it"
        raise RuntimeFilesError(msg)
    return text


def runtime_files(image_config: Mapping[str, Any]) -> dict[str, bytes]:
    """Path in the root (no leading /) -> content, from the image config (the ``config`` object's)."""
    config = image_config.get("config") or {}
    env = [_one_line(line, f"Env entry {line.split('=', 1)[0]!r}") for line in _words(config, "Env")]
    entrypoint = [_one_line(w, "Entrypoint") for w in _words(config, "Entrypoint")]
    command = [_one_line(w, "Cmd") for w in _words(config, "Cmd")]
    if not entrypoint and not command:
        command = ["/bin/sh"]
    workdir = _one_line(str(config.get("WorkingDir") or "/"), "WorkingDir")
    volumes = sorted((config.get("Volumes") or {}).keys())
    environment = "".join(f"{line}\n" for line in env)
    run = shlex.join(entrypoint)
    rc = (
        "# Written by imagebuild export from the image's config, as `enroot import` writes it: the\n"
        "# working directory, then the entrypoint with the container's command, else the image's.\n"
        f"mkdir -p {shlex.quote(workdir)} 2> /dev/null\n"
        f"cd {shlex.quote(workdir)} && unset OLDPWD || exit 1\n"
        "\n"
        "if [ -s /etc/rc.local ]; then\n"
        "    . /etc/rc.local\n"
        "fi\n"
        "\n"
        "if [ $# -gt 0 ]; then\n"
        f"    exec {run + ' ' if run else ''}\"$@\"\n"
        "else\n"
        f"    exec {shlex.join([*entrypoint, *command])}\n"
        "fi\n"
    )
    fstab = "".join(
        f"${{ENROOT_ROOTFS}}{_one_line(v, 'Volumes')} {v} none x-create=dir,bind,rw,nosuid,nodev\n" for v in volumes
    )
    return {
        ENVIRONMENT: environment.encode(),
        RC: rc.encode(),
        RC_LOCAL: b"# Sourced by /etc/rc when the container starts: a site's changes to the entrypoint go here.\n",
        FSTAB: fstab.encode(),
        CH_ENVIRONMENT: environment.encode(),
    }


def working_directory(image_config: Mapping[str, Any]) -> str:
    """The working directory, which must exist in a read-only squashfs (no leading /; "" for the root)."""
    return str((image_config.get("config") or {}).get("WorkingDir") or "/").strip("/")
