"""SLSA v1 provenance: a pure function of the build's inputs and record, checked against a golden file.

Regenerate the golden file after an intended change with:
    IMAGEBUILD_UPDATE_GOLDEN=1 pytest tests/unit/test_provenance.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from imagebuild.attest.statement import CONFIG_MEDIA_TYPE, MANIFEST_MEDIA_TYPE
from imagebuild.build.provenance import make_provenance, provenance_text
from imagebuild.build.record import BuildRecord
from tests.unit.attest_support import FILES, build_record, lock, pins

GOLDEN = Path(__file__).parent / "golden" / "provenance.intoto.json"
ENGINE = "26.1.5"


def statement(record: BuildRecord | None = None) -> dict[str, Any]:
    return make_provenance(record or build_record(), engine_version=ENGINE)


def test_provenance_matches_the_golden_file() -> None:
    text = provenance_text(build_record(), engine_version=ENGINE)
    if os.environ.get("IMAGEBUILD_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_subject_is_the_image_id_and_the_pushed_digest_once_published() -> None:
    made = statement()
    assert made["_type"] == "https://in-toto.io/Statement/v1"
    assert made["predicateType"] == "https://slsa.dev/provenance/v1"
    image = {"name": "imagebuild/kimi-k3:gfx942", "digest": {"sha256": "9" * 64}, "mediaType": CONFIG_MEDIA_TYPE}
    assert made["subject"] == [image]
    pushed = statement(build_record(pushed="registry.example/kimi-k3@sha256:" + "7" * 64))
    assert pushed["subject"][1] == {"name": "registry.example/kimi-k3", "digest": {"sha256": "7" * 64}}


def test_subjects_name_the_canonical_manifest_where_the_build_knows_it() -> None:
    from dataclasses import replace

    made = statement(replace(build_record(), manifest_digest="sha256:" + "6" * 64))
    assert [s["digest"]["sha256"] for s in made["subject"]] == ["9" * 64, "6" * 64]
    assert made["subject"][1]["mediaType"] == MANIFEST_MEDIA_TYPE


def test_every_pin_lock_entry_and_input_file_is_a_resolved_dependency() -> None:
    deps = {d["name"]: d for d in statement()["predicate"]["buildDefinition"]["resolvedDependencies"]}
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
    run = statement()["predicate"]["runDetails"]
    assert run["builder"]["version"] == {"imagebuild": "0.1.0", "docker-engine": "26.1.5"}
    assert run["metadata"] == {"startedOn": "2026-11-30T11:40:05Z", "finishedOn": "2026-11-30T12:01:30Z"}
    assert json.loads(provenance_text(build_record(), engine_version=ENGINE)) == statement()
