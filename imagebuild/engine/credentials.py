"""Registry credentials as docker resolves them, through docker-py's own auth module.

The docker config (DOCKER_CONFIG, else ~/.docker/config.json) is read as the CLI
reads it: a ``credHelpers`` entry for the registry, else the ``credsStore``, else
the inline ``auths`` entry. lock asks for the (user, secret) pair; push and pull
need to know where credentials came from, to say so when the registry refuses them.
A config file that is not a JSON object is bad input, said as such: docker-py reads
it as empty, and the registry's refusal would then blame credentials docker lacks.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import docker.auth
import docker.errors
import docker.utils.config

from imagebuild.engine.registry_errors import RegistryCredentials, registry_error
from imagebuild.engine.unreachable import plain_reason
from imagebuild.errors import ConfigError, RegistryError


def check_config_file() -> None:
    """Refuse a docker config that exists but is not a JSON object (docker-py would ignore it)."""
    found = docker.utils.config.find_config_file()
    if not found:
        return
    try:
        data = json.loads(Path(found).read_bytes())
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        msg = f"{found}: the docker config cannot be read as JSON ({why}); fix it, or move it away and run `docker login` again"
        raise ConfigError(msg) from e
    if not isinstance(data, dict):
        msg = f"{found}: the docker config is not a JSON object; fix it, or move it away and run `docker login` again"
        raise ConfigError(msg)


def registry_credentials(registry: str) -> tuple[str, str] | None:
    """The (user, secret) docker would use for ``registry`` (host[:port]; ``docker.io`` for Docker Hub).

    docker-py reads the docker config (DOCKER_CONFIG, else ~/.docker/config.json)
    as the CLI does: a ``credHelpers`` entry for the registry, else the
    ``credsStore``, else the inline ``auths`` entry. An identity token comes
    back as ``("<token>", token)``, the credential helpers' convention. None
    when docker has no credentials for the registry.
    """
    check_config_file()
    where = docker.utils.config.find_config_file() or "the docker config"
    try:
        with warnings.catch_warnings():
            # docker-py warns when a helper is missing, then raises StoreError: report that once.
            warnings.simplefilter("ignore")
            entry = docker.auth.load_config().resolve_authconfig(registry)
    except docker.errors.DockerException as e:
        msg = f"{where}: cannot read the credentials for {registry} ({plain_reason(e)}); fix the docker config or run `docker login {registry}`"
        raise ConfigError(msg) from e
    # An auths entry that is not base64 of 'user:password', or a helper's bad JSON:
    except (KeyError, ValueError) as e:
        msg = f"{where}: the credentials for {registry} are malformed ({type(e).__name__}: {e}); run `docker login {registry}` again"
        raise ConfigError(msg) from e
    if not entry:
        return None
    if entry.get("IdentityToken"):
        return docker.auth.TOKEN_USERNAME, str(entry["IdentityToken"])
    user = entry.get("username") or entry.get("Username")
    secret = entry.get("password") or entry.get("Password")
    return (str(user), str(secret)) if user and secret else None


class _Credentials:
    """What docker's config holds for one registry, and where it came from (for messages)."""

    def __init__(self, registry: str) -> None:
        self.registry = registry
        self.config_file = docker.utils.config.find_config_file() or "~/.docker/config.json (absent)"
        auth = docker.auth.load_config()
        store = auth.get_credential_store(registry)
        self.source = (
            f"credential helper docker-credential-{store} ({self.config_file})"
            if store
            else f"auths in {self.config_file}"
        )
        self.config: dict[str, Any] | None = auth.resolve_authconfig(registry)


def credentials_for(registry: str) -> _Credentials:
    check_config_file()
    try:
        with warnings.catch_warnings():  # docker-py warns of a missing helper; the error below names it
            warnings.simplefilter("ignore", UserWarning)
            return _Credentials(registry)
    except docker.errors.DockerException as e:
        msg = f"docker's credentials for {registry} could not be read: {plain_reason(e)}; fix the credential helper or run `docker login {registry}`"
        raise RegistryError(msg) from e


def registry_failure(what: str, registry: str, detail: str, credentials: _Credentials) -> RegistryError:
    return registry_error(
        what,
        registry,
        detail,
        RegistryCredentials(
            found=bool(credentials.config), source=credentials.source, config_file=credentials.config_file
        ),
    )
