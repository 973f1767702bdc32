"""docker's image references, defined once: their grammar, and where the image they name lives.

``[HOST[:PORT]/]COMPONENT[/COMPONENT...][:TAG][@DIGEST]`` (distribution/reference):
the host may hold upper case, the path components may not; a tag is up to 128
word characters, dots and dashes, not starting with a dot or dash. A name's
registry is its first component when that looks like a host (a dot, a port, or
localhost), else Docker Hub, as docker normalises it (``rocm/vllm-dev`` ->
docker.io, ``ubuntu`` -> ``library/ubuntu``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from imagebuild.errors import ConfigError

COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
NAME_RE = re.compile(rf"(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*")
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
MAX_NAME_CHARS = 255  # docker refuses longer repository names


# What follows the '@' of a digest: the algorithms docker takes. Not any 'word:' the OCI grammar allows,
# which 'user:pw@localhost:5000' would pass for one.
_DIGEST_ALGORITHM_RE = re.compile(r"sha(?:256|384|512):")
USERINFO_PROBLEM = "a reference carries no user name or password; use docker login"


def userinfo_problem(text: str) -> str | None:
    """Why ``text`` holds credentials before its host (``user:pass@host/repo``), or None.

    docker's grammar has none, and the value would be echoed in messages and kept in records. A
    digest is the last part of a reference: an '@' with a path or another '@' after it is userinfo,
    and so is one after ``NAME:WORD`` (no '/') that no ``sha256:`` follows.
    """
    before, at, after = text.partition("@")
    if not at:
        return None
    if "/" in after or "@" in after:
        return USERINFO_PROBLEM
    if ":" in before and "/" not in before and not _DIGEST_ALGORITHM_RE.match(after):
        return USERINFO_PROBLEM
    return None


def shown_reference(text: str) -> str:
    """``text`` for a message: the user info before its host, if it has any, replaced by ``<redacted>``.

    Here, where the grammar is known, and not in the secret detector: in free text (files verify
    scans, logs) ``word:word@host`` is an e-mail address or code far more often than a password."""
    if not userinfo_problem(text):
        return text
    ends = [i for i, c in enumerate(text) if c == "@" and not _DIGEST_ALGORITHM_RE.match(text, i + 1)]
    return "<redacted>" + text[ends[-1] :]


def tag_reference_problem(text: str) -> str | None:
    """Why ``text`` cannot name an image to tag (``NAME[:TAG]``, no digest), or None."""
    problem = userinfo_problem(text)
    if problem:
        return problem
    if "@" in text:
        return "a digest names an image, it cannot be tagged; give NAME[:TAG]"
    name, tag = text, None
    last = text.rsplit("/", 1)[-1]
    if ":" in last:  # a colon after the last slash starts the tag (one before it is a port)
        name, _, tag = text.rpartition(":")
    first, slash, _ = name.partition("/")
    # Only a first component that looks like a host is one (docker: `Upper/case` is a bad repository).
    host_like = "." in first or ":" in first or first == "localhost" or first.startswith("[")
    if not NAME_RE.fullmatch(name) or (slash and not host_like and not re.fullmatch(COMPONENT, first)):
        return (
            "not a valid image name: the path after the registry is lowercase letters, digits and "
            "'.', '_', '__' or '-' between them, components separated by '/'"
        )
    if len(name) > MAX_NAME_CHARS:
        return f"the name is {len(name)} characters long (at most {MAX_NAME_CHARS})"
    if tag is not None and not TAG_RE.fullmatch(tag):
        return f"tag {tag!r} is not a docker tag: 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
    return None


IMAGE_ID_RE = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def image_problem(text: str) -> str | None:
    """Why ``text`` names no image (an image ID, or ``NAME[:TAG][@sha256:DIGEST]``), or None."""
    if IMAGE_ID_RE.fullmatch(text):
        return None
    problem = userinfo_problem(text)
    if problem:
        return problem
    name, at, digest = text.partition("@")
    if at and not DIGEST_RE.fullmatch(digest):
        return f"digest {digest!r} is not 'sha256:' and 64 hex digits"
    return tag_reference_problem(name)


# Where an image lives ----------------------------------------------------------------------------------

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
REPOSITORY_PATH_RE = re.compile(rf"{COMPONENT}(?:/{COMPONENT})*")


@dataclass(frozen=True, kw_only=True)
class ImageName:
    """A normalised image name: where the registry is and which repository."""

    registry: str  # host[:port] as docker names it, docker.io for Docker Hub
    repository: str

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def base_url(self) -> str:
        scheme = "http" if is_loopback(self.api_host) else "https"
        return f"{scheme}://{self.api_host}/v2/{self.repository}"


def parse_image_name(image: str) -> ImageName:
    """Split ``[host[:port]/]path`` like docker; the tag lives in its own field."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, image
    if registry in _HUB_ALIASES:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not REPOSITORY_PATH_RE.fullmatch(path):
        msg = (
            f"image '{image}' is not a valid repository name (lowercase path components; "
            f"put the tag in `tag`, not in `image`)"
        )
        raise ConfigError(msg)
    return ImageName(registry=registry, repository=path)


def is_loopback(host_port: str) -> bool:
    """Whether a registry's host[:port] is this machine: docker speaks plain HTTP to those by default."""
    host = host_port
    if host.startswith("["):  # [::1]:5000
        host = host[1 : host.index("]")]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
