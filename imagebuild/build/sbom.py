"""The CycloneDX 1.6 SBOM of a built image: a pure function of its build record and pip inventory.

Components, each with a package URL and the hash that identifies it:

* base and donor images by manifest digest (``pkg:oci``);
* git sources by commit (``pkg:github`` or ``pkg:generic`` with its vcs_url; the commit as SHA-1);
* the AITER release wheel and PyPI pins with their sha256 (``pkg:pypi`` with file_name);
* the toolchain pin by exact version;
* every package of the python lock with its wheel's sha256 and the steps that install it;
* the pip inventory read from the built image: a distribution a pin or the lock accounts for is
  marked installed on that component, any other (the base image's own, the ones built from git
  sources) is listed on its own as "installed, not locked".

The document is deterministic (serial number derived from the image ID and inputs digest, the
timestamp is the build's finish) and validated against the CycloneDX 1.6 schema before anyone
writes it. cyclonedx-python-lib builds and validates it: the model, the serialisation and the
schema are the CycloneDX project's own, not ours.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from cyclonedx.model import (
    ExternalReference,
    ExternalReferenceType,
    HashAlgorithm,
    HashType,
    Property,
    XsUri,
)
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL
from packaging.utils import canonicalize_name

from imagebuild.build.record import BuildRecord
from imagebuild.errors import AttestationError
from imagebuild.inputs.python_lock import LockedPackage, PythonLock
from imagebuild.pins import PYPI_SIMPLE, Pin

PROPERTY = "imagebuild"  # namespace of our CycloneDX properties


@dataclass(frozen=True, kw_only=True)
class InstalledDistribution:
    """One entry of the pip inventory read from the built image."""

    name: str
    version: str


def _prop(name: str, value: str) -> Property:
    return Property(name=f"{PROPERTY}:{name}", value=value)


def _sha256(hex_digest: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=hex_digest.removeprefix("sha256:"))


def _repository_url(index: str) -> dict[str, str]:
    return {} if index == PYPI_SIMPLE else {"repository_url": index}


_ROLES = {
    "container": ComponentType.CONTAINER,
    "library": ComponentType.LIBRARY,
    "application": ComponentType.APPLICATION,
}
_HASHES = {"sha1": HashAlgorithm.SHA_1, "sha256": HashAlgorithm.SHA_256}
_LINKS = {"vcs": ExternalReferenceType.VCS, "distribution": ExternalReferenceType.DISTRIBUTION}


def pin_component(pin: Pin, lock: PythonLock | None) -> Component:
    """The pin's component, from what its kind says about it (Pin.describe)."""
    described = pin.describe()
    properties = [_prop("pin", pin.name), *(_prop(key, value) for key, value in described.properties)]
    locked = lock.get(described.python_project) if lock and described.python_project else None
    if locked is not None:
        properties.append(_prop("lock-groups", ",".join(locked.groups)))
    purl = described.purl
    return Component(
        type=_ROLES[described.role],
        name=described.name,
        version=described.version,
        bom_ref=f"pin:{pin.name}",
        purl=PackageURL(
            type=purl.type,
            namespace=purl.namespace,
            name=purl.name,
            version=purl.version,
            qualifiers=dict(purl.qualifiers),
        ),
        hashes=[HashType(alg=_HASHES[alg], content=content) for alg, content in described.hashes],
        external_references=[
            ExternalReference(type=_LINKS[kind], url=XsUri(url)) for kind, url in described.links
        ],
        properties=properties,
    )


def locked_component(package: LockedPackage, index: str) -> Component:
    return Component(
        type=ComponentType.LIBRARY,
        name=package.name,
        version=package.version,
        bom_ref=f"pylock:{package.name}",
        purl=PackageURL(
            type="pypi",
            name=package.name,
            version=package.version,
            qualifiers={"file_name": package.filename, **_repository_url(index)},
        ),
        hashes=[_sha256(package.sha256)],
        external_references=[
            ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(package.url))
        ],
        properties=[_prop("lock-groups", ",".join(package.groups))],
    )


def _python_identity(c: Component) -> tuple[str, str] | None:
    purl = c.purl
    if purl is None or purl.type != "pypi" or c.version is None:
        return None
    return canonicalize_name(purl.name), c.version


def components(record: BuildRecord, inventory: Iterable[InstalledDistribution]) -> list[Component]:
    """Every component of the image, pins first (file order), then the lock, then the inventory."""
    lock = record.lock
    found = [pin_component(pin, lock) for pin in record.pins]
    pinned = {identity[0] for c in found if (identity := _python_identity(c))}
    if lock is not None:
        found += [locked_component(p, lock.index) for p in lock.packages if p.name not in pinned]
    by_identity = {identity: c for c in found if (identity := _python_identity(c))}
    installed: set[tuple[str, str]] = set()
    for dist in _unique(inventory):
        key: tuple[str, str] = (canonicalize_name(dist.name), dist.version)
        known = by_identity.get(key)
        if known is not None:
            installed.add(key)
            continue
        found.append(
            Component(
                type=ComponentType.LIBRARY,
                name=key[0],
                version=dist.version,
                bom_ref=f"installed:{key[0]}@{dist.version}",
                purl=PackageURL(type="pypi", name=key[0], version=dist.version),
                properties=[_prop("installed", "true"), _prop("origin", "image inventory, not locked")],
            )
        )
    for identity, component in by_identity.items():
        component.properties.add(_prop("installed", "true" if identity in installed else "false"))
    return found


def _unique(inventory: Iterable[InstalledDistribution]) -> list[InstalledDistribution]:
    seen: dict[tuple[str, str], InstalledDistribution] = {}
    for dist in inventory:
        seen.setdefault((canonicalize_name(dist.name), dist.version), dist)
    return [seen[k] for k in sorted(seen)]


def make_sbom(record: BuildRecord, inventory: Iterable[InstalledDistribution]) -> str:
    """The SBOM as CycloneDX 1.6 JSON text, validated; ``inventory`` is what the built image's pip lists."""
    image = Component(
        type=ComponentType.CONTAINER,
        name=record.tag,
        version=record.image_id,
        bom_ref="image",
        hashes=[_sha256(record.image_id)],
        properties=[_prop("arch", record.arch), _prop("inputs-digest", record.inputs_digest)],
    )
    bom = Bom(
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"imagebuild:{record.image_id}:{record.inputs_digest}"),
        # The build's finish, not now: the same build gives the same document.
        metadata=BomMetaData(timestamp=record.finished, component=image),
    )
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="imagebuild", version=record.tool_version)
    )
    parts = components(record, inventory)
    for component in parts:
        bom.components.add(component)
    bom.register_dependency(image, parts)
    text = JsonV1Dot6(bom).output_as_string(indent=2) + "\n"
    validate_sbom(text)
    return text


def validate_sbom(text: str) -> None:
    """Raise AttestationError when ``text`` is not a valid CycloneDX 1.6 JSON document."""
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        msg = f"the SBOM is not valid CycloneDX 1.6: {error}; this is a bug in imagebuild, please report it"
        raise AttestationError(msg)
