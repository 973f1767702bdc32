"""Where a Docker engine's containerd keeps its root: its content store and its snapshots.

dockerd uses the machine's containerd when one answers on ``/run/containerd/containerd.sock`` as it
starts (or the one ``--containerd`` names): Docker CE's packages (containerd.io) and Debian's
docker.io run containerd as a service of its own, its root the ``root`` of
``/etc/containerd/config.toml``, ``/var/lib/containerd`` by default. Otherwise it starts a containerd
of its own, rooted at ``<DockerRootDir>/containerd/daemon`` (a static install, Docker in Docker,
rootless). ``docker info`` never names the root, and names the containerd's socket only on engines
newer than Docker 26. So the containerd listening on that socket is the engine's, else the dockerd's
own process tells (``engine_root``: its child, else the one listening where it connects); the
importer checks the free space of that one's root (``load_places``). Where the dockerd
cannot be read here, the roots are looked for, in this order: under the data root, then the root of
each containerd running on this machine, then containerd's default root (``candidate_roots``).
Imagebuild reads blobs from the first that holds them (``imagebuild.engine.containerd_roots``).

A containerd's root is its ``--root``, or the ``root`` of its ``--config``, else of
``/etc/containerd/config.toml``.

A config is read for its top-level ``root`` alone, by lines: the zipapp's Python may predate tomllib.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

from .dockerd_process import MAX_CONFIG, containerd_address, serving_dockerd, socket_path
from .processes import PROC, command_line, go_flags, listening_paths, parent_pid, processes_named

MANAGED_ROOT = Path("containerd/daemon")  # under the data root: the containerd dockerd started
DEFAULT_ROOT = Path("/var/lib/containerd")
DEFAULT_CONFIG = Path("/etc/containerd/config.toml")
_KEY_RE = re.compile(r"\s*root\s*=")
_ROOT_RE = re.compile(r"""\s*root\s*=\s*(?:"([^"\\]*)"|'([^']*)')\s*(?:#.*)?""")


def candidate_roots(data_root: str, *, proc: Path = PROC) -> Iterator[Path]:
    """Each root the engine's containerd may have, most likely first, each once (see the module's text)."""
    seen = set()
    if Path(data_root).is_absolute():
        seen.add(Path(data_root) / MANAGED_ROOT)
        yield Path(data_root) / MANAGED_ROOT
    for root in (*running_roots(proc), DEFAULT_ROOT):
        if root not in seen:
            seen.add(root)
            yield root


def running_roots(proc: Path = PROC) -> Iterator[Path]:
    """The root of each containerd process running on this machine (lowest pid first)."""
    for process in processes_named("containerd", proc):
        argv = command_line(process)
        root = root_of(argv) if argv else None
        if root is not None:
            yield root


def engine_root(data_root: str, *, address: str = "", proc: Path = PROC) -> Path | None:
    """The root of the containerd the engine uses: the one listening at ``address`` (``GET /info``'s
    ``Containerd.Address``), else, from the dockerd serving ``data_root``, the one it started or the
    one listening where it connects. None when that cannot be read here (then ``candidate_roots``)."""
    if address:
        return _listening_at(address, list(processes_named("containerd", proc)))
    dockerd = serving_dockerd(data_root, proc=proc)
    if dockerd is None:
        return None
    containerds = list(processes_named("containerd", proc))
    started = [process for process in containerds if parent_pid(process) == int(dockerd.name)]
    if started:
        return _root(started)
    address = containerd_address(dockerd) or ""
    return _listening_at(address, containerds) if address else None


def _listening_at(address: str, containerds: list[Path]) -> Path | None:
    wanted = os.path.realpath(socket_path(address))
    return _root([p for p in containerds if wanted in {os.path.realpath(path) for path in listening_paths(p)}])


def _root(containerds: list[Path]) -> Path | None:
    argv = command_line(containerds[0]) if len(containerds) == 1 else None
    return root_of(argv) if argv else None


def root_of(argv: list[str]) -> Path | None:
    """The root a containerd command line gives: ``--root``, else its config's ``root``, else the default."""
    options = go_flags(argv, ("--root", "--config", "--c"))
    named_config = options.get("--config") or options.get("--c")
    if options.get("--root"):
        root: Path | None = Path(options["--root"])
    else:
        config = Path(named_config) if named_config else DEFAULT_CONFIG
        root = config_root(config) if config.is_absolute() else None
    return root if root is not None and root.is_absolute() else None


def config_root(config: Path) -> Path | None:
    """A containerd config's top-level ``root`` (the default root when it names none, or there is no
    config); None when the file or that line cannot be read."""
    try:
        if config.stat().st_size > MAX_CONFIG:
            return None
        lines = config.read_text().splitlines()
    except FileNotFoundError:
        return DEFAULT_ROOT  # containerd runs with its defaults
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        if line.lstrip().startswith("["):  # the first table: no top-level key follows
            break
        if _KEY_RE.match(line):
            found = _ROOT_RE.fullmatch(line)
            value = (found.group(1) or found.group(2)) if found else ""
            return Path(value) if value else None
    return DEFAULT_ROOT
