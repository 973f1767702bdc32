"""Where the Docker engine is: found as the docker CLI finds it, and an address checked before connecting."""

from __future__ import annotations

import docker.errors
import docker.tls
import docker.utils

from imagebuild.engine.unreachable import ADDRESS_FORMS
from imagebuild.errors import ConfigError
from imagebuild.importer.docker_context import ContextError, Endpoint, Tls, engine_endpoint
from imagebuild.launcher.text import shown, text_problem


def docker_endpoint() -> Endpoint:
    """DOCKER_HOST, else the docker context (DOCKER_CONTEXT, else the config's current one), else the
    default socket: the engine `docker` itself would use here, and the shipped importer too (its
    ``docker_context``), not docker-py's reading, which ignores DOCKER_CONTEXT."""
    try:
        return engine_endpoint()
    except ContextError as e:
        raise ConfigError(str(e)) from None


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


def context_tls(tls: Tls | None) -> docker.tls.TLSConfig | bool:
    """docker-py's TLS for a docker context's endpoint: its files, verified unless it says SkipTLSVerify."""
    if tls is None:
        return False
    client_cert = (str(tls.cert), str(tls.key)) if tls.cert and tls.key else None
    try:
        return docker.tls.TLSConfig(client_cert=client_cert, ca_cert=str(tls.ca) if tls.ca else None, verify=tls.verify)
    except docker.errors.TLSParameterError as e:
        msg = f"the docker context's TLS files: {e}; recreate the context, or set DOCKER_HOST"
        raise ConfigError(msg) from e
