"""Which Docker engine `docker` talks to here, found as the docker CLI finds it.

A node's job imports with this package and then runs `docker image inspect` and `docker run`: both
must reach the same engine. On a node set up for rootless Docker (its setup tool creates a context
and `docker context use` makes it current) DOCKER_HOST is unset and /var/run/docker.sock may be
another engine, or none.

The CLI's order: DOCKER_HOST; else the context DOCKER_CONTEXT names; else the config's
``currentContext`` (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``); else the default
socket. A context other than ``default`` is read from the CLI's context store beside that config:
``contexts/meta/<sha256 of its name>/meta.json`` (its ``docker`` endpoint's ``Host`` and
``SkipTLSVerify``) and ``contexts/tls/<same>/docker/{ca,cert,key}.pem``. A config the CLI cannot
parse leaves it on the default context (it warns); so does this, and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

DEFAULT_HOST = "unix:///var/run/docker.sock"
DEFAULT_CONTEXT = "default"
DEFAULT_SOURCE = "the default socket"
TLS_FILES = ("ca.pem", "cert.pem", "key.pem")


class ContextError(ValueError):
    """A docker context that is named but cannot be used: one line naming it and its file."""


@dataclass(frozen=True)
class Tls:
    """TLS to a tcp:// engine: the files present (CA, client certificate and key) and whether to verify."""

    ca: Path | None
    cert: Path | None
    key: Path | None
    verify: bool


@dataclass(frozen=True)
class Endpoint:
    host: str
    source: str  # what chose it: DOCKER_HOST, docker context "rootless", from DOCKER_CONTEXT, ...
    tls: Tls | None = None
    context: str = ""  # the docker context's name, when one chose it

    @property
    def chosen(self) -> str:
        """What a message about this address adds: what chose it, unless DOCKER_HOST or the plain default did."""
        return "" if self.source in ("DOCKER_HOST", DEFAULT_SOURCE) else f" ({self.source})"


def config_dir(environ: Mapping[str, str]) -> Path:
    """The docker CLI's config directory: DOCKER_CONFIG, else ~/.docker."""
    configured = environ.get("DOCKER_CONFIG")
    return Path(configured) if configured else Path.home() / ".docker"


def engine_endpoint(environ: Mapping[str, str] | None = None) -> Endpoint:
    """The engine `docker` would use with this environment (ContextError for a context it cannot use)."""
    env = os.environ if environ is None else environ
    host = env.get("DOCKER_HOST")
    if host:
        return Endpoint(host=host, source="DOCKER_HOST", tls=_env_tls(env) if host.startswith("tcp://") else None)
    directory = config_dir(env)
    name, chosen_by, unread = _context_name(env, directory)
    if name == DEFAULT_CONTEXT:
        return Endpoint(host=DEFAULT_HOST, source=f"{DEFAULT_SOURCE}, {unread}" if unread else DEFAULT_SOURCE)
    return _context_endpoint(directory, name, chosen_by)


def _env_tls(env: Mapping[str, str]) -> Tls | None:
    """DOCKER_TLS_VERIFY's TLS, its files in DOCKER_CERT_PATH (else ~/.docker), as the CLI reads them."""
    if not env.get("DOCKER_TLS_VERIFY"):
        return None
    certs = Path(env.get("DOCKER_CERT_PATH") or Path.home() / ".docker")
    ca, cert, key = (certs / name for name in TLS_FILES)
    return Tls(ca=ca, cert=cert, key=key, verify=True)


def _context_name(env: Mapping[str, str], directory: Path) -> tuple[str, str, str]:
    """(the context's name, what named it, why the config was not read or "")."""
    named = env.get("DOCKER_CONTEXT")
    if named:
        return named, "from DOCKER_CONTEXT", ""
    config_file = directory / "config.json"
    try:
        config: Any = json.loads(config_file.read_bytes())
    except FileNotFoundError:
        return DEFAULT_CONTEXT, "", ""
    except (OSError, ValueError) as e:
        return DEFAULT_CONTEXT, "", f"{config_file} not read: {getattr(e, 'strerror', None) or e}"
    current = config.get("currentContext") if isinstance(config, dict) else None
    if not isinstance(current, str) or not current:
        return DEFAULT_CONTEXT, "", ""
    return current, f"the current one in {config_file}", ""


def _context_endpoint(directory: Path, name: str, chosen_by: str) -> Endpoint:
    context_id = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()
    meta_file = directory / "contexts" / "meta" / context_id / "meta.json"
    described = f"docker context {json.dumps(name)}, {chosen_by}"
    try:
        meta: Any = json.loads(meta_file.read_bytes())
    except FileNotFoundError:
        msg = f"{described}, does not exist (no {meta_file}); `docker context ls` lists the contexts, or set DOCKER_HOST"
        raise ContextError(msg) from None
    except (OSError, ValueError) as e:
        msg = f"{described}: cannot read {meta_file} ({getattr(e, 'strerror', None) or e}); recreate the context, or set DOCKER_HOST"
        raise ContextError(msg) from None
    endpoints = meta.get("Endpoints") if isinstance(meta, dict) else None
    docker = endpoints.get("docker") if isinstance(endpoints, dict) else None
    host = docker.get("Host") if isinstance(docker, dict) else None
    if not isinstance(host, str) or not host:
        msg = f"{described}: {meta_file} names no docker endpoint host; recreate the context, or set DOCKER_HOST"
        raise ContextError(msg)
    assert isinstance(docker, dict)
    tls_dir = directory / "contexts" / "tls" / context_id / "docker"
    ca, cert, key = (path if path.is_file() else None for path in (tls_dir / n for n in TLS_FILES))
    skip_verify = docker.get("SkipTLSVerify") is True
    tls = Tls(ca=ca, cert=cert, key=key, verify=not skip_verify) if skip_verify or ca or cert or key else None
    return Endpoint(host=host, source=described, tls=tls if host.startswith("tcp://") else None, context=name)
