"""SLSA v1 provenance of a built image, as an in-toto Statement v1: a pure function of its build record.

subject: the image identity (the normalised config's digest: the image ID on graph-driver stores),
the canonical manifest's digest where the build knows it, and, once published, the pushed
repository digest. resolvedDependencies: every pin with its identity, every locked python package
with its wheel's sha256, and the files the build was made from (pins file, python lock, stage
files, arch profile, constraints, the rendered Dockerfile and the build context) by sha256.
runDetails: builder id and versions (imagebuild, Docker engine), start and finish times.

Same inputs, same bytes: golden-tested in tests/unit/test_provenance.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from imagebuild.attest.statement import STATEMENT_TYPE, ImageIdentity
from imagebuild.build.record import BuildRecord
from imagebuild.build.sbom import pin_component
from imagebuild.inputs.python_lock import PythonLock
from imagebuild.pins import Pin

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:imagebuild:buildtype:dockerfile-classic-builder:v1"
BUILDER_ID = "urn:imagebuild:builder:docker-classic"


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


def _subjects(record: BuildRecord) -> list[dict[str, Any]]:
    """The image identity and, where known, its canonical manifest; once published, the pushed digest."""
    subjects = ImageIdentity(identity=record.image_id, manifest_digest=record.manifest_digest).subjects(record.tag)
    if record.pushed:
        repository, _, digest = record.pushed.partition("@")
        subjects.append({"name": repository, "digest": {"sha256": _hex(digest)}})
    return subjects


def make_provenance(record: BuildRecord, *, engine_version: str) -> dict[str, Any]:
    """The statement; ``engine_version`` is the engine's own (Engine.version), which the build does not know."""
    lock = record.lock
    dependencies = [_pin(p, lock) for p in record.pins]
    if lock is not None:
        components = (pin_component(p, lock) for p in record.pins)
        pinned = {c.purl.name for c in components if c.purl and c.purl.type == "pypi"}
        dependencies += [
            {
                "name": f"pylock:{p.name}",
                "uri": p.url,
                "digest": {"sha256": p.sha256},
                "annotations": {"version": p.version, "groups": ",".join(p.groups)},
            }
            for p in lock.packages
            if p.name not in pinned
        ]
    dependencies += [{"name": f.name, "digest": {"sha256": f.sha256}} for f in record.files]
    return {
        "_type": STATEMENT_TYPE,
        "subject": _subjects(record),
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "arch": record.arch,
                    "tag": record.tag,
                    "buildArgs": dict(sorted(record.build_args.items())),
                    "noCache": record.no_cache,
                    "network": record.network,
                },
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {
                    "id": BUILDER_ID,
                    "version": {"imagebuild": record.tool_version, "docker-engine": engine_version},
                },
                "metadata": {"startedOn": _time(record.started), "finishedOn": _time(record.finished)},
            },
        },
    }


def provenance_text(record: BuildRecord, *, engine_version: str) -> str:
    return json.dumps(make_provenance(record, engine_version=engine_version), indent=2, sort_keys=True) + "\n"
