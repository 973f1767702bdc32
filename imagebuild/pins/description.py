"""What the SBOM and the provenance say about a locked pin, in neither's format.

Each kind of pin describes itself (``Pin.describe`` in kinds.py and files.py); imagebuild.build.sbom
turns the description into a CycloneDX component and imagebuild.build.provenance into
a SLSA resolved dependency. So a new kind of pin is described where it is
defined, and neither document needs to know the kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

Role = Literal["container", "library", "application"]
Link = Literal["vcs", "distribution"]


@dataclass(frozen=True, kw_only=True)
class PackageUrl:
    """The parts of a package URL (purl); the SBOM builds the purl from them."""

    type: str  # oci, github, generic, pypi
    name: str
    version: str
    namespace: str | None = None
    qualifiers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class PinDescription:
    role: Role  # CycloneDX component type
    name: str
    version: str
    purl: PackageUrl
    hashes: tuple[tuple[Literal["sha1", "sha256"], str], ...] = ()  # (algorithm, hex)
    links: tuple[tuple[Link, str], ...] = ()
    properties: tuple[tuple[str, str], ...] = ()  # after the pin's name, imagebuild:<key>
    python_project: str | None = None  # a python package the python lock may list too (its groups)
    # The provenance's resolved dependency: its uri (None: the purl) and digest ({} for none).
    uri: str | None = None
    digest: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()  # after "tracked"


def git_package_url(url: str, commit: str) -> tuple[str, PackageUrl]:
    """(the repository's path, its purl): pkg:github for GitHub repositories, else pkg:generic with the vcs_url."""
    parts = urlsplit(url)
    path = parts.path.strip("/").removesuffix(".git")
    if parts.hostname == "github.com" and path.count("/") == 1:
        owner, repo = path.split("/")
        return path, PackageUrl(type="github", namespace=owner, name=repo, version=commit)
    purl = PackageUrl(
        type="generic",
        name=path.rsplit("/", 1)[-1],
        version=commit,
        qualifiers=(("vcs_url", f"git+{url}@{commit}"),),
    )
    return path, purl
