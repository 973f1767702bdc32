"""Removing a test's own images, so its next build starts from the layers other tags still hold."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import docker

# Per checkout: several checkouts share one Docker engine, and a shared tag would be overwritten.
CHECKOUT = hashlib.sha256(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:8]


def remove_images(*tags: str) -> None:
    """Only the given tags; untagged parents (the layer cache) go with them, others' images stay."""
    api = docker.from_env().api
    for tag in tags:
        for name in (tag, f"{tag}-cache"):
            with contextlib.suppress(docker.errors.ImageNotFound):
                api.remove_image(name)
