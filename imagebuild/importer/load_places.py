"""Where each engine writes a load, and how many copies of the layers it is sent it holds there.

Measured here with each directory on a tmpfs of its own, the sample image (1.09 GB of layer files)
loaded, peaks sampled every 0.1-0.2 s:

* Docker (20.10 and 26 on overlay2, 26's containerd store): the layers twice in one directory. A
  graph-driver engine untars the whole archive it is sent into ``<data root>/tmp`` before it
  registers a layer, then unpacks each into its driver's directory; the containerd store keeps each
  blob in its content store beside the snapshot it unpacks. One 286 MiB layer failed with 560 MiB
  free and loaded with 575 on each; the sample image failed with 2.19 GB free and loaded with 2.23.
  A graph-driver engine started with ``DOCKER_TMPDIR`` untars into that directory instead
  (``dockerd_process`` reads it from the dockerd): once there, once in the data root.
* ``podman load`` (``--runtime podman``): the layers twice in Podman's image copy directory (the
  archive decompressed or read, each blob staged: 2077 MiB for 1038 MiB of layers, a zstd archive
  and an uncompressed one alike) and once in its storage (1067 MiB), all at the peak.
* Podman's API service (DOCKER_HOST at its socket): three times in the copy directory (the upload
  written to a file first: 3115 MiB), once in its storage.

Only for an engine on this machine: a unix socket's engine is taken to be local, as imagebuild's
layer-store reader takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .containerd_root import candidate_roots, engine_root
from .docker_api import names_images_by_manifest
from .dockerd_process import engine_tmpdir
from .load_room import LoadDisk, Place
from .processes import PROC

PODMAN_CLI_COPIES, PODMAN_API_COPIES = 2, 3  # in Podman's image copy directory (above)


def docker_disk(info: dict[str, Any], address: str, *, proc: Path = PROC) -> LoadDisk:
    """Where the Docker engine whose ``GET /info`` this is writes a load."""
    if not address.startswith("unix://"):
        return LoadDisk(unknown=f"the engine at {address} is not on this machine")
    data_root = str(info.get("DockerRootDir") or "")
    if not data_root.startswith("/"):
        return LoadDisk(unknown="the engine does not say where its data root is")
    if not names_images_by_manifest(info):
        tmpdir = engine_tmpdir(data_root, proc=proc)
        if tmpdir and tmpdir.startswith("/"):
            return LoadDisk((
                Place(tmpdir, 1, "the engine's copy while it loads them (its DOCKER_TMPDIR)", temporary=True),
                Place(data_root, 1, "them unpacked"),
            ))  # fmt: skip
        return LoadDisk((Place(data_root, 2, "the engine's copy while it loads them, and them unpacked"),))
    said = info.get("Containerd")  # where its containerd listens (engines newer than Docker 26 say)
    listening = said.get("Address") if isinstance(said, dict) else None
    root = engine_root(data_root, address=listening if isinstance(listening, str) else "", proc=proc)
    if root is None or not root.is_dir():  # its dockerd not ours to read: one of the roots it may have
        roots = [candidate for candidate in candidate_roots(data_root, proc=proc) if candidate.is_dir()]
        devices = {_device(candidate) for candidate in roots}
        if len(devices) != 1 or None in devices:
            return LoadDisk(unknown="the containerd store's root is not known for sure")
        root = roots[0]
    return LoadDisk((Place(str(root), 2, "the engine's content store, and them unpacked", content_store=True),))


def podman_disk(info: dict[str, Any], copies: int) -> LoadDisk:
    """Where the Podman whose own info (``podman info``, ``/libpod/info``) this is writes a load:
    ``copies`` in its image copy directory, one in its storage."""
    store = info.get("store") if isinstance(info, dict) else None
    storage, copy_dir = (str(store.get(key) or "") for key in ("graphRoot", "imageCopyTmpDir")) if isinstance(store, dict) else ("", "")
    if not (storage.startswith("/") and copy_dir.startswith("/")):
        return LoadDisk(unknown="Podman does not say where its storage and image copy directory are")
    return LoadDisk((
        Place(copy_dir, copies, "Podman's copies while it loads them", temporary=True),
        Place(storage, 1, "them unpacked in its storage"),
    ))  # fmt: skip


def _device(path: Path) -> int | None:
    try:
        return path.stat().st_dev
    except OSError:
        return None
