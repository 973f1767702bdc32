"""Which engine and image store answer: an engine's ``GET /info`` and ``GET /version`` as an EngineStore."""

from __future__ import annotations

from typing import Any

from imagebuild.engine.interface import CONTAINERD, GRAPH_DRIVER, PODMAN, EngineStore
from imagebuild.importer.docker_api import names_images_by_manifest


def engine_store(info: dict[str, Any], version: dict[str, Any] | None = None) -> EngineStore:
    """The EngineStore an engine's answers describe.

    The containerd store says so in DriverStatus; Podman in ``/version``'s Components ("Podman
    Engine"), its ``/info`` being Docker's fields with Podman's values (ServerVersion 4.3.1, Driver
    overlay).
    """
    containerd = names_images_by_manifest(info)
    components = {str(c.get("Name")) for c in (version or {}).get("Components") or [] if isinstance(c, dict)}
    kind = PODMAN if "Podman Engine" in components else CONTAINERD if containerd else GRAPH_DRIVER
    return EngineStore(
        version=str(info.get("ServerVersion") or "unknown"),
        kind=kind,
        driver=str(info.get("Driver") or "unknown"),
        api_version=str((version or {}).get("ApiVersion") or ""),
    )
