"""Which engine and image store answer: an engine's ``GET /info`` and ``GET /version`` as an EngineStore."""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version

from imagebuild.engine.interface import CONTAINERD, GRAPH_DRIVER, PODMAN, EngineStore
from imagebuild.importer.docker_api import names_images_by_manifest

# The oldest Docker API imagebuild is tested against: Docker 20.10 and Podman 4.3 serve 1.41. Older
# engines lack what build and verify rely on (the /build output imagebuild parses, image inspect's
# RootFS, load's progress) and are refused rather than half-working.
MIN_API_VERSION = "1.41"


def api_version_problem(address: str, api_version: str) -> str | None:
    """Why an engine serving ``api_version`` is refused, in one line; None when it is new enough."""
    try:
        too_old = Version(api_version) < Version(MIN_API_VERSION)
    except InvalidVersion:
        return f"the engine at {address} reports Docker API version {api_version!r}, which is not a version"
    if not too_old:
        return None
    return (
        f"the engine at {address} serves Docker API {api_version}; imagebuild needs {MIN_API_VERSION} "
        "(Docker 20.10, Podman 4.3) or newer: upgrade the engine, or point DOCKER_HOST at a newer one"
    )


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
