"""SLSA v1 provenance of a built image, as an in-toto Statement v1: a pure function.

subject: the image ID (what ``docker inspect`` shows locally) and, once published, the pushed
repository digest. resolvedDependencies: every pin with its identity, every locked python package
with its wheel's sha256, and the files the build was made from (pins file, python lock, stage
files, arch profile, constraints, the rendered Dockerfile and the build context) by sha256.
runDetails: builder id and versions (imagebuild, Docker engine), start and finish times.

Same inputs, same bytes: golden-tested in tests/unit/test_provenance.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from imagebuild.build.sbom import pin_component
from imagebuild.inputs.python_lock import PythonLock
from imagebuild.pins import Pin, PinSet

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:imagebuild:buildtype:dockerfile-classic-builder:v1"
BUILDER_ID = "urn:imagebuild:builder:docker-classic"


@dataclass(frozen=True, kw_only=True)
class FileDigest:
    name: str  # relative to the checkout, e.g. stages/04-mori.toml
    sha256: str


@dataclass(frozen=True, kw_only=True)
class ProvenanceInputs:
    image_id: str  # sha256:...
    tag: str
    arch: str
    pushed: str | None  # repository@sha256:... once published
    started: datetime
    finished: datetime
    tool_version: str
    engine_version: str
    pins: PinSet
    lock: PythonLock | None
    files: tuple[FileDigest, ...]
    build_args: Mapping[str, str] = field(default_factory=dict)
    no_cache: bool = False
    network: str | None = None


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _pin(pin: Pin, lock: PythonLock | None) -> dict[str, Any]:
    """The pin as a resolved dependency, from what its kind says about it (Pin.describe)."""
    described = pin.describe()
    purl = pin_component(pin, lock).purl
    entry: dict[str, Any] = {
        "name": f"pin:{pin.name}",
        "uri": described.uri or (purl.to_string() if purl else pin.name),
    }
    if described.digest:
        entry["digest"] = dict(described.digest)
    entry["annotations"] = {"tracked": pin.tracked, **dict(described.annotations)}
    return entry


def _subjects(inputs: ProvenanceInputs) -> list[dict[str, Any]]:
    subjects = [{"name": inputs.tag, "digest": {"sha256": _hex(inputs.image_id)}}]
    if inputs.pushed:
        repository, _, digest = inputs.pushed.partition("@")
        subjects.append({"name": repository, "digest": {"sha256": _hex(digest)}})
    return subjects


def make_provenance(inputs: ProvenanceInputs) -> dict[str, Any]:
    dependencies = [_pin(p, inputs.lock) for p in inputs.pins]
    if inputs.lock is not None:
        components = (pin_component(p, inputs.lock) for p in inputs.pins)
        pinned = {c.purl.name for c in components if c.purl and c.purl.type == "pypi"}
        dependencies += [
            {
                "name": f"pylock:{p.name}",
                "uri": p.url,
                "digest": {"sha256": p.sha256},
                "annotations": {"version": p.version, "groups": ",".join(p.groups)},
            }
            for p in inputs.lock.packages
            if p.name not in pinned
        ]
    dependencies += [{"name": f.name, "digest": {"sha256": f.sha256}} for f in inputs.files]
    return {
        "_type": STATEMENT_TYPE,
        "subject": _subjects(inputs),
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "arch": inputs.arch,
                    "tag": inputs.tag,
                    "buildArgs": dict(sorted(inputs.build_args.items())),
                    "noCache": inputs.no_cache,
                    "network": inputs.network,
                },
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {
                    "id": BUILDER_ID,
                    "version": {"imagebuild": inputs.tool_version, "docker-engine": inputs.engine_version},
                },
                "metadata": {"startedOn": _time(inputs.started), "finishedOn": _time(inputs.finished)},
            },
        },
    }


def provenance_text(inputs: ProvenanceInputs) -> str:
    return json.dumps(make_provenance(inputs), indent=2, sort_keys=True) + "\n"
