"""The only module that talks to docker-py: client, label lookup, build, import and push."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import docker.errors
from docker.models.images import Image

import docker
from sampleworld import log
from sampleworld.errors import SampleWorldError
from sampleworld.layout import ENSURE_DOCKER


def client() -> docker.DockerClient:
    """A client for a running engine; starts one with scripts/ensure-docker.sh when none answers."""
    try:
        found = docker.from_env(timeout=900)
        found.ping()
    except docker.errors.DockerException:
        log.info("docker: no engine answers; running scripts/ensure-docker.sh")
        done = subprocess.run(["bash", str(ENSURE_DOCKER)], check=False)
        if done.returncode != 0:
            msg = (
                f"no Docker engine and {ENSURE_DOCKER} failed (exit {done.returncode}); see its output above"
            )
            raise SampleWorldError(msg) from None
        found = docker.from_env(timeout=900)
        found.ping()
    return cast(docker.DockerClient, found)


def image_with_label(engine: docker.DockerClient, key: str, value: str) -> Image | None:
    images = cast(list[Image], engine.images.list(filters={"label": f"{key}={value}"}))
    return images[0] if images else None


def _raise_on_errors(lines: Iterable[Mapping[str, Any]], what: str) -> list[str]:
    kept: list[str] = []
    for line in lines:
        if "error" in line or "errorDetail" in line:
            tail = "".join(kept[-20:])
            msg = f"{what} failed: {line.get('error') or line.get('errorDetail')}\n{tail}"
            raise SampleWorldError(msg)
        text = line.get("stream") or line.get("status")
        if isinstance(text, str):
            kept.append(text if text.endswith("\n") else text + "\n")
    return kept


def build(engine: docker.DockerClient, context: Path, *, tag: str) -> Image:
    """Classic-builder build of context/Dockerfile (host network: the context may fetch from loopback)."""
    stream = engine.api.build(
        path=str(context), tag=tag, rm=True, forcerm=True, network_mode="host", decode=True, pull=False
    )
    _raise_on_errors(stream, f"docker build of {context}")
    return cast(Image, engine.images.get(tag))


def import_rootfs(
    engine: docker.DockerClient, tarball: Path, *, repository: str, tag: str, changes: list[str]
) -> Image:
    """`docker import` of a root file system tarball; `changes` are Dockerfile instructions (LABEL ...)."""
    reply = engine.api.import_image_from_file(str(tarball), repository=repository, tag=tag, changes=changes)
    for line in str(reply).splitlines():
        if line.strip() and "error" in json.loads(line):
            msg = f"docker import of {tarball} failed: {line}"
            raise SampleWorldError(msg)
    return cast(Image, engine.images.get(f"{repository}:{tag}"))


def push(engine: docker.DockerClient, image: Image, *, repository: str, tag: str) -> None:
    image.tag(repository, tag)
    stream = engine.api.push(repository, tag=tag, stream=True, decode=True)
    _raise_on_errors(stream, f"docker push {repository}:{tag}")


def image_size(image: Image) -> str:
    size = float(image.attrs.get("Size", 0))
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"
