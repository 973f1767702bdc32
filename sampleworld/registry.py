"""The sample image registry: Debian's docker-registry on 127.0.0.1:55000, storage in the state dir."""

from __future__ import annotations

import requests

from sampleworld.errors import SampleWorldError
from sampleworld.layout import HOST, PORTS, REGISTRY, StateDir
from sampleworld.services import Service

MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def _config_text(state: StateDir) -> str:
    # Plain http is fine: docker treats 127.0.0.0/8 registries as insecure-allowed by default.
    return (
        "version: 0.1\n"
        "log:\n"
        "  level: info\n"
        "  accesslog:\n"
        "    disabled: true\n"
        "storage:\n"
        "  filesystem:\n"
        f"    rootdirectory: {state.registry / 'data'}\n"
        "  delete:\n"
        "    enabled: true\n"
        "http:\n"
        f"  addr: {HOST}:{PORTS.registry}\n"
    )


def write_config(state: StateDir) -> None:
    config = state.registry / "config.yml"
    text = _config_text(state)
    if not config.is_file() or config.read_text() != text:
        config.write_text(text)


def service(state: StateDir) -> Service:
    config = state.registry / "config.yml"
    return Service(
        name="registry",
        port=PORTS.registry,
        argv=("docker-registry", "serve", str(config)),
        marker=str(config),
    )


def manifest(repository: str, tag: str, *, timeout: float = 10) -> requests.Response | None:
    """GET the manifest of repository:tag (repository without the registry host); None when absent."""
    url = f"http://{REGISTRY}/v2/{repository}/manifests/{tag}"
    try:
        response = requests.get(url, headers={"Accept": MANIFEST_TYPES}, timeout=timeout)
    except requests.RequestException as e:
        msg = f"the sample registry does not answer at {url}: {e}"
        raise SampleWorldError(msg) from e
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return response


def pushed_image_id(repository: str, tag: str) -> str | None:
    """The image ID (config digest) the registry holds for repository:tag, if any."""
    response = manifest(repository, tag)
    if response is None:
        return None
    config = response.json().get("config", {})
    digest = config.get("digest") if isinstance(config, dict) else None
    return digest if isinstance(digest, str) else None


def pushed_labels(repository: str, tag: str, *, timeout: float = 30) -> dict[str, str] | None:
    """The labels of the image config the registry holds for repository:tag; None when it holds none.

    What `up` compares a stand-in's recipe against: unlike an image ID, a label means the same on every
    engine (a containerd image store's image ID is the manifest digest, and a rebuild gets new timestamps).
    """
    response = manifest(repository, tag)
    if response is None:
        return None
    config = response.json().get("config", {})
    digest = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(digest, str):
        return None  # an index: not what `up` pushes
    url = f"http://{REGISTRY}/v2/{repository}/blobs/{digest}"
    try:
        blob = requests.get(url, timeout=timeout)
        blob.raise_for_status()
        labels = (blob.json().get("config") or {}).get("Labels") or {}
    except (requests.RequestException, ValueError) as e:
        msg = f"the sample registry does not give the config {digest} of {repository}:{tag}: {e}"
        raise SampleWorldError(msg) from e
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
