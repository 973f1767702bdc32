"""Where Docker's containerd image store keeps an image's manifest: used by engine.docker only.

On that store an image ID is the digest of the image's manifest (or index), and ``docker image
inspect`` does not say which config the manifest names (before API 1.48). imagebuild's identity is
the config's digest, so it reads the manifest from the content store the engine's containerd keeps
under its data root (``<DockerRootDir>/containerd/daemon/io.containerd.content.v1.content``), checks
that the bytes hash to the image ID, and takes the config digest from it. Anything unexpected gives
None and the reason; the caller then says the identity is not known rather than guess it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CONTENT = Path("containerd/daemon/io.containerd.content.v1.content/blobs/sha256")
INDEXES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MAX_MANIFEST = 4 << 20


def config_digest(image_id: str, *, data_root: str, platform: tuple[str, str] = ("linux", "amd64")) -> tuple[str | None, str]:
    """(the config digest of the image ``image_id`` names, "") or (None, why it cannot be read)."""
    digest, reason = image_id, ""
    for _ in range(2):  # an index names the platform's manifest; that one names the config
        document, reason = _blob(Path(data_root) / CONTENT, digest)
        if document is None:
            return None, reason
        if document.get("mediaType") in INDEXES or "manifests" in document:
            chosen = [
                m for m in document.get("manifests") or []
                if isinstance(m, dict) and (m.get("platform") or {}).get("os") == platform[0]
                and (m.get("platform") or {}).get("architecture") == platform[1]
            ]  # fmt: skip
            if not chosen:
                return None, f"index {digest[:19]} names no {'/'.join(platform)} manifest"
            digest = str(chosen[0].get("digest"))
            continue
        config = document.get("config")
        if not isinstance(config, dict) or not str(config.get("digest", "")).startswith("sha256:"):
            return None, f"manifest {digest[:19]} names no config"
        return str(config["digest"]), ""
    return None, f"{image_id[:19]} is an index of indexes"


def _blob(content: Path, digest: str) -> tuple[dict[str, Any] | None, str]:
    path = content / digest.removeprefix("sha256:")
    try:
        if path.stat().st_size > MAX_MANIFEST:
            return None, f"{path} is too large for a manifest"
        data = path.read_bytes()
    except OSError as e:
        return None, f"cannot read {path} ({e.strerror})"
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        return None, f"{path} does not hash to {digest[:19]}"
    try:
        document = json.loads(data)
    except ValueError:
        return None, f"{path} is not JSON"
    return (document, "") if isinstance(document, dict) else (None, f"{path} is not a JSON object")
