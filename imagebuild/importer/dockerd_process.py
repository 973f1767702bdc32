"""The dockerd serving a data root, found among this machine's processes, and what only it can tell.

Its API says neither where a graph-driver engine writes its copy of a load nor which containerd it
uses. A dockerd keeps files open under its data root (its volume and network databases), which finds
it; reading it needs root or the dockerd's user. Zipapp rules: the standard library, Python 3.8.

* Its copy of a load: dockerd untars an archive it is sent into its temporary directory before it
  registers a layer: ``<data root>/tmp``, or ``DOCKER_TMPDIR`` from its environment when that is set
  (moby's ``prepareTempDir``, which then points the daemon's TMPDIR there).
* Its containerd: the one it started (its child), else the one at the address its ``--containerd``
  or its daemon.json's ``containerd`` names, ``/run/containerd/containerd.sock`` by default.
"""

from __future__ import annotations

import json
from pathlib import Path

from .processes import PROC, command_line, go_flags, open_files, processes_named

VARIABLE = b"DOCKER_TMPDIR="
DAEMON_JSON = "/etc/docker/daemon.json"
DEFAULT_CONTAINERD = "/run/containerd/containerd.sock"
MAX_CONFIG = 1 << 20  # bytes: a config file larger is not read


def serving_dockerd(data_root: str, *, proc: Path = PROC) -> Path | None:
    """The /proc directory of the dockerd whose data root this is; None when none can be read here."""
    inside = data_root.rstrip("/") + "/"
    for process in processes_named("dockerd", proc):
        if any(target.startswith(inside) for target in open_files(process) or ()):
            return process
    return None


def engine_tmpdir(data_root: str, *, proc: Path = PROC) -> str | None:
    """The DOCKER_TMPDIR of the dockerd whose data root this is: "" when it has none (its copy goes
    to the data root's tmp/), None when no dockerd with that root can be read here."""
    process = serving_dockerd(data_root, proc=proc)
    if process is None:
        return None
    try:
        environ = (process / "environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(VARIABLE):
            return entry[len(VARIABLE) :].decode(errors="replace")
    return ""


def containerd_address(dockerd: Path) -> str | None:
    """The address of the containerd this dockerd uses unless it started its own (a path, or
    ``unix://`` and a path); None when unreadable."""
    argv = command_line(dockerd)
    if argv is None:
        return None
    flags = go_flags(argv, ("--containerd", "--config-file"))
    if flags.get("--containerd"):
        return flags["--containerd"]
    config = flags.get("--config-file") or DAEMON_JSON
    try:
        if Path(config).stat().st_size > MAX_CONFIG:
            return None
        settings = json.loads(Path(config).read_text())
    except FileNotFoundError:
        return DEFAULT_CONTAINERD
    except (OSError, ValueError):
        return None
    named = settings.get("containerd") if isinstance(settings, dict) else None
    return named if isinstance(named, str) and named else DEFAULT_CONTAINERD


def socket_path(address: str) -> str:
    """A containerd address as the path it listens on (containerd's dialer takes both forms)."""
    return address[len("unix://") :] if address.startswith("unix://") else address
