"""Where a graph-driver Docker engine writes its copy of a load: its DOCKER_TMPDIR, read from the dockerd.

dockerd untars an archive it is sent into its temporary directory before it registers a layer:
``<data root>/tmp``, or ``DOCKER_TMPDIR`` from its environment when that is set (moby's
``prepareTempDir``, which then points the daemon's TMPDIR there). Its API names neither. So the
dockerd serving the data root is found among this machine's processes (a dockerd keeps files open
under its data root: its volume and network databases) and its environment read, which needs root or
the dockerd's user. Zipapp rules: the standard library, Python 3.8.
"""

from __future__ import annotations

import os
from pathlib import Path

from .containerd_root import PROC, processes_named

VARIABLE = b"DOCKER_TMPDIR="


def engine_tmpdir(data_root: str, *, proc: Path = PROC) -> str | None:
    """The DOCKER_TMPDIR of the dockerd whose data root this is: "" when it has none (its copy goes
    to the data root's tmp/), None when no dockerd with that root can be read here."""
    inside = data_root.rstrip("/") + "/"
    for process in processes_named("dockerd", proc):
        try:
            descriptors = list((process / "fd").iterdir())
        except OSError:  # it ended, or is not ours to read
            continue
        if not any(_target(fd).startswith(inside) for fd in descriptors):
            continue
        try:
            environ = (process / "environ").read_bytes()
        except OSError:
            return None
        for entry in environ.split(b"\0"):
            if entry.startswith(VARIABLE):
                return entry[len(VARIABLE) :].decode(errors="replace")
        return ""
    return None


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return ""
