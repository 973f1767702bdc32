"""A registry's failure, as the engine reported it, in plain words: which registry, what to do.

Pure text work (the credentials' origin comes from ``engine.docker``, the docker-py adapter), so the
wording is tested without an engine or a registry.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.errors import RegistryError

# Words of registry errors, as the engine reports them (distribution's error codes and Go's net errors).
CREDENTIAL_WORDS = ("unauthorized", "authentication required", "no basic auth credentials", "denied")
UNREACHABLE_WORDS = ("dial tcp", "connection refused", "no such host", "i/o timeout", "timeout", "eof")


@dataclass(frozen=True, kw_only=True)
class RegistryCredentials:
    """Whether docker has credentials for the registry, and where they came from (never the secret)."""

    found: bool
    source: str  # "auths in PATH" or "credential helper docker-credential-X (PATH)"
    config_file: str


def registry_error(what: str, registry: str, detail: str, credentials: RegistryCredentials) -> RegistryError:
    """One line for ``what`` (e.g. "push of HOST/REPO:TAG") failing at ``registry`` with ``detail``."""
    detail = detail.strip().splitlines()[0] if detail.strip() else "no detail"
    lowered = detail.lower()
    if any(word in lowered for word in CREDENTIAL_WORDS):
        if credentials.found:
            msg = f"{what}: registry {registry} refused the credentials from {credentials.source} ({detail}); run `docker login {registry}`"
        else:
            msg = f"{what}: registry {registry} wants credentials and docker has none for it ({credentials.config_file}); run `docker login {registry}`"
    elif "http response to https client" in lowered:
        msg = f"{what}: registry {registry} speaks plain HTTP; add it to the engine's insecure-registries (daemon.json) or serve it with TLS ({detail})"
    elif any(word in lowered for word in UNREACHABLE_WORDS):
        msg = f"{what}: registry {registry} is unreachable from the Docker engine ({detail}); check the address and that the registry runs (the engine, not imagebuild, connects to it)"
    elif "manifest unknown" in lowered or "not found" in lowered:
        msg = f"{what}: registry {registry} has no such image ({detail}); check the reference (publish prints it)"
    else:
        msg = f"{what}: registry {registry} failed: {detail}"
    return RegistryError(msg)
