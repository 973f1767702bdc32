"""The CycloneDX 1.6 SBOM of a built image: a pure function of its build record and what its layers hold.

Components, each with a package URL and the hash that identifies it:

* base and donor images by manifest digest (``pkg:oci``);
* git sources by commit (``pkg:github`` or ``pkg:generic`` with its vcs_url; the commit as SHA-1);
* the AITER release wheel and PyPI pins with their sha256 (``pkg:pypi`` with file_name);
* the toolchain pin by exact version;
* every package of the python lock with its wheel's sha256 and the steps that install it;
* every Python distribution in every site-packages and dist-packages directory of the image (read
  from its layers, imagebuild.attest.image_contents): one a pin or the lock accounts for is marked
  installed on that component, with its location; any other (the base image's own, the ones built
  from git sources) is listed on its own, ``imagebuild:origin`` saying whether the base image's
  layers hold it;
* the operating system (os-release) and every package dpkg's status lists as installed, with
  ``pkg:deb/<distro>/<name>@<version>?arch=...&distro=<id>-<version_id>``, as scanners look them up;
  one apt.lock.toml locks at that version carries the .deb's sha256 (from the snapshot's signed
  index), its snapshot as ``imagebuild:apt-snapshot`` and ``imagebuild:apt-lock`` = downloaded or
  in base;
* dependencies: the image on every component; a Debian package on the installed packages its
  Depends name; a distribution on those its Requires-Dist name in the same directory.

The document is deterministic (serial number derived from the image ID and inputs digest, the
timestamp is the build's finish) and validated against the CycloneDX 1.6 schema before anyone
writes it. cyclonedx-python-lib builds and validates it: the model, the serialisation and the
schema are the CycloneDX project's own, not ours.
"""

from __future__ import annotations

import uuid

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

from imagebuild.attest.image_contents import DebianPackage, ImageContents, OsRelease, PythonDistribution
from imagebuild.build.record import BuildRecord
from imagebuild.errors import AttestationError
from imagebuild.inputs.apt_lock import AptPackage
from imagebuild.inputs.python_lock import LockedPackage, PythonLock
from imagebuild.pins import PYPI_SIMPLE, Pin

PROPERTY = "imagebuild"  # namespace of our CycloneDX properties
BASE_ORIGIN = "base image"  # imagebuild:origin of what the base image's layers hold
BUILT_ORIGIN = "built image layers, not locked"


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


def components(record: BuildRecord, contents: ImageContents) -> list[Component]:
    """Every component of the image: pins (file order), the lock, the OS and its packages, every Python
    distribution the image's site directories hold that no pin or lock accounts for."""
    lock = record.lock
    found = [pin_component(pin, lock) for pin in record.pins]
    pinned = {identity[0] for c in found if (identity := _python_identity(c))}
    if lock is not None:
        found += [locked_component(p, lock.index) for p in lock.packages if p.name not in pinned]
    by_identity = {identity: c for c in found if (identity := _python_identity(c))}
    installed: set[tuple[str, str]] = set()
    for dist in contents.python:
        key = (canonicalize_name(dist.name), dist.version)
        known = by_identity.get(key)
        if known is not None:
            installed.add(key)
            known.properties.add(_prop("location", dist.location))
            continue
        found.append(installed_component(dist, contents))
    for identity, component in by_identity.items():
        component.properties.add(_prop("installed", "true" if identity in installed else "false"))
    if contents.os is not None:
        found.append(os_component(contents.os))
        locked = _apt_locked(record)
        found += [debian_component(package, contents, locked) for package in contents.debian]
    return found


def _origin(layer: int, contents: ImageContents) -> Property:
    return _prop("origin", BASE_ORIGIN if contents.from_base(layer) else BUILT_ORIGIN)


def installed_component(dist: PythonDistribution, contents: ImageContents) -> Component:
    """A distribution found in a site directory that no pin or lock accounts for (the base's, MoRI's build)."""
    name = canonicalize_name(dist.name)
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=dist.version,
        bom_ref=f"python:{dist.location}/{name}@{dist.version}",
        purl=PackageURL(type="pypi", name=name, version=dist.version),
        properties=[
            _prop("installed", "true"),
            _prop("location", dist.location),
            _origin(dist.layer, contents),
        ],
    )


def os_component(release: OsRelease) -> Component:
    """The operating system, as scanners (Trivy, Grype) read it to pick the advisories of its packages."""
    return Component(
        type=ComponentType.OPERATING_SYSTEM,
        name=release.id,
        version=release.version_id or None,
        bom_ref="os",
        description=release.pretty_name or None,
    )


def debian_purl(package: DebianPackage, release: OsRelease) -> PackageURL:
    qualifiers = {"arch": package.architecture, "distro": release.distro}
    if package.source:
        qualifiers["upstream"] = package.source
    return PackageURL(
        type="deb", namespace=release.id, name=package.name, version=package.version, qualifiers=qualifiers
    )


def _apt_locked(record: BuildRecord) -> dict[tuple[str, str], tuple[str, AptPackage]]:
    """(name, version) -> (snapshot, the locked package) of the record's apt lock, for its dpkg arches."""
    lock = record.apt_lock
    if lock is None:
        return {}
    return {(p.name, p.version): (lock.snapshot, p) for entry in lock.architectures for p in entry.packages}


def debian_component(
    package: DebianPackage,
    contents: ImageContents,
    locked: dict[tuple[str, str], tuple[str, AptPackage]] | None = None,
) -> Component:
    assert contents.os is not None
    properties = [_origin(package.layer, contents)]
    hashes = []
    if (found := (locked or {}).get((package.name, package.version))) is not None:
        snapshot, entry = found
        properties += [
            _prop("apt-snapshot", snapshot),
            _prop("apt-lock", "in base" if entry.in_base else "downloaded"),
        ]
        hashes = [_sha256(entry.sha256)] if entry.sha256 else []
    return Component(
        type=ComponentType.LIBRARY,
        name=package.name,
        version=package.version,
        bom_ref=f"deb:{package.name}:{package.architecture}",
        purl=debian_purl(package, contents.os),
        hashes=hashes,
        properties=properties,
    )


def dependency_relations(parts: list[Component], contents: ImageContents) -> dict[str, list[str]]:
    """bom-ref -> the bom-refs it depends on, where the image says: dpkg's Depends (the first alternative
    installed), a distribution's Requires-Dist without an extra (in its own site directory)."""
    refs = {str(c.bom_ref.value) for c in parts}
    accounted = {
        identity: str(c.bom_ref.value)
        for c in parts
        if (identity := _python_identity(c)) and not str(c.bom_ref.value).startswith("python:")
    }
    relations: dict[str, list[str]] = {}
    debian = {p.name: f"deb:{p.name}:{p.architecture}" for p in contents.debian}
    for package in contents.debian:
        wanted = [next((debian[n] for n in alts if n in debian), None) for alts in package.depends]
        relations[f"deb:{package.name}:{package.architecture}"] = sorted(
            {w for w in wanted if w and w in refs}
        )
    python = {(d.location, canonicalize_name(d.name)): _python_ref(d, accounted) for d in contents.python}
    for dist in contents.python:
        needed = {python.get((dist.location, canonicalize_name(r))) for r in dist.requires}
        relations[_python_ref(dist, accounted)] = sorted(n for n in needed if n)
    return {ref: deps for ref, deps in relations.items() if ref in refs}


def _python_ref(dist: PythonDistribution, accounted: dict[tuple[str, str], str]) -> str:
    """The distribution's component: the pin's or lock's that accounts for it, else its own."""
    key = (canonicalize_name(dist.name), dist.version)
    return accounted.get(key) or f"python:{dist.location}/{key[0]}@{dist.version}"


def make_sbom(record: BuildRecord, contents: ImageContents) -> str:
    """The SBOM as CycloneDX 1.6 JSON text, validated; ``contents``: what the built image's layers hold."""
    properties = [_prop("arch", record.arch), _prop("inputs-digest", record.inputs_digest)]
    if record.manifest_digest:
        properties.append(_prop("manifest-digest", record.manifest_digest))
    image = Component(
        type=ComponentType.CONTAINER,
        name=record.tag,
        version=record.image_id,
        bom_ref="image",
        hashes=[_sha256(record.image_id)],
        properties=properties,
    )
    bom = Bom(
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"imagebuild:{record.image_id}:{record.inputs_digest}"),
        # The build's finish, not now: the same build gives the same document.
        metadata=BomMetaData(timestamp=record.finished, component=image),
    )
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="imagebuild", version=record.tool_version)
    )
    parts = components(record, contents)
    by_ref = {str(c.bom_ref.value): c for c in parts}
    for component in parts:
        bom.components.add(component)
    bom.register_dependency(image, parts)
    for ref, needed in dependency_relations(parts, contents).items():
        if needed:
            bom.register_dependency(by_ref[ref], [by_ref[n] for n in needed])
    text = JsonV1Dot6(bom).output_as_string(indent=2) + "\n"
    validate_sbom(text)
    return text


def validate_sbom(text: str) -> None:
    """Raise AttestationError when ``text`` is not a valid CycloneDX 1.6 JSON document."""
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        msg = f"the SBOM is not valid CycloneDX 1.6: {error}; this is a bug in imagebuild, please report it"
        raise AttestationError(msg)
