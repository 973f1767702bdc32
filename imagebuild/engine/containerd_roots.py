"""Where a Docker engine's containerd keeps its content store (the blobs containerd_store reads).

dockerd uses the machine's containerd when one answers on ``/run/containerd/containerd.sock`` as it
starts (or the one ``--containerd`` names): Docker CE's packages (containerd.io) and Debian's
docker.io run containerd as a service of its own, its root the ``root`` of
``/etc/containerd/config.toml``, ``/var/lib/containerd`` by default. Otherwise it starts a containerd
of its own, rooted at ``<DockerRootDir>/containerd/daemon`` (a static install, Docker in Docker,
rootless). ``docker info`` names neither the containerd nor its root. So the content store is looked
for, in this order, under the data root, then under the root of each containerd running on this
machine (its ``--root``, or the ``root`` of its ``--config``, else of ``/etc/containerd/config.toml``),
then under containerd's default root; the first that holds the blob an image ID names is read. A
blob is named by the sha256 of its bytes and checked against it when read (the manifest and config
here, each layer as it streams), so another containerd's store can only give the same bytes.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

MANAGED_ROOT = Path("containerd/daemon")  # under the data root: the containerd dockerd started
DEFAULT_ROOT = Path("/var/lib/containerd")
DEFAULT_CONFIG = Path("/etc/containerd/config.toml")
CONTENT = Path("io.containerd.content.v1.content/blobs/sha256")
PROC = Path("/proc")
MAX_CONFIG = 1 << 20


def content_dirs(data_root: str, *, proc: Path = PROC) -> Iterator[Path]:
    """Each place the engine's blobs may be, most likely first, each once (see the module's text)."""
    seen: set[Path] = set()
    managed = (Path(data_root) / MANAGED_ROOT,) if Path(data_root).is_absolute() else ()
    for root in chain(managed, running_roots(proc), (DEFAULT_ROOT,)):  # /proc read only if needed
        if root not in seen:
            seen.add(root)
            yield root / CONTENT


def blob_dir(data_root: str, digest: str, *, proc: Path = PROC) -> tuple[Path | None, list[str]]:
    """(the content store holding the blob ``digest`` names, or None; every place looked, and why
    it could not be looked in: a root only its owner may read, say)."""
    looked: list[str] = []
    for directory in content_dirs(data_root, proc=proc):
        try:
            if (directory / digest.removeprefix("sha256:")).is_file():
                return directory, looked
            looked.append(str(directory))
        except OSError as e:  # is_file() passes on "no such file", not "permission denied"
            looked.append(f"{directory}: {e.strerror}")
    return None, looked


def running_roots(proc: Path = PROC) -> Iterator[Path]:
    """The root of each containerd process running on this machine (lowest pid first)."""
    try:
        pids = sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())
    except OSError:
        return
    for pid in pids:
        try:
            if (proc / str(pid) / "comm").read_text().strip() != "containerd":
                continue
            argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:  # it ended, or is not ours to read
            continue
        root = root_of([arg.decode(errors="replace") for arg in argv if arg])
        if root is not None:
            yield root


def root_of(argv: list[str]) -> Path | None:
    """The root a containerd command line gives: ``--root``, else its config's ``root``, else the default."""
    options: dict[str, str] = {}
    for i, arg in enumerate(argv[1:], start=1):
        name, equals, value = arg.partition("=")
        if name in ("--root", "--config", "-c", "-root", "-config"):
            options[name.lstrip("-")[:1]] = value if equals else (argv[i + 1] if i + 1 < len(argv) else "")
    if options.get("r"):
        root: Path | None = Path(options["r"])
    else:
        config = Path(options["c"]) if options.get("c") else DEFAULT_CONFIG
        root = _config_root(config) if config.is_absolute() else None
    return root if root is not None and root.is_absolute() else None


def _config_root(config: Path) -> Path | None:
    """A containerd config's ``root`` (the default root when it names none; None when unreadable)."""
    try:
        if config.stat().st_size > MAX_CONFIG:
            return None
        document = tomllib.loads(config.read_text())
    except FileNotFoundError:
        return DEFAULT_ROOT  # containerd runs with its defaults
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    root = document.get("root")
    return Path(root) if isinstance(root, str) and root else DEFAULT_ROOT
