"""SLSA v1 provenance: a pure function of the build's inputs and record, checked against a golden file.

Regenerate the golden file after an intended change with:
    IMAGEBUILD_UPDATE_GOLDEN=1 pytest tests/unit/test_provenance.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from imagebuild.build.provenance import FileDigest, ProvenanceInputs, make_provenance, provenance_text
from tests.unit.attest_support import FINISHED, IMAGE_ID, STARTED, lock, pins

GOLDEN = Path(__file__).parent / "golden" / "provenance.intoto.json"
FILES = (
    FileDigest(name="pins.toml", sha256="a" * 64),
    FileDigest(name="pylock.toml", sha256="b" * 64),
    FileDigest(name="stages/04-mori.toml", sha256="c" * 64),
    FileDigest(name="Dockerfile", sha256="d" * 64),
    FileDigest(name="build-context.tar", sha256="e" * 64),
)


def inputs(pushed: str | None = None) -> ProvenanceInputs:
    return ProvenanceInputs(
        image_id=IMAGE_ID,
        tag="imagebuild/kimi-k3:gfx942",
        arch="gfx942",
        pushed=pushed,
        started=STARTED,
        finished=FINISHED,
        tool_version="0.1.0",
        engine_version="26.1.5",
        pins=pins(),
        lock=lock(),
        files=FILES,
        build_args={"MAX_JOBS": "2"},
        network="host",
    )


def test_provenance_matches_the_golden_file() -> None:
    text = provenance_text(inputs())
    if os.environ.get("IMAGEBUILD_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_subject_is_the_image_id_and_the_pushed_digest_once_published() -> None:
    statement = make_provenance(inputs())
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [{"name": "imagebuild/kimi-k3:gfx942", "digest": {"sha256": "9" * 64}}]
    pushed = make_provenance(inputs("registry.example/kimi-k3@sha256:" + "7" * 64))
    assert pushed["subject"][1] == {"name": "registry.example/kimi-k3", "digest": {"sha256": "7" * 64}}


def test_every_pin_lock_entry_and_input_file_is_a_resolved_dependency() -> None:
    deps = {
        d["name"]: d
        for d in make_provenance(inputs())["predicate"]["buildDefinition"]["resolvedDependencies"]
    }
    pinset = pins()
    assert deps["pin:mori"]["digest"] == {"gitCommit": pinset.get("mori").identity}
    assert deps["pin:mori"]["uri"] == "git+git://127.0.0.1:55418/ROCm/mori.git"
    assert deps["pin:base"]["digest"] == {"sha256": "1" * 64}
    assert deps["pin:aiter"]["digest"] == {"sha256": "4" * 64}
    assert deps["pin:rust"]["uri"] == "pkg:generic/rust@1.88.0"
    assert {f"pin:{p.name}" for p in pinset} <= deps.keys()
    for package in lock().packages:
        if package.name != "flydsl":  # a pin already
            assert deps[f"pylock:{package.name}"]["digest"] == {"sha256": package.sha256}
    for f in FILES:
        assert deps[f.name]["digest"] == {"sha256": f.sha256}


def test_run_details_name_builder_versions_and_times() -> None:
    run = make_provenance(inputs())["predicate"]["runDetails"]
    assert run["builder"]["version"] == {"imagebuild": "0.1.0", "docker-engine": "26.1.5"}
    assert run["metadata"] == {"startedOn": "2026-11-30T11:40:05Z", "finishedOn": "2026-11-30T12:01:30Z"}
    assert json.loads(provenance_text(inputs())) == make_provenance(inputs())
