"""Where the Docker engine is: the docker context's endpoint, and an address checked before connecting."""

from __future__ import annotations

import os

import docker.errors
import docker.utils
from docker.context import ContextAPI

from imagebuild.engine.unreachable import ADDRESS_FORMS
from imagebuild.errors import ConfigError
from imagebuild.launcher.text import shown, text_problem


def context_host() -> str | None:
    """The endpoint of the current docker context, when DOCKER_HOST is unset."""
    if os.environ.get("DOCKER_HOST"):
        return None
    try:
        context = ContextAPI.get_current_context()
    except Exception:  # a broken ~/.docker must not hide the real error below
        return None
    host = context.Host if context is not None else None
    return str(host) if host else None


def check_address(address: str, source: str) -> None:
    """A malformed address is bad input, not a missing engine: said before anything connects."""
    problem = text_problem(address)
    if problem:
        msg = f"{source} = {shown(address)} {problem}; use {ADDRESS_FORMS}"
        raise ConfigError(msg)
    try:
        docker.utils.parse_host(address, False, False)
    except (docker.errors.DockerException, ValueError) as e:
        detail = "a port is required" if "port is required" in str(e) else "not understood"
        msg = f"{source} = {address!r} is not a Docker engine address ({detail}); use {ADDRESS_FORMS}"
        raise ConfigError(msg) from e
